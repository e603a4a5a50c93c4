package probe_test

import (
	"slices"
	"sync"
	"time"

	"github.com/autoshape/autoshape/probe"
)

var _ probe.Clock = (*poolFakeClock)(nil)

// A poolFakeClock is an probe.Clock whose time moves only in Advance. Its
// tickers deliver every tick, each one handed over (the send blocks until
// the ticker's owner takes it or stops the ticker), in time order, and after
// each tick settle (if set) lets the goroutines that took it finish their
// work: tests pass synctest.Wait, benchmarks nil.
type poolFakeClock struct {
	settle func()

	mu      sync.Mutex
	now     time.Time
	seq     int
	tickers []*poolFakeTicker // live ones only, so the clock's memory stays flat
}

type poolFakeTicker struct {
	c      chan time.Time
	done   chan struct{}
	period time.Duration
	next   time.Time
	seq    int // creation order, for ties
}

// poolT0 is where a poolFakeClock starts.
var poolT0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func newPoolFakeClock(settle func()) *poolFakeClock {
	return &poolFakeClock{settle: settle, now: poolT0}
}

func (c *poolFakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Since returns the time elapsed since poolT0.
func (c *poolFakeClock) Since() time.Duration { return c.Now().Sub(poolT0) }

func (c *poolFakeClock) NewTicker(d time.Duration) (<-chan time.Time, func()) {
	if d <= 0 {
		panic("poolFakeClock: non-positive ticker period")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	tk := &poolFakeTicker{c: make(chan time.Time), done: make(chan struct{}), period: d, next: c.now.Add(d), seq: c.seq}
	c.tickers = append(c.tickers, tk)
	var once sync.Once
	return tk.c, func() {
		once.Do(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.tickers = slices.DeleteFunc(c.tickers, func(x *poolFakeTicker) bool { return x == tk })
			close(tk.done)
		})
	}
}

// Advance moves the time forward by d, delivering every tick due on the way.
func (c *poolFakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	end := c.now.Add(d)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		var due *poolFakeTicker
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

// AdvanceTo moves the time to poolT0 + d.
func (c *poolFakeClock) AdvanceTo(d time.Duration) {
	c.Advance(d - c.Since())
}
