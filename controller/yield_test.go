package controller_test

import (
	"context"
	"testing"

	"github.com/autoshape/autoshape/controller"
	"github.com/autoshape/autoshape/estimator"
	"github.com/autoshape/autoshape/policies"
)

// A yieldShaper is a fakeShaper that can hand its rate to autorate-ingress:
// it records each hand-back's starting rate.
type yieldShaper struct {
	fakeShaper
	yields []uint64
}

var _ controller.Yielder = (*yieldShaper)(nil)

func (y *yieldShaper) Yield(_ context.Context, bps uint64) (controller.Change, error) {
	y.mu.Lock()
	defer y.mu.Unlock()
	y.yields = append(y.yields, bps)
	y.rate = bps
	return controller.Change{Kind: "fake", Wrote: true}, nil
}

// yieldRig is a download-only controller over a yieldShaper (or, with
// plain set, a shaper that cannot yield) and a scripted policy.
func yieldRig(t *testing.T, plain bool) (*controller.Controller, *yieldShaper, *scriptPolicy) {
	t.Helper()
	est, err := estimator.New(estimator.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var cfg controller.Config
	cfg.Directions[estimator.Down].Bounds = downBounds
	ys, pol := &yieldShaper{}, &scriptPolicy{}
	var sh controller.Shaper = ys
	if plain {
		sh = &ys.fakeShaper
	}
	ctrl, err := controller.New(cfg, est, [2]controller.Shaper{estimator.Down: sh}, [2]policies.Policy{estimator.Down: pol}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return ctrl, ys, pol
}

// TestYieldHandsTheRateToCake: a yield proposal hands the rate over once;
// while CAKE owns it the controller writes nothing, takes the rate CAKE
// reports as the current one, and the next cut takes it back; CAKE found
// no longer owning it gets a rate written at the next tick.
func TestYieldHandsTheRateToCake(t *testing.T) {
	ctrl, ys, pol := yieldRig(t, false)
	now := t0
	tick := func(st controller.ShaperStats) []controller.Decision {
		t.Helper()
		now = now.Add(step)
		ctrl.AddSample(estimator.Sample{Reflector: "r1", Kind: estimator.OWDDown, Sent: now, Delay: 10e6})
		ys.SetStats(st)
		decs, err := ctrl.Tick(context.Background(), now)
		if err != nil {
			t.Fatal(err)
		}
		return decs
	}
	yield := func(in policies.Input) policies.Proposal {
		return policies.Proposal{Rate: in.Rate, Reason: policies.ReasonYield}
	}
	pol.setThen(yield)
	// The first tick writes the start rate, whatever the policy proposes.
	if got := changes(tick(controller.ShaperStats{Bytes: 1000})); len(got) != 1 || got[0].Reason != policies.ReasonStart {
		t.Fatalf("first tick: %+v, want the start write", got)
	}
	got := tick(controller.ShaperStats{Bytes: 2000})
	if len(got) != 1 || got[0].Reason != policies.ReasonYield || got[0].To != downBounds.Base || len(ys.yields) != 1 {
		t.Fatalf("yield tick: decisions %+v, yields %v; want one hand-back at base", changes(got), ys.yields)
	}
	// CAKE owns the rate and sets 12 Mbit/s: no write, no second hand-back,
	// and the policy sees CAKE's rate.
	cake := controller.ShaperStats{Bytes: 3000, AutorateIngress: true, CapacityEstimate: 12_800_000, Rate: 12_000_000}
	for i := range 3 {
		cake.Bytes += 1000
		if got := tick(cake); len(got) != 0 {
			t.Fatalf("tick %d while CAKE owns the rate: %+v, want none", i, changes(got))
		}
	}
	if in := pol.lastInput(); in.Rate != 12e6 || ctrl.Rate(estimator.Down) != 12e6 || in.Obs.CapacityEstimate != 12.8e6 {
		t.Errorf("while CAKE owns the rate: policy saw rate %v, estimate %v, controller rate %v; want 12e6, 12.8e6, 12e6",
			in.Rate, in.Obs.CapacityEstimate, ctrl.Rate(estimator.Down))
	}
	if len(ys.yields) != 1 || len(ys.writes) != 1 {
		t.Errorf("yields %v writes %v, want one each", ys.yields, ys.writes)
	}
	// A cut takes the rate back.
	pol.setThen(func(in policies.Input) policies.Proposal {
		return policies.Proposal{Rate: 8e6, Reason: policies.ReasonBloat}
	})
	cake.Bytes += 1000
	if got := changes(tick(cake)); len(got) != 1 || got[0].To != 8e6 || got[0].From != 12e6 {
		t.Fatalf("take-over: %+v, want one write 12e6 -> 8e6", got)
	}
	// Owning the rate again, the controller ignores the rate the shaper
	// reports.
	pol.setThen(func(in policies.Input) policies.Proposal {
		return policies.Proposal{Rate: in.Rate, Reason: policies.ReasonHold}
	})
	if got := tick(controller.ShaperStats{Bytes: 9000, Rate: 5e6}); len(got) != 0 || ctrl.Rate(estimator.Down) != 8e6 {
		t.Errorf("after the take-over: %+v, rate %v; want no change at 8e6", changes(got), ctrl.Rate(estimator.Down))
	}
	// Handed back again, and then autorate-ingress found off (someone
	// changed the qdisc): the next tick writes a rate.
	pol.setThen(yield)
	if got := tick(controller.ShaperStats{Bytes: 10000}); len(got) != 1 || got[0].Reason != policies.ReasonYield {
		t.Fatalf("second yield: %+v", changes(got))
	}
	pol.setThen(func(in policies.Input) policies.Proposal {
		return policies.Proposal{Rate: in.Rate, Reason: policies.ReasonHold}
	})
	if got := changes(tick(controller.ShaperStats{Bytes: 11000, Rate: 15e6})); len(got) != 1 || got[0].Reason != policies.ReasonStart || got[0].To != 8e6 {
		t.Errorf("autorate-ingress found off: %+v, want the rate written again at 8e6", got)
	}
}

// TestYieldWithoutYielder: a shaper that cannot hand its rate over keeps
// it: no write, no decision.
func TestYieldWithoutYielder(t *testing.T) {
	ctrl, ys, pol := yieldRig(t, true)
	pol.setThen(func(in policies.Input) policies.Proposal {
		return policies.Proposal{Rate: in.Rate * 1.5, Reason: policies.ReasonYield}
	})
	now := t0
	for i := range 3 {
		now = now.Add(step)
		ys.SetStats(controller.ShaperStats{Bytes: uint64(1000 * (i + 1))})
		decs, err := ctrl.Tick(context.Background(), now)
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 && len(decs) != 0 {
			t.Errorf("tick %d: %+v, want nothing", i, changes(decs))
		}
	}
	if len(ys.writes) != 1 || ctrl.Rate(estimator.Down) != downBounds.Base {
		t.Errorf("writes %v, rate %v; want only the start write at base", ys.writes, ctrl.Rate(estimator.Down))
	}
}
