package estimator

import (
	"math"
	"time"
)

// wrapMargin is how many times its highest rate a link may seem to carry
// in an interval for a counter that went backwards to be taken as a wrap:
// bursts and the shaper's own slack stay well inside it, while a reset of
// a counter that stood between 2 and 4 GiB, read as a 32-bit wrap, implies
// hundreds of Gbit/s.
const wrapMargin = 4

// A rateMeter turns readings of a byte counter into the achieved rate.
type rateMeter struct {
	bytes uint64
	at    time.Time
	set   bool
	rate  float64 // bit/s over the last good interval
}

// add takes one counter reading. limit is the highest rate in bit/s the
// counted link may carry (0: unknown), which decides whether a counter
// that went backwards wrapped or was reset.
func (m *rateMeter) add(t time.Time, bytes uint64, limit float64) {
	if !m.set {
		m.bytes, m.at, m.set = bytes, t, true
		return
	}
	dt := t.Sub(m.at)
	if dt <= 0 {
		return
	}
	diff, ok := counterDelta(m.bytes, bytes, maxAdvance(limit, dt))
	m.bytes, m.at = bytes, t
	if !ok {
		// A reset: the interval's traffic is unknown, so keep the last rate
		// rather than report a bogus one, and measure from this reading on.
		return
	}
	m.rate = float64(diff) * 8 / dt.Seconds()
}

// maxAdvance is the most bytes a counter may plausibly advance in dt on a
// link of at most limit bit/s, wrapMargin included; 0 when limit is
// unknown.
func maxAdvance(limit float64, dt time.Duration) uint64 {
	if !(limit > 0) {
		return 0
	}
	b := math.Ceil(wrapMargin * limit / 8 * dt.Seconds())
	if b >= 1<<63 {
		return 1 << 63
	}
	return uint64(b)
}

// counterDelta returns how far a counter advanced from prev to cur, taking a
// decrease as a 32-bit or 64-bit wrap where the advance that implies is
// plausible, and false when the counter was reset. An advance is plausible
// when it is at most most bytes; when most is 0 (the link's rate unknown),
// when it is less than half the counter's range.
func counterDelta(prev, cur, most uint64) (uint64, bool) {
	if cur >= prev {
		return cur - prev, true
	}
	plausible := func(d, half uint64) bool {
		if most > 0 {
			return d <= most
		}
		return d < half
	}
	if prev <= math.MaxUint32 {
		if d := cur + 1<<32 - prev; plausible(d, 1<<31) {
			return d, true
		}
	}
	if d := cur - prev; plausible(d, 1<<62) {
		return d, true
	}
	return 0, false
}
