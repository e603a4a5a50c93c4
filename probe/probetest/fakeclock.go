// Package probetest has a fake probe.Clock for the tests of the packages
// that schedule with one (probe, daemon).
package probetest

import (
	"slices"
	"sync"
	"time"

	"github.com/autoshape/autoshape/probe"
)

var _ probe.Clock = (*FakeClock)(nil)

// A FakeClock is a probe.Clock whose time moves only in Advance. Its
// tickers deliver every tick, each one handed over (the send blocks until
// the ticker's owner takes it or stops the ticker), in time order, and after
// each tick settle (if set) lets the goroutines that took it finish their
// work.
type FakeClock struct {
	settle func()
	start  time.Time

	mu      sync.Mutex
	now     time.Time
	seq     int
	tickers []*fakeTicker // live ones only, so the clock's memory stays flat
}

type fakeTicker struct {
	c      chan time.Time
	done   chan struct{}
	period time.Duration
	next   time.Time
	seq    int // creation order, for ties
}

// NewFakeClock returns a FakeClock at start. settle, if not nil, runs
// after each tick is taken: tests pass synctest.Wait, benchmarks nil.
func NewFakeClock(start time.Time, settle func()) *FakeClock {
	return &FakeClock{settle: settle, start: start, now: start}
}

// Now returns the clock's time.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Tickers returns how many tickers are running (made and not stopped).
func (c *FakeClock) Tickers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.tickers)
}

// Since returns the time elapsed since the start.
func (c *FakeClock) Since() time.Duration { return c.Now().Sub(c.start) }

// NewTicker returns a ticker every d and the function that stops it.
func (c *FakeClock) NewTicker(d time.Duration) (<-chan time.Time, func()) {
	if d <= 0 {
		panic("FakeClock: non-positive ticker period")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	tk := &fakeTicker{c: make(chan time.Time), done: make(chan struct{}), period: d, next: c.now.Add(d), seq: c.seq}
	c.tickers = append(c.tickers, tk)
	var once sync.Once
	return tk.c, func() {
		once.Do(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.tickers = slices.DeleteFunc(c.tickers, func(x *fakeTicker) bool { return x == tk })
			close(tk.done)
		})
	}
}

// Advance moves the time forward by d, delivering every tick due on the way.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	end := c.now.Add(d)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		var due *fakeTicker
		for _, tk := range c.tickers {
			if tk.next.After(end) {
				continue
			}
			if due == nil || tk.next.Before(due.next) || (tk.next.Equal(due.next) && tk.seq < due.seq) {
				due = tk
			}
		}
		if due == nil {
			c.now = end
			c.mu.Unlock()
			break
		}
		at := due.next
		c.now = at
		due.next = at.Add(due.period)
		c.mu.Unlock()
		select {
		case due.c <- at:
		case <-due.done:
		}
		if c.settle != nil {
			c.settle()
		}
	}
	if c.settle != nil {
		c.settle()
	}
}

// AdvanceTo moves the time to the start + d.
func (c *FakeClock) AdvanceTo(d time.Duration) {
	c.Advance(d - c.Since())
}
