package main

import (
	"math"
	"testing"

	"github.com/autoshape/autoshape/sim"
)

// TestFollowOf: an estimate that is the capacity 1 s late is found 1 s late,
// reaches each new capacity 1 s after the step, and is off the capacity
// only in those seconds; one that never falls never reaches the drop.
func TestFollowOf(t *testing.T) {
	var capacity []float64
	for _, c := range []float64{40, 10, 40} {
		for range 50 {
			capacity = append(capacity, c)
		}
	}
	late := make([]float64, len(capacity))
	for i := range late {
		late[i] = capacity[max(i-10, 0)]
	}
	f, ok := followOf(sim.Result{Series: &sim.Series{Capacity: capacity, CapacityEstimate: late}})
	if !ok || !f.ok {
		t.Fatalf("followOf: ok %v, lag ok %v", ok, f.ok)
	}
	if math.Abs(f.lag-1) > 1e-9 || f.corr < 0.99 {
		t.Errorf("lag %.2f s (r %.3f), want 1 s (r 1)", f.lag, f.corr)
	}
	if len(f.rise) != 1 || len(f.fall) != 1 || math.Abs(f.rise[0]-1) > 1e-9 || math.Abs(f.fall[0]-1) > 1e-9 {
		t.Errorf("rise %v, fall %v, want [1] each", f.rise, f.fall)
	}
	if f.err != 0 || f.bias != 0 {
		t.Errorf("error %.3f, bias %.3f, want 0: off only 20 of 150 ticks", f.err, f.bias)
	}

	high := make([]float64, len(capacity))
	for i := range high {
		high[i] = 40
	}
	f, _ = followOf(sim.Result{Series: &sim.Series{Capacity: capacity, CapacityEstimate: high}})
	if f.ok || len(f.fall) != 1 || !math.IsInf(f.fall[0], 1) || f.rise[0] != 0 {
		t.Errorf("a flat estimate: lag ok %v, fall %v, rise %v; want no lag, never, 0", f.ok, f.fall, f.rise)
	}
	if _, ok := followOf(sim.Result{Series: &sim.Series{Capacity: capacity}}); ok {
		t.Error("followOf a result without an estimate: ok")
	}
}
