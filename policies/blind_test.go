package policies_test

import (
	"math"
	"testing"
	"time"

	"github.com/autoshape/autoshape/estimator"
	"github.com/autoshape/autoshape/policies"
)

func TestBudgetBlind(t *testing.T) {
	const (
		rate = 4e6
		tick = 50 * time.Millisecond
	)
	since := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	bounds := policies.Bounds{Min: 0.5e6, Base: 5e6, Max: 10e6}
	tests := []struct {
		name string
		// passed is what the shaper passed in each tick, repeated; the
		// first call starts the count.
		passed []float64
		ticks  int
		want   policies.Proposal
	}{
		{"acknowledgement-clocked bursts: down to what passed", []float64{4e6, 0, 0, 0}, 32, policies.Proposal{Rate: 1e6, Reason: policies.ReasonBlind}},
		{"under a second: held", []float64{4e6, 0, 0, 0}, 19, policies.Proposal{Rate: rate, Reason: policies.ReasonStall}},
		{"the shaper the limit: held", []float64{rate, 0.95 * rate}, 40, policies.Proposal{Rate: rate, Reason: policies.ReasonStall}},
		{"nothing passed (an outage): held", []float64{0}, 40, policies.Proposal{Rate: rate, Reason: policies.ReasonStall}},
		{"next to nothing passed: held", []float64{0.16e6, 0}, 40, policies.Proposal{Rate: rate, Reason: policies.ReasonStall}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := policies.NewBudget(policies.DefaultBudgetConfig(15 * time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			var got policies.Proposal
			for i := range tt.ticks + 1 {
				in := policies.Input{
					Now:    since.Add(time.Duration(i) * tick),
					Obs:    estimator.Observation{Direction: estimator.Up, Achieved: tt.passed[i%len(tt.passed)]},
					Rate:   rate,
					Bounds: bounds,
				}
				got = p.Blind(in, since)
			}
			if got.Reason != tt.want.Reason || math.Abs(got.Rate-tt.want.Rate) > 1 {
				t.Errorf("after %v: %+v, want %+v", time.Duration(tt.ticks)*tick, got, tt.want)
			}
		})
	}
}

func TestBudgetBlindNewStall(t *testing.T) {
	p, err := policies.NewBudget(policies.DefaultBudgetConfig(15 * time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	first := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	blind := func(since time.Time, from, ticks int, passed float64) policies.Proposal {
		var got policies.Proposal
		for i := from; i <= from+ticks; i++ {
			got = p.Blind(policies.Input{Now: first.Add(time.Duration(i) * 50 * time.Millisecond),
				Obs: estimator.Observation{Achieved: passed}, Rate: 4e6}, since)
		}
		return got
	}
	if got := blind(first, 0, 30, 1e6); got.Reason != policies.ReasonBlind {
		t.Fatalf("first stall: %+v, want a cut", got)
	}
	// A stall that begins later starts its count afresh: what the first
	// one passed does not cut it before its own second.
	second := first.Add(10 * time.Second)
	if got := blind(second, 200, 10, 1e6); got.Reason != policies.ReasonStall || got.Rate != 4e6 {
		t.Errorf("half a second into the next stall: %+v, want the rate held", got)
	}
}
