package estimator

import (
	"math"
	"time"
)

// A baseline is the delay one reflector's samples of one kind show without
// queueing: it falls fast and rises slowly.
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
		b.value, b.last, b.set = delay, sent, true
		return 0
	}
	diff := delay - b.value
	switch {
	case diff < 0:
		b.value += time.Duration(math.Round(fallWeight * float64(diff)))
	case diff > 0:
		// An out-of-order sample (dt <= 0) brings no elapsed time to rise by.
		if dt := sent.Sub(b.last); dt > 0 {
			w := -math.Expm1(-float64(dt) / float64(riseTau))
			b.value += time.Duration(math.Round(w * float64(diff)))
		}
	}
	if sent.After(b.last) {
		b.last = sent
	}
	return max(diff, 0)
}
