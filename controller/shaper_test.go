package controller_test

import (
	"context"
	"sync"

	"github.com/autoshape/autoshape/controller"
)

// A fakeShaper records every rate written and returns whatever stats were
// last put into it. It is safe for concurrent use.
type fakeShaper struct {
	mu     sync.Mutex
	rate   uint64
	writes []uint64
	stats  controller.ShaperStats
	err    error
}

var _ controller.Shaper = (*fakeShaper)(nil)

// SetRate records bps; a rate equal to the current one is not a write.
func (f *fakeShaper) SetRate(_ context.Context, bps uint64) (controller.Change, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return controller.Change{}, f.err
	}
	if bps == f.rate {
		return controller.Change{Kind: "fake"}, nil
	}
	f.rate = bps
	f.writes = append(f.writes, bps)
	return controller.Change{Kind: "fake", Wrote: true}, nil
}

// Stats returns the stats last given to SetStats.
func (f *fakeShaper) Stats(context.Context) (controller.ShaperStats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stats, f.err
}

// SetStats sets what Stats returns.
func (f *fakeShaper) SetStats(s controller.ShaperStats) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stats = s
}

// SetErr makes every later call fail with err (nil clears it).
func (f *fakeShaper) SetErr(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

// Rate returns the current rate.
func (f *fakeShaper) Rate() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rate
}

// Writes returns every rate written, in order.
func (f *fakeShaper) Writes() []uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]uint64(nil), f.writes...)
}
