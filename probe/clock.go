package probe

import "time"

// A Clock gives the time and tickers. The Pool and the daemon schedule
// everything with it, so tests drive them with a fake clock.
type Clock interface {
	Now() time.Time
	// NewTicker returns a channel that delivers the time every d (d > 0)
	// and a function that stops the ticker.
	NewTicker(d time.Duration) (<-chan time.Time, func())
}

// RealClock is the wall clock.
type RealClock struct{}

// Now returns time.Now().
func (RealClock) Now() time.Time { return time.Now() }

// NewTicker returns a ticker's channel and its Stop. On Linux the ticker is
// a kernel timer (a timerfd) that a goroutine reads through the runtime's
// poller, where the kernel allows one; otherwise, and elsewhere, it is a
// time.Ticker. Like a time.Ticker's, the channel holds one tick, and ticks
// that find it full are dropped.
//
// Why a kernel timer: while a runtime timer is pending, the runtime's
// monitor thread (sysmon) sleeps only until it is due, so a process that
// does nothing but tick 20 times a second wakes two threads per tick, the
// one that runs the tick and the monitor, which then sleeps 10 ms more
// before it goes back to waiting for the next. With the tick on a file
// descriptor the monitor has no timer to wait for and sleeps on: on the
// development VM, where a thread's wake-up is costly, `GOMAXPROCS=1 go run
// ./scripts/tickcost` ticking every 50 ms took 0.24 CPU-s a minute with a
// time.Ticker and 0.11 with a kernel timer.
func (RealClock) NewTicker(d time.Duration) (<-chan time.Time, func()) {
	if c, stop, ok := kernelTicker(d); ok {
		return c, stop
	}
	t := time.NewTicker(d)
	return t.C, t.Stop
}
