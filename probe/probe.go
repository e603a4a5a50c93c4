// Package probe owns the probe sockets: it sends ICMP echo and ICMP
// timestamp requests to a pool of reflectors, matches the answers by peer,
// id, sequence and payload, and hands the delays on as estimator.Samples.
// The Pool keeps a set of active reflectors, replaces the ones that fail,
// stop answering or contradict themselves, and idles with the link; each
// Target probes one reflector, polled by a Pacer from the loop that uses
// its samples (see pace.go). Time comes from an injected Clock.
package probe

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/autoshape/autoshape/estimator"
)

// A Method is how a reflector is probed.
type Method int

// Probe methods.
const (
	// Echo sends ICMP (or ICMPv6) echo requests: round trip times only.
	Echo Method = iota
	// Timestamp sends ICMP timestamp requests (IPv4 only): one-way delays
	// in both directions, at 1 ms resolution.
	Timestamp
	// Auto tries timestamps and falls back to echo, per reflector, when
	// they are never answered (CGNAT and Starlink drop them), and for IPv6.
	Auto
)

// String returns "echo", "timestamp" or "auto".
func (m Method) String() string {
	switch m {
	case Echo:
		return "echo"
	case Timestamp:
		return "timestamp"
	case Auto:
		return "auto"
	}
	return fmt.Sprintf("method(%d)", int(m))
}

// ParseMethod parses "echo", "timestamp" or "auto".
func ParseMethod(s string) (Method, error) {
	switch strings.ToLower(s) {
	case "echo":
		return Echo, nil
	case "timestamp":
		return Timestamp, nil
	case "auto":
		return Auto, nil
	}
	return 0, fmt.Errorf("unknown probe method %q (known: echo, timestamp, auto)", s)
}

// A Result is the fate of one probe: answered, with the samples the answer
// gave (one RTT for echo; one-way delays up and down for a timestamp), or
// lost (no matching answer within the deadline).
type Result struct {
	Reflector netip.Addr
	Seq       int
	Sent      time.Time
	Lost      bool
	// Inconsistent marks an answer that gave no sample because it
	// contradicted itself: a timestamp reply whose one-way delays do not
	// add up to the round trip timed on the monotonic clock (a clock
	// stepped while the probe was out, or a reflector that sends garbage).
	Inconsistent bool
	// Samples holds N valid samples (N is 0 when lost or inconsistent).
	Samples [2]estimator.Sample
	N       int
}

// TargetStats count what a Target saw.
type TargetStats struct {
	Sent, Answered, Lost uint64
	// Late answers came after the deadline; Duplicates repeated an answer
	// already taken; Stray answers matched no probe of ours (wrong id,
	// sequence, payload or source address). All three are ignored.
	Late, Duplicates, Stray uint64
	// Inconsistent counts the answers (among Answered) that gave no sample
	// because they contradicted themselves (see Result.Inconsistent).
	Inconsistent uint64
	// Method is what the target uses now (Auto falls back to Echo).
	Method Method
}

// A Target probes one reflector at a fixed interval until its context ends,
// handing the fate of every probe to sink, in order of sending. Replies are
// matched by identifier, sequence and payload; stray, duplicate and late
// replies are dropped and counted. Its memory stays bounded whatever the
// loss.
type Target interface {
	Run(ctx context.Context, sink func(Result)) error
	Stats() TargetStats
}

// A TargetFactory makes a Target for addr. The interval is the time between
// two probes to this reflector; the deadline is how long an answer may take
// before the probe counts as lost.
type TargetFactory func(addr netip.Addr, method Method, interval, deadline time.Duration) (Target, error)
