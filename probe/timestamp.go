package probe

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/autoshape/autoshape/estimator"
	"go.uber.org/zap"
	"golang.org/x/net/bpf"
	"golang.org/x/net/ipv4"
)

// ICMP timestamp probes (RFC 792, types 13 and 14) measure the delay of each
// direction at 1 ms resolution: the request carries the time it left
// (originate), the reflector adds when it arrived (receive) and when the
// answer left (transmit), all in milliseconds since midnight UTC, and the
// router notes when the answer arrived. Then
//
//	up   = receive − originate
//	down = arrival − transmit
//
// each with the reflector's clock offset in it, with opposite signs: the
// estimator's per-reflector baselines cancel it. Both are folded into
// (−12 h, +12 h] so that a probe crossing midnight (on either clock) gives
// the same delay as any other.
//
// The timestamps are wall-clock times, which NTP may step (at boot, on a
// router without a real-time clock, by seconds or by years). The round
// trip is also timed on the monotonic clock, which no step moves, and the
// offsets cancel in up + down: a reply whose up + down differs from that
// round trip by more than timestampSlack (a clock stepped while it was
// out, or garbage from the reflector) gives no sample. A step between
// probes moves up and down by equal and opposite amounts; the estimator
// finds it in the pair and moves its baselines (see clockStep).
//
// RFC 792 lets a host that cannot give milliseconds since midnight UT set
// the high bit and send any time it likes. The bit is cleared and the value
// taken as milliseconds modulo a day all the same: the offset is constant,
// which the baselines absorb. A clock that runs at another rate drifts, and
// a reflector that sends such values is better probed with echo.
//
// Socket: one raw IPv4 socket per target, opened by Run in the network
// namespace of the calling thread, bound to the link's device if given
// (socket.go). A raw ICMP socket receives a copy of every ICMP message the
// host gets (on its device, if bound); two kernel filters keep each
// socket's share to its own replies before anything is queued: ICMP_FILTER
// passes only type 14 (checked before the copy is made), a BPF program
// only our identifier. A process-wide socket shared by all targets would save the
// copies for the other targets' replies, but it would tie every target to
// one namespace, make one target's socket error everyone's, and need a
// registry; with the few reflectors a router probes, the copies cost less
// than that.

// Lengths and constants of ICMP timestamp messages.
const (
	// timestampLen is the length of an ICMP timestamp message.
	timestampLen = 20
	// msPerDay is the period of ICMP timestamps.
	msPerDay = 24 * 60 * 60 * 1000
	// nonStandardTime is the high bit of a timestamp, which RFC 792 sets
	// when the value is not milliseconds since midnight UT.
	nonStandardTime = 1 << 31
	// timestampSlack is how far a reply's up + down may differ from the
	// round trip timed on the monotonic clock: four readings at 1 ms
	// resolution (two ours, two the reflector's) make up to 2 ms either
	// way, the reflector's time between receive and transmit shortens the
	// sum, and 3 ms of margin covers a slow reflector.
	timestampSlack = 5 * time.Millisecond
)

// A timestampMsg is an ICMP timestamp request or reply.
type timestampMsg struct {
	Type                         ipv4.ICMPType
	ID, Seq                      uint16
	Originate, Receive, Transmit uint32
}

// Errors from parseTimestampReply.
var (
	errNotTimestampReply = errors.New("not an icmp timestamp reply")
	errTimestampChecksum = errors.New("bad icmp checksum")
)

// appendTimestampMsg appends m, encoded with its checksum, to b.
func appendTimestampMsg(b []byte, m timestampMsg) []byte {
	at := len(b)
	b = append(b, byte(m.Type), 0, 0, 0)
	b = binary.BigEndian.AppendUint16(b, m.ID)
	b = binary.BigEndian.AppendUint16(b, m.Seq)
	b = binary.BigEndian.AppendUint32(b, m.Originate)
	b = binary.BigEndian.AppendUint32(b, m.Receive)
	b = binary.BigEndian.AppendUint32(b, m.Transmit)
	binary.BigEndian.PutUint16(b[at+2:], icmpChecksum(b[at:]))
	return b
}

