package controller_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/autoshape/autoshape/controller"
	"github.com/autoshape/autoshape/estimator"
	"github.com/autoshape/autoshape/policies"
)

// blindPolicy is a scriptPolicy that also decides in a stall (see
// policies.Blind), proposing what propose returns and recording what it
// was asked.
type blindPolicy struct {
	*scriptPolicy
	propose func(in policies.Input) float64
	asked   []blindCall
}

type blindCall struct {
	since time.Time
	rate  float64
}

var _ policies.Blind = (*blindPolicy)(nil)

func (p *blindPolicy) Blind(in policies.Input, since time.Time) policies.Proposal {
	p.asked = append(p.asked, blindCall{since, in.Rate})
	return policies.Proposal{Rate: p.propose(in), Reason: policies.ReasonBlind}
}

// newBlindRig is newRig with a blindPolicy on download (its only
// direction).
func newBlindRig(t *testing.T, cfg controller.Config) (*rig, *blindPolicy) {
	t.Helper()
	est, err := estimator.New(estimator.Config{})
	if err != nil {
		t.Fatal(err)
	}
	pol := &blindPolicy{scriptPolicy: &scriptPolicy{}}
	r := &rig{t: t, prober: &recProber{}, now: t0}
	r.shapers[estimator.Down] = &fakeShaper{}
	r.pols[estimator.Down] = pol.scriptPolicy
	r.ctrl, err = controller.New(cfg, est, [2]controller.Shaper{r.shapers[estimator.Down]}, [2]policies.Policy{pol}, r.prober)
	if err != nil {
		t.Fatal(err)
	}
	return r, pol
}

func TestStallAsksABlindPolicy(t *testing.T) {
	const (
		stallAfter    = time.Second
		fallbackAfter = 5 * time.Second
		safe          = 8e6
		rate          = 15e6 // set before the samples stop
	)
	tests := []struct {
		name    string
		propose float64 // from the stall's third tick on; the rate before
		want    []change
	}{
		{
			name:    "lower: taken, then the fallback under it",
			propose: 12e6,
			want: []change{
				{Dir: estimator.Down, From: rate, To: 12e6, Reason: policies.ReasonBlind, State: controller.Stall},
				{Dir: estimator.Down, From: 12e6, To: safe, Reason: policies.ReasonFallback, State: controller.Stall},
			},
		},
		{
			name:    "higher: not taken",
			propose: 18e6,
			want:    []change{{Dir: estimator.Down, From: rate, To: safe, Reason: policies.ReasonFallback, State: controller.Stall}},
		},
		{
			name:    "under the fallback: taken, and kept past it",
			propose: 5e6,
			want:    []change{{Dir: estimator.Down, From: rate, To: 5e6, Reason: policies.ReasonBlind, State: controller.Stall}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var cfg controller.Config
			cfg.Directions[estimator.Down].Bounds = downBounds
			cfg.Directions[estimator.Down].Safe = safe
			cfg.StallAfter, cfg.FallbackAfter = stallAfter, fallbackAfter
			r, pol := newBlindRig(t, cfg)
			pol.propose = func(in policies.Input) float64 {
				if len(pol.asked) < 3 {
					return in.Rate
				}
				return tt.propose
			}
			r.sample()
			r.tick()
			r.pols[estimator.Down].push(rate)
			for range 10 {
				r.advance(step, loaded)
				r.sample()
				r.tick()
			}
			if len(pol.asked) > 0 {
				t.Fatalf("asked %d times while answers came", len(pol.asked))
			}

			// No more answers.
			var got []change
			var stallFrom time.Time
			for end := r.now.Add(stallAfter + fallbackAfter + 2*time.Second); r.now.Before(end); {
				r.advance(step, loaded)
				got = append(got, changes(r.tick())...)
				if r.ctrl.State() == controller.Stall && stallFrom.IsZero() {
					stallFrom = r.now
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("decisions during the stall mismatch (-want +got):\n%s", diff)
			}
			if len(pol.asked) == 0 {
				t.Fatal("never asked during the stall")
			}
			for i, c := range pol.asked {
				if !c.since.Equal(stallFrom) {
					t.Fatalf("call %d: since %v, want the stall's start %v", i, c.since.Sub(t0), stallFrom.Sub(t0))
				}
			}
			if first := pol.asked[0].rate; first != rate {
				t.Errorf("first call's rate %v, want the rate held, %v", first, rate)
			}
		})
	}
}

// TestStallWithoutAnyAnswerDoesNotAskBlind: a stall with no answer since
// the probes started is a reflector list or a path that does not answer,
// not a queue past the deadline: the policy is not asked, and the rate
// falls to safe on time.
func TestStallWithoutAnyAnswerDoesNotAskBlind(t *testing.T) {
	const safe = 8e6
	var cfg controller.Config
	cfg.Directions[estimator.Down].Bounds = downBounds
	cfg.Directions[estimator.Down].Safe = safe
	cfg.StallAfter, cfg.FallbackAfter = time.Second, 5*time.Second
	r, pol := newBlindRig(t, cfg)
	pol.propose = func(policies.Input) float64 { return 2e6 }
	for r.now.Sub(t0) < 8*time.Second {
		r.tick()
		r.advance(step, loaded)
	}
	if r.ctrl.State() != controller.Stall {
		t.Fatalf("state %v, want stall", r.ctrl.State())
	}
	if len(pol.asked) > 0 {
		t.Errorf("asked %d times in a stall with no answer ever", len(pol.asked))
	}
	if got := r.ctrl.Rate(estimator.Down); got != safe {
		t.Errorf("rate %v after 8 s without an answer, want the safe rate %v", got, safe)
	}
}
