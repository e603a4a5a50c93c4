package estimator

import (
	"math"
	"time"
)

// day is the period of ICMP timestamps: one-way delays are known modulo a
// day, and their arithmetic is done modulo a day.
const day = 24 * time.Hour

// FoldDay returns d modulo a day, folded into (−12 h, +12 h]. Round trips
// and the differences of one-way delays that matter are far shorter, so
// folding changes them only where a clock offset near half a day wrapped
// them.
func FoldDay(d time.Duration) time.Duration {
	d %= day
	if d <= -day/2 {
		d += day
	}
	if d > day/2 {
		d -= day
	}
	return d
}

// A Baseline is the delay one reflector's samples of one kind show without
// queueing: it falls fast and rises slowly. Its value and the differences
// taken from it are folded modulo a day (FoldDay), so that a one-way
// delay whose clock offset sits near ±12 h does not jump by a day.
type Baseline struct {
	value time.Duration
	last  time.Time // newest send time seen
	set   bool
}

// Update takes one sample and returns its delta: its delay over the baseline
// as it stood before the sample, never negative. A sample below the baseline
// pulls it down with weight fallWeight; a sample above pulls it up with weight
// 1-exp(-dt/riseTau), dt being the send time since the newest earlier sample,
// so that the rise depends on elapsed time, not on the probe rate.
func (b *Baseline) Update(delay time.Duration, sent time.Time, riseTau time.Duration, fallWeight float64) time.Duration {
	if !b.set {
		b.value, b.last, b.set = FoldDay(delay), sent, true
		return 0
	}
	diff := FoldDay(delay - b.value)
	switch {
	case diff < 0:
		b.value = FoldDay(b.value + time.Duration(math.Round(fallWeight*float64(diff))))
	case diff > 0:
		// An out-of-order sample (dt <= 0) brings no elapsed time to rise by.
		if dt := sent.Sub(b.last); dt > 0 {
			w := -math.Expm1(-float64(dt) / float64(riseTau))
			b.value = FoldDay(b.value + time.Duration(math.Round(w*float64(diff))))
		}
	}
	if sent.After(b.last) {
		b.last = sent
	}
	return max(diff, 0)
}

// Deviation is how far delay lies from the baseline (folded), 0 when there
// is no baseline yet.
func (b *Baseline) Deviation(delay time.Duration) time.Duration {
	if !b.set {
		return 0
	}
	return FoldDay(delay - b.value)
}

// Shift moves the baseline by d, as a step of a clock moves the delays it
// follows.
func (b *Baseline) Shift(d time.Duration) { b.value = FoldDay(b.value + d) }

// Value returns the baseline and whether it has one yet.
func (b *Baseline) Value() (time.Duration, bool) { return b.value, b.set }
