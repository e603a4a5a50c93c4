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

// NewTicker returns a time.Ticker's channel and its Stop.
func (RealClock) NewTicker(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTicker(d)
	return t.C, t.Stop
}