// parseTimestampReply decodes an ICMP timestamp reply (type 14, code 0).
func parseTimestampReply(b []byte) (timestampMsg, error) {
	if len(b) < timestampLen || b[0] != byte(ipv4.ICMPTypeTimestampReply) || b[1] != 0 {
		return timestampMsg{}, errNotTimestampReply
	}
	if icmpChecksum(b) != 0 {
		return timestampMsg{}, errTimestampChecksum
	}
	return timestampMsg{
		Type:      ipv4.ICMPTypeTimestampReply,
		ID:        binary.BigEndian.Uint16(b[4:]),
		Seq:       binary.BigEndian.Uint16(b[6:]),
		Originate: binary.BigEndian.Uint32(b[8:]),
		Receive:   binary.BigEndian.Uint32(b[12:]),
		Transmit:  binary.BigEndian.Uint32(b[16:]),
	}, nil
}

// icmpChecksum is the Internet checksum of b (RFC 1071): 0 over a message
// whose checksum field is right, the value for that field when it is zero.
func icmpChecksum(b []byte) uint16 {
	var sum uint32
	for ; len(b) >= 2; b = b[2:] {
		sum += uint32(b[0])<<8 | uint32(b[1])
	}
	if len(b) == 1 {
		sum += uint32(b[0]) << 8
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}

// msSinceMidnight is t as an ICMP timestamp: milliseconds since midnight
// UTC, truncated.
func msSinceMidnight(t time.Time) uint32 {
	ms := t.UnixMilli() % msPerDay
	if ms < 0 {
		ms += msPerDay
	}
	return uint32(ms)
}

// clockMS reads a timestamp from a reflector's clock: the non-standard bit
// cleared, modulo a day.
func clockMS(v uint32) uint32 { return (v &^ nonStandardTime) % msPerDay }

// foldMS is the difference a − b between two times of day in milliseconds,
// folded into (−12 h, +12 h].
func foldMS(a, b uint32) time.Duration {
	d := (int64(a%msPerDay) - int64(b%msPerDay)) % msPerDay
	if d < 0 {
		d += msPerDay
	}
	if d > msPerDay/2 {
		d -= msPerDay
	}
	return time.Duration(d) * time.Millisecond
}

// oneWayDelays are the delays up and down of the probe that m answers,
// which arrived at arrival (ms since midnight UTC). Each includes the
// reflector's clock offset, with opposite signs.
func oneWayDelays(m timestampMsg, arrival uint32) (up, down time.Duration) {
	return foldMS(clockMS(m.Receive), m.Originate), foldMS(arrival, clockMS(m.Transmit))
}

// consistent reports whether one-way delays up and down (each with any
// clock offset, modulo a day) add up to the round trip rtt, within
// timestampSlack.
func consistent(up, down, rtt time.Duration) bool {
	return (estimator.FoldDay(up + down - rtt)).Abs() <= timestampSlack
}

// A timestampTarget probes one IPv4 reflector with ICMP timestamp requests.
// A probe's payload is its originate timestamp: a reply must carry the
// target's identifier, the sequence number of a probe remembered and that
// probe's originate timestamp.
type timestampTarget struct {
	socketTarget
	// id is random, so that targets (and other programs) rarely share one;
	// when they do, the source address and the originate timestamp still
	// tell the replies apart.
	id uint16
	// req is the request being sent, reused from poll to poll.
	req []byte
}

var _ Target = (*timestampTarget)(nil)

// newTimestampTarget returns a target that probes addr, an IPv4 address,
// with timestamps every interval, each answer awaited up to deadline,
// through a socket bound to device unless it is empty, polled by pacer (by
// itself if nil).
func newTimestampTarget(addr netip.Addr, interval, deadline time.Duration, device string, pacer *Pacer, log *zap.Logger) *timestampTarget {
	return &timestampTarget{
		socketTarget: newSocketTarget("icmp timestamp", addr, interval, deadline, device, pacer, log),
		id:           uint16(rand.Uint32()),
		req:          make([]byte, 0, timestampLen),
	}
}

// Stats returns the target's counters.
func (t *timestampTarget) Stats() TargetStats { return t.stats(Timestamp) }

// Run probes until ctx ends (see socketTarget.run).
func (t *timestampTarget) Run(ctx context.Context, sink func(Result)) error {
	sock := newProbeSocket(t.device, t.addr, true,
		func() (net.PacketConn, error) { return listenTimestamp(t.id, t.device) })
	return t.run(ctx, sink, sock, t.prepare, t.receive)
}

// prepare records a probe sent at now and returns its sequence number and
// request. The window must have room; t.mu is held.
func (t *timestampTarget) prepare(now time.Time) (int, []byte) {
	orig := msSinceMidnight(now)
	seq := t.w.add(now, uint64(orig))
	t.req = appendTimestampMsg(t.req[:0], timestampMsg{
		Type:      ipv4.ICMPTypeTimestamp,
		ID:        t.id,
		Seq:       uint16(seq),
		Originate: orig,
	})
	return seq, t.req
}

// receive matches a reply b from from that arrived at arrival with the
// probes remembered; t.mu is held.
func (t *timestampTarget) receive(b []byte, from netip.Addr, arrival time.Time) {
	m, err := parseTimestampReply(b)
	if err != nil || m.ID != t.id || from != t.addr {
		t.w.stats.Stray++
		return
	}
	// The newest probe whose sequence number ends in m.Seq: the window is
	// far shorter than the 16-bit sequence space.
	last := t.w.next - 1
	p := t.w.lookup(last - int(uint16(last)-m.Seq))
	if p == nil || p.tag != uint64(m.Originate) {
		t.w.stats.Stray++
		return
	}
	rtt := arrival.Sub(p.sent) // monotonic: no clock step moves it
	if !t.w.accept(p, rtt) {
		return
	}
	up, down := oneWayDelays(m, msSinceMidnight(arrival))
	if !consistent(up, down, rtt) {
		t.w.reject(p)
		return
	}
	t.w.addSample(p, estimator.OWDUp, up)
	t.w.addSample(p, estimator.OWDDown, down)
}

// listenTimestamp opens a raw ICMP socket in the network namespace of the
// calling thread, bound to device unless it is empty, that receives only
// timestamp replies with identifier id.
func listenTimestamp(id uint16, device string) (net.PacketConn, error) {
	conn, err := listenICMP("ip4:icmp", device)
	if err != nil {
		return nil, err
	}
	pc := ipv4.NewPacketConn(conn)
	var f ipv4.ICMPFilter
	f.SetAll(true)
	f.Accept(ipv4.ICMPTypeTimestampReply)
	if err := pc.SetICMPFilter(&f); err != nil {
		conn.Close()
		return nil, fmt.Errorf("failed to set icmp filter: %w", err)
	}
	if err := setBPF(conn, pc.SetBPF, timestampFilter(id)); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// drain discards the packets queued on conn.
func drain(conn net.PacketConn) error {
	if err := conn.SetReadDeadline(time.Now()); err != nil {
		return fmt.Errorf("failed to drain socket: %w", err)
	}
	var buf [64]byte
	for {
		_, _, err := conn.ReadFrom(buf[:])
		if errors.Is(err, os.ErrDeadlineExceeded) {
			break
		}
		if err != nil {
			return fmt.Errorf("failed to drain socket: %w", err)
		}
	}
	if err := conn.SetReadDeadline(time.Time{}); err != nil {
		return fmt.Errorf("failed to drain socket: %w", err)
	}
	return nil
}

// timestampFilter is a BPF program for a raw IPv4 socket (which sees the IP
// header) that passes ICMP timestamp replies with identifier id.
func timestampFilter(id uint16) []bpf.Instruction {
	return []bpf.Instruction{
		bpf.LoadMemShift{Off: 0},          // X = IP header length
		bpf.LoadIndirect{Off: 0, Size: 1}, // ICMP type
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: uint32(ipv4.ICMPTypeTimestampReply), SkipTrue: 3},
		bpf.LoadIndirect{Off: 4, Size: 2}, // identifier
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: uint32(id), SkipTrue: 1},
		bpf.RetConstant{Val: 0xffff},
		bpf.RetConstant{Val: 0},
	}
}
