package policies_test

import (
	"testing"
	"time"

	"github.com/autoshape/autoshape/estimator"
	"github.com/autoshape/autoshape/policies"
)

var superviseBounds = policies.Bounds{Min: 1e6, Base: 30e6, Max: 44e6}

// superviseIn is one download tick at offset at: the rate, the added
// delay (bloat when over the budget), what got through, and CAKE's live
// estimate (0: the policy owns the rate).
func superviseIn(at time.Duration, rate float64, delta time.Duration, achieved, estimate float64) policies.Input {
	now := budgetStart.Add(at)
	return policies.Input{
		Now: now,
		Obs: estimator.Observation{
			Time: now, Direction: estimator.Down, Delta: delta, Threshold: defaultBudget,
			Bloat: delta > defaultBudget, Achieved: achieved, ShaperRate: rate,
			Load: achieved / rate, CapacityEstimate: estimate, Reflectors: 3,
			Deltas: []time.Duration{delta},
		},
		Rate: rate, Bounds: superviseBounds,
	}
}

func TestSuperviseName(t *testing.T) {
	p, err := policies.NewSupervise(policies.BudgetConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Name() != "supervise" || p.Margin() != 0.9 {
		t.Errorf("name %q margin %v, want supervise, 0.9", p.Name(), p.Margin())
	}
	if _, err := policies.NewSupervise(policies.BudgetConfig{Budget: -time.Millisecond}); err == nil {
		t.Error("a negative budget was accepted")
	}
}

// TestSuperviseUploadIsBudget: upload has no estimate; Supervise proposes
// what Budget does, tick by tick.
func TestSuperviseUploadIsBudget(t *testing.T) {
	s, _ := policies.NewSupervise(policies.BudgetConfig{})
	b, _ := policies.NewBudget(policies.BudgetConfig{})
	rate := 10e6
	for i := range 60 {
		delta := millis(float64(i % 25))
		in := superviseIn(time.Duration(i)*50*time.Millisecond, rate, delta, rate, 0)
		in.Obs.Direction = estimator.Up
		ps, pb := s.Next(in), b.Next(in)
		if ps != pb {
			t.Fatalf("tick %d: supervise %+v, budget %+v", i, ps, pb)
		}
		rate = pb.Rate
	}
}

// TestSuperviseOwnership walks one supervision cycle: CAKE owns the rate
// while the delay is low; bloat takes it over at the margin under the
// estimate; the policy learns the margin from the rate it holds; it hands
// back only where CAKE's rate (15/16 of the estimate it kept) is not over
// its own, after a spell without cuts.
func TestSuperviseOwnership(t *testing.T) {
	s, err := policies.NewSupervise(policies.BudgetConfig{})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Duration(0)
	next := func(rate float64, delta time.Duration, achieved, estimate float64) policies.Proposal {
		at += 50 * time.Millisecond
		return s.Next(superviseIn(at, rate, delta, achieved, estimate))
	}
	// CAKE owns the rate at 15/16 of its 40 Mbit/s estimate, the delay low.
	for range 10 {
		if p := next(37.5e6, millis(1), 37.5e6, 40e6); p.Reason != policies.ReasonYield || p.Rate != 37.5e6 {
			t.Fatalf("low delay under CAKE: %+v, want it left to CAKE", p)
		}
	}
	// The link falls to 20 Mbit/s: 80 ms of delay; take over at no more
	// than 0.9 of the estimate.
	p := next(37.5e6, millis(80), 20e6, 40e6)
	if p.Reason == policies.ReasonYield || p.Rate > 0.9*40e6 || p.Rate >= 37.5e6 {
		t.Fatalf("bloat under CAKE: %+v, want a take-over at or under 36e6", p)
	}
	rate := p.Rate
	// The policy owns the rate (no live estimate); it holds 18 Mbit/s with
	// the delay low, and learns that the link carried 18/40 of the
	// estimate.
	for range 60 {
		p = next(18e6, millis(2), 17e6, 0)
		if p.Reason == policies.ReasonYield {
			t.Fatalf("handed back at %v with CAKE's rate at 37.5e6: %+v", rate, p)
		}
	}
	if m := s.Margin(); m < 0.6 || m > 0.7 {
		t.Errorf("margin %v after holding 18e6 under an estimate of 40e6, want (0.9+0.45)/2", m)
	}
	// At 38 Mbit/s, over CAKE's 37.5, pressed, with no cut for 2 s: hand
	// back.
	yielded := false
	for range 60 {
		p = next(38e6, millis(1), 38e6, 0)
		if p.Reason == policies.ReasonYield {
			yielded = true
			if p.Rate != 38e6 {
				t.Errorf("hand-back at %v, want the current rate", p.Rate)
			}
			break
		}
	}
	if !yielded {
		t.Error("never handed back at 38e6 with CAKE's rate at 37.5e6")
	}
}

// TestSuperviseNoHandBackUnloaded: an idle link is not handed back, however
// long it stays calm.
func TestSuperviseNoHandBackUnloaded(t *testing.T) {
	s, _ := policies.NewSupervise(policies.BudgetConfig{})
	at := time.Duration(0)
	at += 50 * time.Millisecond
	s.Next(superviseIn(at, 30e6, millis(1), 1e6, 30e6)) // the estimate CAKE was made with
	for range 200 {
		at += 50 * time.Millisecond
		if p := s.Next(superviseIn(at, 30e6, millis(1), 1e6, 0)); p.Reason == policies.ReasonYield {
			t.Fatalf("handed back an idle link at %v", at)
		}
	}
}
