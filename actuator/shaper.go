// Package actuator owns every write autoshape makes to the kernel's traffic
// control: one Shaper per direction changes the shaper's rate and reads its
// statistics. It knows nothing of the controller, which defines the Shaper
// it writes through; whoever wires the two adapts one to the other. Fake
// stands in for a Shaper in tests.
package actuator

import (
	"context"
	"sync"
	"time"
)

// Stats are a shaper's counters at one instant.
type Stats struct {
	// Bytes and Packets sent by the shaper since it was created.
	Bytes   uint64
	Packets uint64
	// WireBytes is Bytes as the shaper's rate counts them: with the
	// framing's per-packet overhead and, on ATM, whole 53-byte cells,
	// estimated from the mean packet size (half a cell of padding per
	// packet). It equals Bytes without framing, and is 0 from a backend
	// that does not fill it in.
	WireBytes uint64
	// Drops counts packets the shaper dropped.
	Drops uint64
	// Backlog is the number of bytes queued in the shaper.
	Backlog uint64
	// CapacityEstimate is CAKE's ingress capacity estimate in bit/s, 0 when
	// the backend has none. The kernel updates it only while
	// AutorateIngress is on; otherwise it keeps its last value (the rate
	// CAKE was created with, if autorate-ingress was never on).
	CapacityEstimate uint64
	// AutorateIngress is CAKE's autorate-ingress: the estimate is live, and
	// CAKE sets its own rate to 15/16 of it.
	AutorateIngress bool
	// Rate is the rate the kernel holds now, in bit/s: CAKE's own while
	// AutorateIngress is on. The HTB backend leaves it 0.
	Rate uint64
	// Tins are CAKE's per-tin statistics, nil for other backends.
	Tins []TinStats
}

// TinStats are the statistics of one CAKE tin (priority class).
type TinStats struct {
	SentPackets, SentBytes uint64
	DroppedPackets         uint64
	ECNMarkedPackets       uint64
	AckDropsPackets        uint64
	BacklogBytes           uint64
	// ThresholdRate is the tin's rate threshold in bit/s.
	ThresholdRate uint64
	// Target and Interval are the tin's AQM parameters.
	Target, Interval time.Duration
	// PeakDelay, AvgDelay and BaseDelay are CAKE's delay trackers.
	PeakDelay, AvgDelay, BaseDelay time.Duration
	SparseFlows, BulkFlows         uint32
	UnresponsiveFlows              uint32
}

// A Change says what SetRate did.
type Change struct {
	// Iface is the interface whose shaper was set; Kind its qdisc's kind.
	Iface, Kind string
	// From and To are the rates before and after, in bit/s.
	From, To uint64
	// Wrote is false when the kernel already held the rate: nothing was
	// written.
	Wrote bool
}

// A Shaper controls the rate of one direction's shaper.
type Shaper interface {
	// SetRate changes the shaper's rate to bps bit/s. Implementations read
	// the rate the kernel holds first and write only when it differs.
	SetRate(ctx context.Context, bps uint64) (Change, error)
	// Stats reads the shaper's counters.
	Stats(ctx context.Context) (Stats, error)
}

// A Yielder is a Shaper that can hand its rate to CAKE's autorate-ingress
// (the CAKE backend's): the next SetRate that writes takes it back.
type Yielder interface {
	// Yield turns autorate-ingress on, starting from bps bit/s.
	Yield(ctx context.Context, bps uint64) (Change, error)
}

// A Fake is an in-memory Shaper for tests: it records every rate written and
// returns whatever Stats were last put into it. It is safe for concurrent use.
type Fake struct {
	mu     sync.Mutex
	rate   uint64
	writes []uint64
	stats  Stats
	err    error
}

var _ Shaper = (*Fake)(nil)

// SetRate records bps; a rate equal to the current one is not a write.
func (f *Fake) SetRate(_ context.Context, bps uint64) (Change, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return Change{}, f.err
	}
	ch := Change{Kind: "fake", From: f.rate, To: bps}
	if bps == f.rate {
		return ch, nil
	}
	f.rate = bps
	f.writes = append(f.writes, bps)
	ch.Wrote = true
	return ch, nil
}

// Stats returns the stats last given to SetStats.
func (f *Fake) Stats(context.Context) (Stats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stats, f.err
}

// SetStats sets what Stats returns.
func (f *Fake) SetStats(s Stats) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stats = s
}

// SetErr makes every later call fail with err (nil clears it).
func (f *Fake) SetErr(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

// Rate returns the current rate.
func (f *Fake) Rate() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rate
}

// Writes returns every rate written, in order.
func (f *Fake) Writes() []uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]uint64(nil), f.writes...)
}
