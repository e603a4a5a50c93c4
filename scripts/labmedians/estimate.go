package main

import (
	"math"

	"github.com/autoshape/autoshape/sim"
)

// How CAKE's capacity estimate (the series' capacity_estimate_mbps, as the
// kernel reported it every 100 ms) follows the true capacity.

// estimateTick is the series' step.
const estimateTick = 0.1 // s

// A follow is how one run's estimate followed its capacity.
type follow struct {
	// err is the median of |estimate − capacity| over the run, as a share
	// of the mean capacity; bias the median of estimate − capacity, Mbit/s.
	err, bias float64
	// lag is the shift of the capacity, from −5 to +15 s, that correlates
	// best with the estimate (positive: the estimate follows late); corr
	// is that correlation. ok is false when either series is flat.
	lag, corr float64
	ok        bool
	// rise and fall are, for each step of the capacity up or down by a
	// fifth or more within one tick, the time until the estimate was first
	// within 10 % of the new capacity (+Inf: not before the next step or
	// the end).
	rise, fall []float64
}

// followOf measures r's estimate against its capacity; ok is false when r
// has no estimate.
func followOf(r sim.Result) (follow, bool) {
	var f follow
	if r.Series == nil || len(r.Series.CapacityEstimate) == 0 {
		return f, false
	}
	c, e := r.Series.Capacity, r.Series.CapacityEstimate
	n := min(len(c), len(e))
	if n == 0 {
		return f, false
	}
	c, e = c[:n], e[:n]
	mean := 0.0
	for _, v := range c {
		mean += v / float64(n)
	}
	abs, diff := make([]float64, n), make([]float64, n)
	for i := range n {
		diff[i] = e[i] - c[i]
		abs[i] = math.Abs(diff[i]) / mean
	}
	f.err, f.bias = median(abs), median(diff)
	f.corr = math.Inf(-1)
	for k := -50; k <= 150; k++ {
		if r, ok := correlation(e, c, k); ok && r > f.corr {
			f.corr, f.lag, f.ok = r, float64(k)*estimateTick, true
		}
	}
	var steps []int
	for i := 1; i < n; i++ {
		if c[i-1] > 0 && math.Abs(c[i]-c[i-1]) >= 0.2*c[i-1] {
			steps = append(steps, i)
		}
	}
	for j, i := range steps {
		end := n
		if j+1 < len(steps) {
			end = steps[j+1]
		}
		took := math.Inf(1)
		for k := i; k < end; k++ {
			if math.Abs(e[k]-c[i]) <= 0.1*c[i] {
				took = float64(k-i) * estimateTick
				break
			}
		}
		if c[i] > c[i-1] {
			f.rise = append(f.rise, took)
		} else {
			f.fall = append(f.fall, took)
		}
	}
	return f, true
}

// correlation is Pearson's correlation of e[i] with c[i−k] over the
// indices both have; ok is false with fewer than 10 pairs or a flat side.
func correlation(e, c []float64, k int) (float64, bool) {
	var n, se, sc, see, scc, sec float64
	for i := range e {
		j := i - k
		if j < 0 || j >= len(c) {
			continue
		}
		n++
		se += e[i]
		sc += c[j]
		see += e[i] * e[i]
		scc += c[j] * c[j]
		sec += e[i] * c[j]
	}
	if n < 10 {
		return 0, false
	}
	ve, vc := see-se*se/n, scc-sc*sc/n
	if ve <= 1e-12 || vc <= 1e-12 {
		return 0, false
	}
	return (sec - se*sc/n) / math.Sqrt(ve*vc), true
}
