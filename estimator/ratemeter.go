package estimator

import (
	"math"
	"time"
)

// A rateMeter turns readings of a byte counter into the achieved rate.
type rateMeter struct {
	bytes uint64
	at    time.Time
	set   bool
	rate  float64 // bit/s over the last good interval
}

// add takes one counter reading.
func (m *rateMeter) add(t time.Time, bytes uint64) {
	if !m.set {
		m.bytes, m.at, m.set = bytes, t, true
		return
	}
	dt := t.Sub(m.at)
	if dt <= 0 {
		return
	}
	diff, ok := counterDelta(m.bytes, bytes)
	m.bytes, m.at = bytes, t
	if !ok {
		// A reset: the interval's traffic is unknown, so keep the last rate
		// rather than report a bogus one, and measure from this reading on.
		return
	}
	m.rate = float64(diff) * 8 / dt.Seconds()
}

// counterDelta returns how far a counter advanced from prev to cur, taking a
// decrease as a 32-bit or 64-bit wrap where the advance that implies is
// plausible, and false when the counter was reset.
func counterDelta(prev, cur uint64) (uint64, bool) {
	if cur >= prev {
		return cur - prev, true
	}
	if prev <= math.MaxUint32 {
		if d := cur + 1<<32 - prev; d < 1<<31 {
			return d, true
		}
	}
	if d := cur - prev; d < 1<<62 {
		return d, true
	}
	return 0, false
}
