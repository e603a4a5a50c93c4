// Package actuator owns every write autoshape makes to the kernel's traffic
// control: one Shaper per direction changes the shaper's rate and reads its
// statistics. The controller reaches the kernel only through the Shaper
// interface; Fake stands in for it in tests and in the simulator's place.
package actuator

import (
	"context"
	"sync"
)

// Stats are a shaper's counters at one instant.
type Stats struct {
	// Bytes and Packets sent by the shaper since it was created.
	Bytes   uint64
	Packets uint64
	// Drops counts packets the shaper dropped.
	Drops uint64
	// Backlog is the number of bytes queued in the shaper.
	Backlog uint64
	// CapacityEstimate is CAKE's ingress capacity estimate in bit/s, 0 when
	// the backend has none.
	CapacityEstimate uint64
}

// A Shaper controls the rate of one direction's shaper.
type Shaper interface {
	// SetRate changes the shaper's rate to bps bit/s. Implementations write only
	// when the rate differs from what the shaper holds.
	SetRate(ctx context.Context, bps uint64) error
	// Stats reads the shaper's counters.
	Stats(ctx context.Context) (Stats, error)
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
func (f *Fake) SetRate(_ context.Context, bps uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	if bps == f.rate {
		return nil
	}
	f.rate = bps
	f.writes = append(f.writes, bps)
	return nil
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
