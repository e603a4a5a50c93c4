package estimator

import (
	"math"
	"time"
)

// day is the period of ICMP timestamps: one-way delays are known modulo a
// day, and their arithmetic is done modulo a day.
const day = 24 * time.Hour

// foldDay returns d modulo a day, folded into (−12 h, +12 h]. Round trips
// and the differences of one-way delays that matter are far shorter, so
// folding changes them only where a clock offset near half a day wrapped
// them.
func foldDay(d time.Duration) time.Duration {
	d %= day
	if d <= -day/2 {
		d += day
	}
	if d > day/2 {
		d -= day
	}
	return d
}

// A baseline is the delay one reflector's samples of one kind show without
// queueing: it falls fast and rises slowly. Its value and the differences
// taken from it are folded modulo a day (foldDay), so that a one-way
// delay whose clock offset sits near ±12 h does not jump by a day.
type baseline struct {
	value time.Duration
	last  time.Time // newest send time seen
	set   bool
}

// update takes one sample and returns its delta: its delay over the baseline
// as it stood before the sample, never negative. A sample below the baseline
// pulls it down with weight fallWeight; a sample above pulls it up with weight
// 1-exp(-dt/riseTau), dt being the send time since the newest earlier sample,
// so that the rise depends on elapsed time, not on the probe rate.
func (b *baseline) update(delay time.Duration, sent time.Time, riseTau time.Duration, fallWeight float64) time.Duration {
	if !b.set {
		b.value, b.last, b.set = foldDay(delay), sent, true
		return 0
	}
	diff := foldDay(delay - b.value)
	switch {
	case diff < 0:
		b.value = foldDay(b.value + time.Duration(math.Round(fallWeight*float64(diff))))
	case diff > 0:
		// An out-of-order sample (dt <= 0) brings no elapsed time to rise by.
		if dt := sent.Sub(b.last); dt > 0 {
			w := -math.Expm1(-float64(dt) / float64(riseTau))
			b.value = foldDay(b.value + time.Duration(math.Round(w*float64(diff))))
		}
	}
	if sent.After(b.last) {
		b.last = sent
	}
	return max(diff, 0)
}

// deviation is how far delay lies from the baseline (folded), 0 when there
// is no baseline yet.
func (b *baseline) deviation(delay time.Duration) time.Duration {
	if !b.set {
		return 0
	}
	return foldDay(delay - b.value)
}

// shift moves the baseline by d, as a step of a clock moves the delays it
// follows.
func (b *baseline) shift(d time.Duration) { b.value = foldDay(b.value + d) }
