package policies_test

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/autoshape/autoshape/estimator"
	"github.com/autoshape/autoshape/policies"
)

// budgetStart is the fixed instant the Budget policy tests count from.
var budgetStart = time.Date(2024, 3, 1, 8, 0, 0, 0, time.UTC)

// defaultBudget is the latency budget of DefaultBudgetConfig(0).
const defaultBudget = estimator.DefaultBudget

// millis returns v milliseconds.
func millis(v float64) time.Duration {
	return time.Duration(v * float64(time.Millisecond))
}

// A budgetStep is one controller tick fed to the Budget policy.
type budgetStep struct {
	at    time.Duration // since budgetStart
	rate  float64       // the shaper's rate
	delta time.Duration // the median added delay
	bloat bool          // the estimator's bloat verdict
	// achieved and load are the tick's achieved rate and load ratio.
	achieved, load float64
	offered        float64       // what reached the shaper, 0 for unmeasured
	capacity       float64       // CAKE's estimate, 0 for none
	ser            time.Duration // one packet's serialisation time
	backlog        uint64        // bytes queued in the shaper
	up             bool          // an upload observation (download otherwise)
	stale          bool          // no delay sample came since the previous tick
}

// runBudget feeds steps in order to one Budget policy built from cfg and
// returns its proposals.
func runBudget(t *testing.T, cfg policies.BudgetConfig, bounds policies.Bounds, steps []budgetStep) []policies.Proposal {
	t.Helper()
	p, err := policies.NewBudget(cfg)
	if err != nil {
		t.Fatalf("NewBudget(%+v): %v", cfg, err)
	}
	var got []policies.Proposal
	for _, s := range steps {
		now := budgetStart.Add(s.at)
		var deltas []time.Duration
		if !s.stale {
			// One sample came since the previous tick.
			deltas = []time.Duration{s.delta}
		}
		dir := estimator.Down
		if s.up {
			dir = estimator.Up
		}
		got = append(got, p.Next(policies.Input{
			Now: now,
			Obs: estimator.Observation{
				Time:             now,
				Direction:        dir,
				Delta:            s.delta,
				Serialisation:    s.ser,
				Threshold:        defaultBudget + s.ser,
				Bloat:            s.bloat,
				Achieved:         s.achieved,
				Offered:          s.offered,
				ShaperRate:       s.rate,
				Load:             s.load,
				CapacityEstimate: s.capacity,
				Backlog:          s.backlog,
				Reflectors:       3,
				Deltas:           deltas,
			},
			Rate:   s.rate,
			Bounds: bounds,
		}))
	}
	return got
}

// A move is which way a proposal takes the rate from the tick's.
type move int

const (
	anyWay move = iota
	same        // the rate stays
	up          // strictly above the tick's rate
	down        // strictly below it
)

// An expect is what one proposal must satisfy: its reason, which way it
// moves the rate, and bounds on the rate where set (0: none). Every
// proposal must also move the way its reason says and stay within the
// bounds (see checkInvariants).
type expect struct {
	reason policies.Reason
	move   move
	lo, hi float64
}

// stays, rises and falls expect reason r with the rate kept, raised or
// lowered.
func stays(r policies.Reason) expect { return expect{reason: r, move: same} }
func rises(r policies.Reason) expect { return expect{reason: r, move: up} }
func falls(r policies.Reason) expect { return expect{reason: r, move: down} }

// exactly expects reason r at rate: only where the number is the rule.
func exactly(r policies.Reason, rate float64) expect {
	return expect{reason: r, lo: rate, hi: rate}
}

// atLeast and atMost bound the rate of e.
func (e expect) atLeast(lo float64) expect { e.lo = lo; return e }
func (e expect) atMost(hi float64) expect  { e.hi = hi; return e }

// The proposals most steps expect.
var (
	held      = stays(policies.ReasonHold)
	cut       = falls(policies.ReasonBloat)
	eased     = falls(policies.ReasonEase)
	rose      = rises(policies.ReasonProbe)
	plateaued = stays(policies.ReasonProbe) // the curve holds the rate
	dropped   = falls(policies.ReasonDrop)
	decayed   = falls(policies.ReasonDecay) // towards a base below
)

// tolerance is the relative error allowed in a rate.
const tolerance = 1e-9

// check returns how p, proposed at step s, fails e.
func (e expect) check(s budgetStep, p policies.Proposal) []string {
	var errs []string
	if p.Reason != e.reason {
		errs = append(errs, fmt.Sprintf("reason %q, want %q", p.Reason, e.reason))
	}
	eps := tolerance * math.Max(math.Abs(p.Rate), math.Abs(s.rate))
	switch {
	case e.move == same && math.Abs(p.Rate-s.rate) > eps:
		errs = append(errs, "the rate moved, want it kept")
	case e.move == up && p.Rate <= s.rate+eps:
		errs = append(errs, "the rate did not rise")
	case e.move == down && p.Rate >= s.rate-eps:
		errs = append(errs, "the rate did not fall")
	}
	if e.lo > 0 && p.Rate < e.lo*(1-tolerance) {
		errs = append(errs, fmt.Sprintf("rate under %g", e.lo))
	}
	if e.hi > 0 && p.Rate > e.hi*(1+tolerance) {
		errs = append(errs, fmt.Sprintf("rate over %g", e.hi))
	}
	return errs
}

// checkInvariants returns how p, proposed at step s within bounds b, breaks
// a rule every proposal keeps: a hold keeps the rate, a rise (or an undone
// drop) never lowers it, a cut never raises it, a decay moves towards base
// and not past it, and a rate within the bounds stays within them.
func checkInvariants(s budgetStep, b policies.Bounds, p policies.Proposal) []string {
	var errs []string
	ok := true
	switch p.Reason {
	case policies.ReasonHold:
		ok = p.Rate == s.rate
	case policies.ReasonProbe, policies.ReasonDropUndone:
		ok = p.Rate >= math.Min(s.rate, b.Max)
	case policies.ReasonBloat, policies.ReasonEase, policies.ReasonDrop:
		ok = p.Rate <= s.rate
	case policies.ReasonDecay:
		ok = p.Rate >= math.Min(s.rate, b.Base) && p.Rate <= math.Max(s.rate, b.Base)
	}
	if !ok {
		errs = append(errs, fmt.Sprintf("a %q moved the rate the wrong way", p.Reason))
	}
	if s.rate >= b.Min && s.rate <= b.Max && (p.Rate < b.Min || p.Rate > b.Max) {
		errs = append(errs, fmt.Sprintf("outside the bounds [%g, %g]", b.Min, b.Max))
	}
	return errs
}

// A budgetCase is one sequence of ticks and what each of its proposals must
// satisfy.
type budgetCase struct {
	name   string
	cfg    policies.BudgetConfig // zero: the defaults for a 15ms budget
	bounds policies.Bounds       // wideBounds when zero
	steps  []budgetStep
	want   []expect
}

// wideBounds leave every rate in the tests unclamped, with a base of 20 Mbit/s.
var wideBounds = policies.Bounds{Min: 1e6, Base: 20e6, Max: 1e9}

func runBudgetCases(t *testing.T, tests []budgetCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if len(tt.want) != len(tt.steps) {
				t.Fatalf("%d steps but %d expectations", len(tt.steps), len(tt.want))
			}
			bounds := tt.bounds
			if bounds == (policies.Bounds{}) {
				bounds = wideBounds
			}
			got := runBudget(t, tt.cfg, bounds, tt.steps)
			var wantReasons, gotReasons []policies.Reason
			for i, p := range got {
				wantReasons, gotReasons = append(wantReasons, tt.want[i].reason), append(gotReasons, p.Reason)
			}
			if diff := cmp.Diff(wantReasons, gotReasons); diff != "" {
				t.Errorf("reasons mismatch (-want +got):\n%s", diff)
			}
			for i, p := range got {
				s := tt.steps[i]
				for _, err := range append(tt.want[i].check(s, p), checkInvariants(s, bounds, p)...) {
					t.Errorf("tick %d (at %v, rate %g): proposed %g (%s): %s", i, s.at, s.rate, p.Rate, p.Reason, err)
				}
			}
		})
	}
}

// A budgetRun is one policy fed steps in order.
type budgetRun struct {
	cfg   policies.BudgetConfig
	steps []budgetStep
}

// An orderCase is two runs whose last proposals, both of one reason, must be
// ordered: lower's rate strictly under higher's (or equal to it, when equal
// is set).
type orderCase struct {
	name          string
	reason        policies.Reason
	lower, higher budgetRun
	equal         bool
}

func runOrderCases(t *testing.T, tests []orderCase) {
	t.Helper()
	last := func(t *testing.T, r budgetRun) policies.Proposal {
		got := runBudget(t, r.cfg, wideBounds, r.steps)
		return got[len(got)-1]
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lo, hi := last(t, tt.lower), last(t, tt.higher)
			if lo.Reason != tt.reason || hi.Reason != tt.reason {
				t.Fatalf("reasons %q and %q, want %q", lo.Reason, hi.Reason, tt.reason)
			}
			switch eq := math.Abs(lo.Rate-hi.Rate) <= tolerance*hi.Rate; {
			case tt.equal && !eq:
				t.Errorf("rates %g and %g, want them equal", lo.Rate, hi.Rate)
			case !tt.equal && (eq || lo.Rate > hi.Rate):
				t.Errorf("rates %g and %g, want the first under the second", lo.Rate, hi.Rate)
			}
		})
	}
}

const (
	reasonHold  = policies.ReasonHold
	reasonBloat = policies.ReasonBloat
	reasonEase  = policies.ReasonEase
	reasonProbe = policies.ReasonProbe
	reasonDecay = policies.ReasonDecay
	reasonDrop  = policies.ReasonDrop
)

// after returns steps followed by more, leaving steps untouched.
func after(steps []budgetStep, more ...budgetStep) []budgetStep {
	return append(append([]budgetStep(nil), steps...), more...)
}

// then returns es followed by more, leaving es untouched.
func then(es []expect, more ...expect) []expect {
	return append(append([]expect(nil), es...), more...)
}

// repeat returns n copies of e.
func repeat(n int, e expect) []expect {
	es := make([]expect, n)
	for i := range es {
		es[i] = e
	}
	return es
}

func TestBudgetName(t *testing.T) {
	p, err := policies.NewBudget(policies.BudgetConfig{})
	if err != nil {
		t.Fatalf("NewBudget: %v", err)
	}
	if diff := cmp.Diff("budget", p.Name()); diff != "" {
		t.Errorf("Name() mismatch (-want +got):\n%s", diff)
	}
}

func TestDefaultBudgetConfig(t *testing.T) {
	tests := []struct {
		name   string
		budget time.Duration
		want   policies.BudgetConfig
	}{
		{
			name:   "15ms",
			budget: 15 * time.Millisecond,
			want: policies.BudgetConfig{
				Budget:     15 * time.Millisecond,
				Hold:       11250 * time.Microsecond,
				Drain:      300 * time.Millisecond,
				MinCut:     0.5,
				MaxCut:     0.95,
				Refractory: 250 * time.Millisecond,
				Step:       2,
				Memory:     10 * time.Second,
				Standing:   300 * time.Millisecond,
				Loaded:     0.9,
				Decay:      0.02,
			},
		},
		{
			name:   "zero is 15ms",
			budget: 0,
			want: policies.BudgetConfig{
				Budget: 15 * time.Millisecond, Hold: 11250 * time.Microsecond, Drain: 300 * time.Millisecond,
				MinCut: 0.5, MaxCut: 0.95, Refractory: 250 * time.Millisecond, Step: 2,
				Memory: 10 * time.Second, Standing: 300 * time.Millisecond, Loaded: 0.9, Decay: 0.02,
			},
		},
		{
			name:   "45ms scales hold, drain, standing and step",
			budget: 45 * time.Millisecond,
			want: policies.BudgetConfig{
				Budget: 45 * time.Millisecond, Hold: 33750 * time.Microsecond, Drain: 900 * time.Millisecond,
				MinCut: 0.5, MaxCut: 0.95, Refractory: 250 * time.Millisecond, Step: 6,
				Memory: 10 * time.Second, Standing: 900 * time.Millisecond, Loaded: 0.9, Decay: 0.02,
			},
		},
		{
			name:   "5ms rises at a third of 15ms's speed",
			budget: 5 * time.Millisecond,
			want: policies.BudgetConfig{
				Budget: 5 * time.Millisecond, Hold: 3750 * time.Microsecond, Drain: 100 * time.Millisecond,
				MinCut: 0.5, MaxCut: 0.95, Refractory: 250 * time.Millisecond, Step: 2.0 / 3,
				Memory: 10 * time.Second, Standing: 100 * time.Millisecond, Loaded: 0.9, Decay: 0.02,
			},
		},
		{
			name:   "the step stops at 10 from 75ms",
			budget: 90 * time.Millisecond,
			want: policies.BudgetConfig{
				Budget: 90 * time.Millisecond, Hold: 67500 * time.Microsecond, Drain: 1800 * time.Millisecond,
				MinCut: 0.5, MaxCut: 0.95, Refractory: 250 * time.Millisecond, Step: 10,
				Memory: 10 * time.Second, Standing: 1800 * time.Millisecond, Loaded: 0.9, Decay: 0.02,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := policies.DefaultBudgetConfig(tt.budget)
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateApprox(0, 1e-12)); diff != "" {
				t.Errorf("DefaultBudgetConfig(%v) mismatch (-want +got):\n%s", tt.budget, diff)
			}
			if err := got.Validate(); err != nil {
				t.Errorf("Validate() of the defaults: %v", err)
			}
		})
	}
}

func TestNewBudget(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name string
		cfg  policies.BudgetConfig
		// field is what the error must mention; empty when valid.
		field string
	}{
		{name: "zero config", cfg: policies.BudgetConfig{}},
		{name: "budget only", cfg: policies.BudgetConfig{Budget: 30 * ms}},
		{name: "hold equal to budget", cfg: policies.BudgetConfig{Budget: 10 * ms, Hold: 10 * ms}},
		{name: "min cut equal to max cut", cfg: policies.BudgetConfig{MinCut: 0.8, MaxCut: 0.8}},
		{name: "step 10", cfg: policies.BudgetConfig{Step: 10}},
		{name: "loaded 1", cfg: policies.BudgetConfig{Loaded: 1}},
		{name: "negative budget", cfg: policies.BudgetConfig{Budget: -ms}, field: "policy: budget"},
		{name: "hold above budget", cfg: policies.BudgetConfig{Budget: 10 * ms, Hold: 11 * ms}, field: "hold"},
		{name: "negative hold", cfg: policies.BudgetConfig{Hold: -ms}, field: "hold"},
		{name: "negative drain", cfg: policies.BudgetConfig{Drain: -ms}, field: "drain"},
		{name: "min cut above max cut", cfg: policies.BudgetConfig{MinCut: 0.9, MaxCut: 0.8}, field: "min_cut"},
		{name: "max cut 1", cfg: policies.BudgetConfig{MaxCut: 1}, field: "max_cut"},
		{name: "max cut above 1", cfg: policies.BudgetConfig{MaxCut: 1.2}, field: "max_cut"},
		{name: "negative min cut", cfg: policies.BudgetConfig{MinCut: -0.1}, field: "min_cut"},
		{name: "negative refractory", cfg: policies.BudgetConfig{Refractory: -ms}, field: "refractory"},
		{name: "negative step", cfg: policies.BudgetConfig{Step: -1}, field: "step -1"},
		{name: "step above 10", cfg: policies.BudgetConfig{Step: 11}, field: "step 11"},
		{name: "negative memory", cfg: policies.BudgetConfig{Memory: -ms}, field: "memory"},
		{name: "negative standing", cfg: policies.BudgetConfig{Standing: -ms}, field: "standing"},
		{name: "loaded above 1", cfg: policies.BudgetConfig{Loaded: 1.5}, field: "loaded"},
		{name: "negative loaded", cfg: policies.BudgetConfig{Loaded: -0.1}, field: "loaded"},
		{name: "loaded NaN", cfg: policies.BudgetConfig{Loaded: math.NaN()}, field: "loaded"},
		{name: "decay 1", cfg: policies.BudgetConfig{Decay: 1}, field: "decay"},
		{name: "negative decay", cfg: policies.BudgetConfig{Decay: -0.02}, field: "decay"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := policies.NewBudget(tt.cfg)
			if tt.field == "" {
				if err != nil || p == nil {
					t.Fatalf("NewBudget(%+v) = %v, %v; want a policy and no error", tt.cfg, p, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("NewBudget(%+v) succeeded; want an error naming %s", tt.cfg, tt.field)
			}
			if !strings.Contains(err.Error(), tt.field) {
				t.Errorf("NewBudget(%+v) error %q does not name %s", tt.cfg, err, tt.field)
			}
			if verr := tt.cfg.Validate(); verr == nil || verr.Error() != err.Error() {
				t.Errorf("Validate() = %v; want the error of NewBudget, %v", verr, err)
			}
		})
	}
}

// TestBudgetCut checks the cut on bloat: to capacity*factor, with factor =
// clamp(1-(delay-Hold)/Drain, MinCut, MaxCut), twice as deep when the
// capacity is unmeasured, never below MinCut of the rate unless what gets
// through measures the capacity. Hold is 11.25ms and Drain 300ms throughout.
func TestBudgetCut(t *testing.T) {
	runBudgetCases(t, []budgetCase{
		{
			name:  "drains the excess in Drain",
			steps: []budgetStep{{rate: 50e6, delta: millis(71.25), bloat: true, achieved: 40e6, load: 0.8}},
			// factor 1 - 60/300 = 0.8 of the achieved 40 Mbit/s.
			want: []expect{exactly(reasonBloat, 32e6)},
		},
		{
			// All of the rate got through: the capacity is unmeasured, below
			// the rate by an unknown amount, so the cut is twice as deep:
			// 1 - 2 x 60/300 = 0.6 of the rate.
			name:  "achieved above the rate counts as the rate, twice as deep",
			steps: []budgetStep{{rate: 50e6, delta: millis(71.25), bloat: true, achieved: 60e6, load: 1.2}},
			want:  []expect{exactly(reasonBloat, 30e6)},
		},
		{
			name:  "never below MinCut of the rate in a fade",
			steps: []budgetStep{{rate: 50e6, delta: millis(161.25), bloat: true, achieved: 5e6, load: 0.1}},
			want:  []expect{cut.atLeast(0.5 * 50e6)},
		},
		{
			name:  "under what gets through when less gets through than the rate",
			steps: []budgetStep{{rate: 50e6, delta: millis(161.25), bloat: true, achieved: 10e6, load: 0.2}},
			want:  []expect{cut.atMost(10e6)},
		},
		{
			name:  "no achieved rate: under CAKE's estimate",
			steps: []budgetStep{{rate: 40e6, delta: millis(41.25), bloat: true, capacity: 30e6}},
			want:  []expect{cut.atMost(30e6)},
		},
		{
			name:  "the achieved rate before CAKE's estimate",
			steps: []budgetStep{{rate: 50e6, delta: millis(71.25), bloat: true, achieved: 40e6, load: 0.8, capacity: 30e6}},
			want:  []expect{cut.atLeast(30e6).atMost(40e6)},
		},
		{
			name:  "the median over the budget cuts without the bloat verdict",
			steps: []budgetStep{{rate: 50e6, delta: millis(41.25), achieved: 40e6, load: 0.8}},
			want:  []expect{cut.atMost(40e6)},
		},
		{
			name: "a gap of 200ms or more takes the new achieved rate",
			steps: []budgetStep{
				{rate: 40e6, achieved: 40e6, load: 1},
				{at: 200 * time.Millisecond, rate: 40e6, delta: millis(71.25), bloat: true, achieved: 30e6, load: 0.75},
			},
			// 0.8 of 30 Mbit/s.
			want: []expect{rose, exactly(reasonBloat, 24e6)},
		},
	})
}

// TestBudgetCutDeepens checks that, over the same capacity, a cut deepens as
// the delay grows, from MaxCut of what gets through just over Hold to MinCut
// of it far over.
func TestBudgetCutDeepens(t *testing.T) {
	cfg := policies.DefaultBudgetConfig(0)
	const capacity = 40e6
	var rates []float64
	for delay := cfg.Hold + time.Millisecond; delay < cfg.Hold+2*cfg.Drain; delay += 10 * time.Millisecond {
		got := runBudget(t, cfg, wideBounds, []budgetStep{{rate: 50e6, delta: delay, bloat: true, achieved: capacity, load: 0.8}})
		if got[0].Reason != reasonBloat {
			t.Fatalf("delay %v: reason %q, want %q", delay, got[0].Reason, reasonBloat)
		}
		rates = append(rates, got[0].Rate)
	}
	for i := 1; i < len(rates); i++ {
		if rates[i] > rates[i-1] {
			t.Errorf("cut %d to %g, shallower than the one before, to %g", i, rates[i], rates[i-1])
		}
	}
	first, last := rates[0], rates[len(rates)-1]
	if diff := cmp.Diff([]float64{cfg.MaxCut * capacity, cfg.MinCut * capacity}, []float64{first, last}); diff != "" {
		t.Errorf("the shallowest and deepest cuts mismatch (-want +got):\n%s", diff)
	}
}

// TestBudgetOrder checks rules that order two runs' last proposals.
func TestBudgetOrder(t *testing.T) {
	single := func(s budgetStep) budgetRun { return budgetRun{steps: []budgetStep{s}} }
	probe := func(at time.Duration, rate float64) budgetStep {
		return budgetStep{at: at, rate: rate, achieved: rate, load: 1}
	}
	idle := func(at time.Duration, rate float64) budgetStep {
		return budgetStep{at: at, rate: rate}
	}
	runOrderCases(t, []orderCase{
		{
			// 48.6 of 50 Mbit/s getting through is all of it (97 % or
			// more): the capacity is unmeasured and lies below the rate.
			name:   "an unmeasured capacity cuts deeper than a measured one",
			reason: reasonBloat,
			lower:  single(budgetStep{rate: 50e6, delta: millis(71.25), bloat: true, achieved: 48.6e6, load: 0.972}),
			higher: single(budgetStep{rate: 50e6, delta: millis(71.25), bloat: true, achieved: 48e6, load: 0.96}),
		},
		{
			name:   "no measure at all cuts as deep as an unmeasured capacity",
			reason: reasonBloat,
			lower:  single(budgetStep{rate: 50e6, delta: millis(71.25), bloat: true}),
			higher: single(budgetStep{rate: 50e6, delta: millis(71.25), bloat: true, achieved: 50e6, load: 1}),
			equal:  true,
		},
		{
			// 50ms after 40 Mbit/s got through, the 30 of this tick weigh a
			// quarter; 200ms after, all.
			name:   "the capacity a cut aims at is smoothed over 200ms",
			reason: reasonBloat,
			lower: budgetRun{steps: []budgetStep{probe(0, 40e6),
				{at: 200 * time.Millisecond, rate: 40e6, delta: millis(71.25), bloat: true, achieved: 30e6, load: 0.75}}},
			higher: budgetRun{steps: []budgetStep{probe(0, 40e6),
				{at: 50 * time.Millisecond, rate: 40e6, delta: millis(71.25), bloat: true, achieved: 30e6, load: 0.75}}},
		},
		{
			name:   "a rise grows with the time since the previous call",
			reason: reasonProbe,
			lower:  budgetRun{steps: []budgetStep{probe(0, 40e6), probe(50*time.Millisecond, 42e6)}},
			higher: budgetRun{steps: []budgetStep{probe(0, 40e6), probe(100*time.Millisecond, 42e6)}},
		},
		{
			name:   "a gap counts as at most one second",
			reason: reasonProbe,
			lower:  budgetRun{steps: []budgetStep{probe(0, 40e6), probe(5*time.Second, 10e6)}},
			higher: budgetRun{steps: []budgetStep{probe(0, 40e6), probe(time.Second, 10e6)}},
			equal:  true,
		},
		{
			name:   "a smaller Step rises less",
			reason: reasonProbe,
			lower:  budgetRun{cfg: policies.BudgetConfig{Step: 1}, steps: []budgetStep{probe(0, 40e6)}},
			higher: single(probe(0, 40e6)),
		},
		{
			name:   "a decay grows with the time since the previous call",
			reason: reasonDecay,
			lower:  budgetRun{steps: []budgetStep{idle(0, 40e6), idle(500*time.Millisecond, 40e6)}},
			higher: budgetRun{steps: []budgetStep{idle(0, 40e6), idle(50*time.Millisecond, 40e6)}},
		},
		{
			name:   "a larger Decay drifts further",
			reason: reasonDecay,
			lower:  budgetRun{cfg: policies.BudgetConfig{Decay: 0.1}, steps: []budgetStep{idle(0, 40e6)}},
			higher: single(idle(0, 40e6)),
		},
	})
}

// TestBudgetRefractory checks the wait between cuts: Refractory (250ms) plus
// the delay that triggered the last cut; between the wait and twice the wait a
// cut repeats only while the delay grows.
func TestBudgetRefractory(t *testing.T) {
	// A cut at 0 with 71.25ms queued: the wait is 321.25ms, twice that 642.5ms.
	first := budgetStep{rate: 50e6, delta: millis(71.25), bloat: true, achieved: 40e6, load: 0.8}
	bloated := func(at, delta time.Duration) budgetStep {
		return budgetStep{at: at, rate: 32e6, delta: delta, bloat: true, achieved: 30e6, load: 30.0 / 32}
	}
	runBudgetCases(t, []budgetCase{
		{
			name:  "within the wait holds even if the delay grew",
			steps: []budgetStep{first, bloated(millis(321.2), 200*time.Millisecond)},
			want:  []expect{cut, held},
		},
		{
			name:  "after the wait a growing delay cuts",
			steps: []budgetStep{first, bloated(millis(321.25), millis(101.25))},
			want:  []expect{cut, cut},
		},
		{
			name:  "between the wait and twice it the same delay holds",
			steps: []budgetStep{first, bloated(400*time.Millisecond, millis(71.25))},
			want:  []expect{cut, held},
		},
		{
			name:  "between the wait and twice it a falling delay holds",
			steps: []budgetStep{first, bloated(642*time.Millisecond, 50*time.Millisecond)},
			want:  []expect{cut, held},
		},
		{
			name:  "after twice the wait the same delay cuts",
			steps: []budgetStep{first, bloated(millis(642.5), millis(71.25))},
			want:  []expect{cut, cut},
		},
		{
			name:  "after twice the wait a falling delay cuts",
			steps: []budgetStep{first, bloated(700*time.Millisecond, millis(41.25))},
			want:  []expect{cut, cut},
		},
		{
			name: "the wait grows with the delay of the last cut",
			steps: []budgetStep{
				first,
				bloated(millis(321.25), millis(101.25)),
				// The wait is now 250 + 101.25ms after 321.25ms: until 672.5ms.
				bloated(millis(672.4), 200*time.Millisecond),
				bloated(millis(672.5), 150*time.Millisecond),
			},
			want: []expect{cut, cut, held, cut},
		},
		{
			name: "an ease starts the wait too",
			steps: []budgetStep{
				// An ease with 13ms queued: the wait is 263ms.
				{rate: 40e6, delta: 13 * time.Millisecond, achieved: 40e6, load: 1},
				{at: 262 * time.Millisecond, rate: 38e6, delta: millis(71.25), bloat: true, achieved: 38e6, load: 1},
				{at: 263 * time.Millisecond, rate: 38e6, delta: millis(71.25), bloat: true, achieved: 38e6, load: 1},
			},
			want: []expect{eased, held, cut},
		},
	})
}

// TestBudgetEase checks the ease between Hold (11.25ms) and the budget (15ms):
// down to MaxCut of what the link delivers, at most once per wait.
func TestBudgetEase(t *testing.T) {
	runBudgetCases(t, []budgetCase{
		{
			name:  "loaded: MaxCut of the achieved rate",
			steps: []budgetStep{{rate: 50e6, delta: 13 * time.Millisecond, achieved: 45e6, load: 0.9}},
			want:  []expect{exactly(reasonEase, 0.95*45e6)},
		},
		{
			name:  "at the budget still eases",
			steps: []budgetStep{{rate: 50e6, delta: defaultBudget, achieved: 50e6, load: 1}},
			want:  []expect{eased},
		},
		{
			name:  "achieved above the rate: at most MaxCut of the rate",
			steps: []budgetStep{{rate: 50e6, delta: 13 * time.Millisecond, achieved: 60e6, load: 1.2}},
			want:  []expect{eased.atMost(0.95 * 50e6)},
		},
		{
			name:  "a capacity step goes straight to the achieved rate",
			steps: []budgetStep{{rate: 40e6, delta: 13 * time.Millisecond, achieved: 10e6, load: 0.25}},
			// No MinCut floor: 0.95 * 10 Mbit/s, not 20 Mbit/s.
			want: []expect{exactly(reasonEase, 9.5e6)},
		},
		{
			// The first tick is not loaded (the rate was above the traffic), so
			// the fall is no capacity drop and the ease rule decides; its
			// traffic is substantial, so the rate holds meanwhile.
			name: "a capacity step uses the tick's achieved rate, not the smoothed one",
			steps: []budgetStep{
				{rate: 60e6, achieved: 40e6, load: 0.67},
				// Smoothed: 32.5 Mbit/s.
				{at: 50 * time.Millisecond, rate: 40e6, delta: 13 * time.Millisecond, achieved: 10e6, load: 0.25},
			},
			want: []expect{held, eased.atMost(10e6)},
		},
		{
			name: "loaded uses the smoothed achieved rate",
			steps: []budgetStep{
				{rate: 40e6, achieved: 40e6, load: 1},
				// Smoothed: 39 Mbit/s.
				{at: 50 * time.Millisecond, rate: 40e6, delta: 13 * time.Millisecond, achieved: 36e6, load: 0.9},
			},
			want: []expect{rose, eased.atLeast(36e6)},
		},
		{
			name:  "traffic under a fifth of the rate: at most MinCut",
			steps: []budgetStep{{rate: 50e6, delta: 13 * time.Millisecond, achieved: 8e6, load: 0.16}},
			want:  []expect{eased.atLeast(0.5 * 50e6)},
		},
		{
			name:  "CAKE's estimate far below: at most MinCut",
			steps: []budgetStep{{rate: 50e6, delta: 13 * time.Millisecond, capacity: 10e6}},
			want:  []expect{eased.atLeast(0.5 * 50e6)},
		},
		{
			name: "at most once per wait",
			steps: []budgetStep{
				// 13ms queued: the wait is 263ms.
				{rate: 50e6, delta: 13 * time.Millisecond, achieved: 50e6, load: 1},
				{at: 100 * time.Millisecond, rate: 47.5e6, delta: 13 * time.Millisecond, achieved: 47.5e6, load: 1},
				{at: 262 * time.Millisecond, rate: 47.5e6, delta: 14 * time.Millisecond, achieved: 47.5e6, load: 1},
				{at: 263 * time.Millisecond, rate: 47.5e6, delta: 14 * time.Millisecond, achieved: 47.5e6, load: 1},
			},
			want: []expect{eased, held, held, eased},
		},
	})
}

// TestBudgetOverLink checks the download's rate over the link: a delay over
// Hold while less reaches the shaper than its rate (by offeredMargin, 3 %)
// brings the rate to what reaches it (smoothed over about 200ms) at once,
// without the wait that spaces cuts.
func TestBudgetOverLink(t *testing.T) {
	// 13ms: over Hold (11.25ms), within the budget.
	over := func(at time.Duration, rate, offered float64) budgetStep {
		return budgetStep{at: at, rate: rate, delta: 13 * time.Millisecond, achieved: offered, offered: offered, load: offered / rate}
	}
	runBudgetCases(t, []budgetCase{
		{
			name:  "the link delivers less than the rate: to what it delivers",
			steps: []budgetStep{over(0, 50e6, 40e6)},
			want:  []expect{exactly(reasonEase, 40e6)},
		},
		{
			name:  "over the budget too: to what it delivers, not a cut",
			steps: []budgetStep{{rate: 50e6, delta: 30 * time.Millisecond, bloat: true, achieved: 40e6, offered: 40e6, load: 0.8}},
			want:  []expect{exactly(reasonEase, 40e6)},
		},
		{
			// Within the wait after the first ease (263ms), the link
			// delivering less again brings the rate down again.
			name:  "without the wait that spaces cuts",
			steps: []budgetStep{over(0, 50e6, 40e6), over(50*time.Millisecond, 40e6, 30e6)},
			// Smoothed over 200ms: 40 + (30-40)/4.
			want: []expect{exactly(reasonEase, 40e6), exactly(reasonEase, 37.5e6)},
		},
		{
			name:  "within the margin: an ordinary ease",
			steps: []budgetStep{over(0, 50e6, 49e6)},
			want:  []expect{exactly(reasonEase, 0.95*49e6)},
		},
		{
			name:  "more reaches the shaper than its rate: an ordinary ease",
			steps: []budgetStep{{rate: 50e6, delta: 13 * time.Millisecond, achieved: 50e6, offered: 55e6, load: 1}},
			want:  []expect{exactly(reasonEase, 0.95*50e6)},
		},
		{
			name:  "the delay under Hold: no queue to act on",
			steps: []budgetStep{{rate: 50e6, delta: 10 * time.Millisecond, achieved: 40e6, offered: 40e6, load: 0.8}},
			want:  []expect{held},
		},
		{
			name:  "unmeasured: an ordinary ease",
			steps: []budgetStep{{rate: 50e6, delta: 13 * time.Millisecond, achieved: 40e6, load: 0.8}},
			want:  []expect{exactly(reasonEase, 0.95*40e6)},
		},
		{
			// A link with a ceiling of its own (see ceiling): the rate
			// over it is a probe past a known knee, which the ordinary
			// ease marks and drains (MaxCut of what gets through).
			name:  "a ceiling of its own: an ordinary ease",
			steps: after(ceiling, over(900*time.Millisecond, 45e6, 38e6)),
			want:  then(ceilingCuts, exactly(reasonEase, 0.95*38e6)),
		},
		{
			// On upload our shaper is upstream of the link: what reaches
			// it is what the senders send, not what the link delivers.
			name:  "upload: an ordinary ease",
			steps: []budgetStep{{rate: 50e6, delta: 13 * time.Millisecond, achieved: 40e6, offered: 40e6, load: 0.8, up: true}},
			want:  []expect{exactly(reasonEase, 0.95*40e6)},
		},
	})
}

// ceiling is a link that showed 40 Mbit/s twice: two cuts (14ms: over Hold,
// within the budget, so no time over the budget counts) with 40 Mbit/s
// getting through a rate of 50, at 0 and at 600ms, the delay back to nothing
// in between (two episodes, which a ceiling needs). The ceiling is ceil, 97 %
// of the measure.
const ceil = 40e6 * 0.97

var (
	ceiling = []budgetStep{
		{rate: 50e6, delta: 14 * time.Millisecond, bloat: true, achieved: 40e6, load: 0.8},
		{at: 300 * time.Millisecond, rate: 38e6, achieved: 38e6, load: 1},
		{at: 600 * time.Millisecond, rate: 50e6, delta: 14 * time.Millisecond, bloat: true, achieved: 40e6, load: 0.8},
	}
	ceilingCuts = []expect{cut, rose, cut}
)

// plateau is the gentle rise's curve, as a fraction of the ceiling, t
// seconds after the ceiling's last mark, from zone: 1 + (1-zone)(t/3 - 1)³.
func plateau(t, zone float64) float64 {
	x := t/3 - 1
	return 1 + (1-zone)*x*x*x
}

// TestBudgetCeilingClears checks the download's sign that a ceiling is gone
// before the plateau: pressing against it for a second with a small queue
// upstream (3ms), then for clearFor (500ms) with none.
func TestBudgetCeilingClears(t *testing.T) {
	// at is a tick at the ceiling, loaded, with delay d, i ticks (50ms
	// apart) after 700ms; ticks returns n of them from the i-th.
	at := func(i int, d time.Duration) budgetStep {
		return budgetStep{at: 700*time.Millisecond + time.Duration(i)*50*time.Millisecond, rate: ceil, delta: d, achieved: ceil, load: 1}
	}
	ticks := func(from, n int, d time.Duration) []budgetStep {
		var out []budgetStep
		for i := from; i < from+n; i++ {
			out = append(out, at(i, d))
		}
		return out
	}
	queued := ticks(0, 22, 3*time.Millisecond) // 1.1 s at the ceiling, 3ms upstream
	// serialised returns n ticks from the i-th whose delay has 1.3ms of
	// serialisation taken off: up to the 40th, every other one shows a
	// queue (3.3ms, 2ms less the serialisation), the others none.
	serialised := func(from, n int) []budgetStep {
		out := ticks(from, n, 0)
		for k := range out {
			out[k].ser = 1300 * time.Microsecond
			if i := from + k; i <= 40 && i%2 == 0 {
				out[k].delta = 3300 * time.Microsecond
			}
		}
		return out
	}
	runBudgetCases(t, []budgetCase{
		{
			// 1.85 s after the mark the curve still stands under the
			// ceiling (plateauAt is 3 s): the slow start past it comes
			// from the queue being gone: its first try, 2 % over the
			// ceiling.
			name:  "the queue gone for clearFor: past the ceiling before the plateau",
			steps: after(ceiling, append(append([]budgetStep{}, queued...), ticks(22, 11, 0)...)...),
			want:  then(ceilingCuts, append(repeat(32, plateaued), exactly(reasonProbe, 1.02*ceil))...),
		},
		{
			// The mean of the queue the ceiling showed is not learnt
			// from the spell that shows none: learnt, it fell from 1ms
			// under an eighth of the halved Hold (0.7ms) within seven
			// ticks, and the sign was lost before clearFor.
			name:  "a small queue gone for clearFor: past the ceiling",
			steps: after(ceiling, append(ticks(0, 22, time.Millisecond), ticks(22, 11, 0)...)...),
			want:  then(ceilingCuts, append(repeat(32, plateaued), exactly(reasonProbe, 1.02*ceil))...),
		},
		{
			// One packet's serialisation, taken off the delay, puts a
			// reading with no queue under nothing (-1.3ms in the host
			// lab at 9 Mbit/s). Such readings are no queue, not less
			// than none: averaged as they were, they hid a queue of 2ms
			// in every other reading (a mean of 0.35ms, under an eighth
			// of the halved Hold, after 2 s).
			name:  "a queue between readings under nothing, gone: past the ceiling",
			steps: after(ceiling, serialised(0, 52)...),
			want:  then(ceilingCuts, append(repeat(51, plateaued), exactly(reasonProbe, 1.02*ceil))...),
		},
		{
			name:  "gone for less than clearFor: the curve",
			steps: after(ceiling, append(append([]budgetStep{}, queued...), ticks(22, 9, 0)...)...),
			want:  then(ceilingCuts, repeat(31, plateaued)...),
		},
		{
			name:  "the queue still there: the curve",
			steps: after(ceiling, append(append([]budgetStep{}, queued...), ticks(22, 11, 3*time.Millisecond)...)...),
			want:  then(ceilingCuts, repeat(33, plateaued)...),
		},
		{
			// Under an eighth of the halved Hold (0.7ms): too small a
			// queue to tell from none, so no sign either way.
			name:  "no queue at the ceiling to lose: the curve",
			steps: after(ceiling, ticks(0, 33, 500*time.Microsecond)...),
			want:  then(ceilingCuts, repeat(33, plateaued)...),
		},
		{
			// Half a second at the ceiling is not enough to know its queue.
			name:  "too short a time at the ceiling: the curve",
			steps: after(ceiling, append(ticks(0, 10, 3*time.Millisecond), ticks(10, 11, 0)...)...),
			want:  then(ceilingCuts, repeat(21, plateaued)...),
		},
	})
}

// TestBudgetCeilingPeak checks the download's other sign that a ceiling is
// gone: a call in which the link delivered a quarter more than the most it
// delivered in a call over a second at the ceiling. The delay shows no queue
// throughout, so the queue's sign (see TestBudgetCeilingClears) cannot fire.
func TestBudgetCeilingPeak(t *testing.T) {
	// ticks returns n ticks at the ceiling, loaded, 50ms apart from the
	// i-th after 700ms, with offered reaching the shaper.
	ticks := func(from, n int, offered float64) []budgetStep {
		var out []budgetStep
		for i := from; i < from+n; i++ {
			out = append(out, budgetStep{at: 700*time.Millisecond + time.Duration(i)*50*time.Millisecond,
				rate: ceil, achieved: ceil, offered: offered, load: 1})
		}
		return out
	}
	// 1.1 s at the ceiling with the link delivering 40 Mbit/s into it.
	saturated := ticks(0, 22, 40e6)
	runBudgetCases(t, []budgetCase{
		{
			// The slow start's first try, 2 % over the ceiling.
			name:  "a third more delivered: past the ceiling before the plateau",
			steps: after(ceiling, append(append([]budgetStep{}, saturated...), ticks(22, 1, 52e6)...)...),
			want:  then(ceilingCuts, append(repeat(22, plateaued), exactly(reasonProbe, 1.02*ceil))...),
		},
		{
			name:  "a fifth more: counting noise, the curve",
			steps: after(ceiling, append(append([]budgetStep{}, saturated...), ticks(22, 1, 48e6)...)...),
			want:  then(ceilingCuts, repeat(23, plateaued)...),
		},
		{
			// Half a second is not enough to know what the link delivers
			// at the ceiling.
			name:  "a third more after too short a time at the ceiling: the curve",
			steps: after(ceiling, append(ticks(0, 10, 40e6), ticks(10, 1, 52e6)...)...),
			want:  then(ceilingCuts, repeat(11, plateaued)...),
		},
		{
			// 1.1 s with nothing measured is no second of measure: the
			// first measure after it is no sign.
			name:  "a third more after nothing measured: the curve",
			steps: after(ceiling, append(ticks(0, 22, 0), ticks(22, 1, 52e6)...)...),
			want:  then(ceilingCuts, repeat(23, plateaued)...),
		},
	})
}

// TestBudgetProbe checks the rise when loaded and under Hold: Step (2/s) times
// the headroom below Hold (at least a quarter) times the time since the last
// call; near a ceiling the link has shown, the plateau curve instead. No
// time is spent over the budget here, so the rise is not slowed.
func TestBudgetProbe(t *testing.T) {
	probe := func(at time.Duration, rate float64) budgetStep {
		return budgetStep{at: at, rate: rate, achieved: rate, load: 1}
	}
	// stale is n loaded ticks 50ms apart from at, with no new delay sample.
	stale := func(at time.Duration, n int, rate float64) []budgetStep {
		var steps []budgetStep
		for i := range n {
			s := probe(at+time.Duration(i)*50*time.Millisecond, rate)
			s.stale = true
			steps = append(steps, s)
		}
		return steps
	}
	repeat := func(e expect, n int) []expect {
		var es []expect
		for range n {
			es = append(es, e)
		}
		return es
	}
	runBudgetCases(t, []budgetCase{
		{
			name:  "Step over the 50ms a first call assumes",
			steps: []budgetStep{probe(0, 40e6)},
			want:  []expect{exactly(reasonProbe, 40e6*(1+2*0.05))},
		},
		{
			name:  "time going back raises nothing",
			steps: []budgetStep{probe(time.Second, 40e6), probe(900*time.Millisecond, 42e6)},
			want:  []expect{rose, plateaued},
		},
		{
			// A rise is vouched for by a delay sample newer than the
			// last: with none since the previous call (answers late, a
			// busy router), the delay may hide the queue the last rise
			// built. The next sample lets the rise go on.
			name: "no new delay sample: no rise until one comes",
			steps: []budgetStep{
				probe(0, 40e6),
				{at: 50 * time.Millisecond, rate: 44e6, achieved: 44e6, load: 1, stale: true},
				{at: 100 * time.Millisecond, rate: 44e6, achieved: 44e6, load: 1, stale: true},
				probe(150*time.Millisecond, 44e6),
			},
			want: []expect{rose, held, held, rose},
		},
		{
			// With a sample every 500 ms (a low probe rate) each one
			// vouches for the 500 ms since the last: the rise keeps
			// Step's speed (2/s: twice the rate in half a second).
			name: "a sample every 500ms: the rise keeps its speed",
			steps: append(append([]budgetStep{probe(0, 20e6)}, stale(50*time.Millisecond, 9, 22e6)...),
				probe(500*time.Millisecond, 20e6)),
			want: append(append([]expect{rose}, repeat(held, 9)...), exactly(reasonProbe, 20e6*(1+2*0.5))),
		},
		{
			name:  "at hold a quarter of the rise",
			steps: []budgetStep{{rate: 40e6, delta: millis(11.25), achieved: 40e6, load: 1}},
			want:  []expect{exactly(reasonProbe, 40e6*(1+2*0.05/4))},
		},
		{
			name:  "load at Loaded rises",
			steps: []budgetStep{{rate: 40e6, achieved: 36e6, load: 0.9}},
			want:  []expect{rose},
		},
		{
			name:  "load under Loaded holds instead",
			steps: []budgetStep{{rate: 40e6, achieved: 35.6e6, load: 0.89}},
			want:  []expect{held},
		},
		{
			// 100ms after the mark the curve stands at 90.97 % of the
			// ceiling: a little above the zone's edge.
			name:  "concave up to a ceiling two episodes agreed on",
			steps: after(ceiling, probe(700*time.Millisecond, 35e6)),
			want:  then(ceilingCuts, exactly(reasonProbe, ceil*plateau(0.1, 0.9))),
		},
		{
			name:  "a plateau at the ceiling",
			steps: after(ceiling, probe(700*time.Millisecond, 40e6), probe(2600*time.Millisecond, 40e6)),
			want:  then(ceilingCuts, plateaued, plateaued),
		},
		{
			name:  "a plateau within 10 % above it",
			steps: after(ceiling, probe(700*time.Millisecond, 42.6e6)),
			want:  then(ceilingCuts, plateaued),
		},
		{
			// 50 Mbit/s is above the zone and the curve (a bound put it
			// there, say): the ceiling is not the link's, and the rise is
			// Step's.
			name:  "above the zone and the curve the rise is fast",
			steps: after(ceiling, probe(700*time.Millisecond, 50e6)),
			want:  then(ceilingCuts, rose),
		},
		{
			// 4 s after the mark, with a little queue (over half the
			// halved Hold): 1 + 0.1 (1/3)³ of the ceiling.
			name: "convex past the ceiling after plateauAt",
			steps: after(ceiling, budgetStep{at: 4600 * time.Millisecond, rate: ceil, delta: millis(4), achieved: ceil,
				load: 1}),
			want: then(ceilingCuts, exactly(reasonProbe, ceil*plateau(4, 0.9))),
		},
		{
			// With next to no queue past plateauAt the ceiling may be
			// gone: faster than the curve, a first try 2 % past it.
			name:  "past plateauAt with no queue a slow start",
			steps: after(ceiling, probe(4600*time.Millisecond, ceil)),
			want:  then(ceilingCuts, exactly(reasonProbe, 1.02*ceil)),
		},
		{
			// Calls every 50ms with no queue: the first try, 2 % over
			// the ceiling, holds until a lag (150ms) has shown no queue,
			// then the excess doubles every 150ms, and the rate is past
			// the zone's end, its ceiling given way, within 600ms.
			name: "a ceiling that is gone gives way within 600ms",
			steps: after(ceiling, probe(3600*time.Millisecond, ceil),
				probe(3650*time.Millisecond, 1.02*ceil), probe(3700*time.Millisecond, 1.02*ceil),
				probe(3750*time.Millisecond, 1.02*ceil), probe(3800*time.Millisecond, 1.025*ceil),
				probe(3850*time.Millisecond, 1.032*ceil), probe(3900*time.Millisecond, 1.04*ceil),
				probe(3950*time.Millisecond, 1.05*ceil), probe(4000*time.Millisecond, 1.063*ceil),
				probe(4050*time.Millisecond, 1.08*ceil), probe(4100*time.Millisecond, 1.1*ceil),
				probe(4150*time.Millisecond, 1.12*ceil)),
			want: then(ceilingCuts, exactly(reasonProbe, 1.02*ceil), plateaued, plateaued,
				rose, rose, rose, rose, rose, rose, rose, rose, rose.atLeast(1.12*ceil*1.05)),
		},
		{
			// The first try's queue shows only a lag later: until then
			// the delay vouches for nothing past it, and the rate stays
			// (the queue a ceiling still the link's would build by the
			// next doubling, 4 % over it, shows as a tooth).
			name: "the first try waits a lag",
			steps: after(ceiling, probe(3600*time.Millisecond, 0.99*ceil),
				probe(3700*time.Millisecond, 1.02*ceil), probe(3800*time.Millisecond, 1.02*ceil)),
			want: then(ceilingCuts, exactly(reasonProbe, 1.02*ceil), plateaued, rose.atMost(1.041*ceil)),
		},
		{
			// 8 s after the mark the curve stands at 1.46 times the
			// ceiling, but 10 % past it with no delay the ceiling is not
			// the link's any more (its capacity came back): the rise is
			// Step's, with a whole second since the last call.
			name:  "10 % past the ceiling the rise is fast again",
			steps: after(ceiling, probe(8600*time.Millisecond, 45e6)),
			want:  then(ceilingCuts, rose.atLeast(1.5*ceil)),
		},
		{
			// 50ms after a call 5.2 s after the mark the curve (4.2 % over
			// the ceiling) is above what Step allows with a quarter of the
			// headroom (2.5 %).
			name: "never faster than Step",
			steps: after(ceiling, probe(5800*time.Millisecond, ceil),
				budgetStep{at: 5850 * time.Millisecond, rate: ceil, delta: millis(5.625 * 0.75), achieved: ceil, load: 1}),
			want: then(ceilingCuts, rose, rose.atMost(ceil*(1+2*0.25*0.05))),
		},
		{
			name:  "fast more than 10 % below the ceiling",
			steps: after(ceiling, probe(700*time.Millisecond, 30e6)),
			want:  then(ceilingCuts, rose.atMost(0.9*ceil)),
		},
		{
			name:  "but not past the zone's edge in one step",
			steps: after(ceiling, probe(700*time.Millisecond, 33e6)),
			want:  then(ceilingCuts, exactly(reasonProbe, 0.9*ceil)),
		},
		{
			name:  "and fast again after Memory",
			steps: after(ceiling, probe(10600*time.Millisecond, 45e6)),
			want:  then(ceilingCuts, rose.atLeast(1.5*ceil)),
		},
		{
			// The tick before keeps 75 % of the rate getting through: neither
			// loaded nor a capacity drop, so the rate holds.
			name: "fast again after Memory",
			steps: after(ceiling,
				budgetStep{at: 10600 * time.Millisecond, rate: 40e6, achieved: 30e6, load: 0.75},
				probe(10700*time.Millisecond, 40e6),
			),
			want: then(ceilingCuts, held, rose),
		},
		{
			// The same two cuts 600ms apart without the delay falling back
			// in between are one episode: the second measures the rate the
			// first cut to, not the link, and the ceiling stays the first's.
			name:  "fast after two cuts in one episode",
			steps: []budgetStep{ceiling[0], ceiling[2], probe(700*time.Millisecond, 36e6)},
			want:  []expect{cut, cut, rose},
		},
		{
			// Eases at 40 and at 38 Mbit/s getting through (a rate of 40:
			// 95 % got through, a measure), the delay back to nothing
			// between them, agree on a ceiling of 38.
			name: "a plateau at a ceiling two eases agreed on",
			steps: []budgetStep{
				{at: 0, rate: 40e6, delta: 13 * time.Millisecond, achieved: 40e6, load: 1},
				probe(300*time.Millisecond, 38e6),
				{at: 600 * time.Millisecond, rate: 40e6, delta: 13 * time.Millisecond, achieved: 38e6, load: 0.95},
				probe(700*time.Millisecond, 38e6),
			},
			want: []expect{eased, rose, eased, plateaued},
		},
		{
			// All of the rate got through at the second ease: the capacity
			// is unmeasured, and the ceiling is the knee, the rate of the
			// tick between with next to no delay (37 Mbit/s). 37 is the
			// ceiling, 40 the one before: within 10 %, so the rate holds
			// at it.
			name: "an unmeasured ceiling is the knee",
			steps: []budgetStep{
				{at: 0, rate: 40e6, delta: 13 * time.Millisecond, achieved: 40e6, load: 1},
				probe(300*time.Millisecond, 37e6),
				{at: 600 * time.Millisecond, rate: 40e6, delta: 13 * time.Millisecond, achieved: 40e6, load: 1},
				probe(700*time.Millisecond, 37e6),
			},
			want: []expect{eased, rose, eased, plateaued},
		},
		{
			// Eases at the lowest rate allowed measure the bound, not the
			// link: they mark no ceiling, and the rise stays fast.
			name:   "no ceiling at the lowest rate",
			bounds: policies.Bounds{Min: 40e6, Base: 40e6, Max: 1e9},
			steps: []budgetStep{
				{at: 0, rate: 40e6, delta: 13 * time.Millisecond, achieved: 40e6, load: 1},
				probe(300*time.Millisecond, 40e6),
				{at: 600 * time.Millisecond, rate: 40e6, delta: 13 * time.Millisecond, achieved: 40e6, load: 1},
				probe(700*time.Millisecond, 40e6),
			},
			want: []expect{stays(reasonEase), rose, stays(reasonEase), rose},
		},
		{
			name: "fast when the cuts disagreed, as on a cellular link",
			steps: []budgetStep{
				ceiling[0],
				ceiling[1],
				{at: 600 * time.Millisecond, rate: 25e6, delta: 14 * time.Millisecond, bloat: true, achieved: 20e6, load: 0.8},
				probe(700*time.Millisecond, 20e6),
			},
			want: []expect{cut, rose, cut, rose},
		},
		{
			name:  "fast after a single cut",
			steps: []budgetStep{ceiling[0], probe(100*time.Millisecond, 40e6)},
			want:  []expect{cut, rose},
		},
	})
}

// TestBudgetLinkCeiling checks the ceiling a download's link shows in what
// it delivers while it, not our shaper, limits the traffic (less reaches
// the shaper than its rate passes): the mark takes it, and a link that
// delivered it steadily makes that ceiling the link's at once.
func TestBudgetLinkCeiling(t *testing.T) {
	// steps: what got through rises from 30 Mbit/s, so its 200ms mean
	// lags (32.5, then 34.375); what reached the shaper, first 50 Mbit/s
	// (our shaper the limit), is then the link's, at the 44 Mbit/s rate,
	// for two ticks: offered[0] with no queue, then offered[1] with 13ms,
	// an ease (the 200ms mean of what reached the shaper, 45 Mbit/s or
	// more, is within 3 % of the rate, so not overLink's). 600ms later the
	// rate is 38 Mbit/s, with no queue.
	steps := func(offered ...float64) []budgetStep {
		return []budgetStep{
			{rate: 44e6, achieved: 30e6, offered: 50e6, load: 30.0 / 44},
			{at: 50 * time.Millisecond, rate: 44e6, delta: 2 * time.Millisecond, achieved: 40e6, offered: offered[0], load: 40.0 / 44},
			{at: 100 * time.Millisecond, rate: 44e6, delta: 13 * time.Millisecond, achieved: 40e6, offered: offered[1], load: 40.0 / 44},
			{at: 700 * time.Millisecond, rate: 38e6, achieved: 38e6, offered: 38.5e6, load: 1},
		}
	}
	runBudgetCases(t, []budgetCase{
		{
			// The mark is 0.97 * 40 = 38.8 Mbit/s (0.97 * 34.375 from what
			// got through), the link delivered 40 steadily: a ceiling of
			// its own, whose curve 600ms after the mark stands at 0.949 of
			// it, under the rate.
			// The ease goes to MaxCut of what the link delivered, 38
			// Mbit/s, not of the lagging 34.375.
			name:  "delivered steadily: the link's ceiling at once",
			steps: steps(40e6, 40e6),
			want:  []expect{held, rose, exactly(policies.ReasonEase, 0.95*40e6), plateaued},
		},
		{
			// The same, the ease's call 1µs early: two calls of a 50ms
			// tick span 100ms only to within the timer's jitter, and two
			// calls are a spread.
			name: "delivered steadily in two calls under 100ms: the link's ceiling at once",
			steps: func() []budgetStep {
				s := steps(40e6, 40e6)
				s[2].at -= time.Microsecond
				return s
			}(),
			want: []expect{held, rose, exactly(policies.ReasonEase, 0.95*40e6), plateaued},
		},
		{
			// 42 then 38 Mbit/s: a level of 41.6 (the mark 0.97 of it) with
			// a spread of 1.3, steady, but the ease goes to MaxCut of what
			// the link delivered in its own call, 38: the level may hold a
			// burst. 600ms later the curve stands at 38.3, over the rate.
			name:  "a level over the call's delivery: the ease from the call",
			steps: steps(42e6, 38e6),
			want:  []expect{held, rose, exactly(policies.ReasonEase, 0.95*38e6), rose},
		},
		{
			// 42 then 30 Mbit/s: a mean of 40.8, which the mark (0.97 of
			// it) agrees with, but a spread of 3.8 Mbit/s, as on a
			// cellular link.
			name:  "delivered unevenly: one mark is no ceiling",
			steps: steps(42e6, 30e6),
			want:  []expect{held, rose, eased, rose},
		},
		{
			// A second before, the link delivered 10 Mbit/s (as in the
			// lab's step before the restore): a level older than the
			// measure's window (500ms) says nothing of now.
			name:  "a level from over 500ms before: the link's ceiling at once",
			steps: after(link(10e6), later(time.Second, steps(40e6, 40e6))...),
			want:  []expect{falls(policies.ReasonDecay), held, rose, eased, plateaued},
		},
		{
			// A second before, the link delivered 50 then 30 Mbit/s (the
			// other way round, the 50 would start the measure afresh:
			// see below): its level is gone, but not how much it varies.
			name:  "a spread from over 500ms before: one mark is no ceiling",
			steps: after(link(50e6, 30e6), later(time.Second, steps(40e6, 40e6))...),
			want:  []expect{rose, held, held, rose, eased, rose},
		},
		{
			// 350ms before the link delivered 40 Mbit/s, it delivered 30,
			// its queue showing: a level the 40 is more than 5 % over
			// (plus the counting noise) was not the link's capacity now,
			// and the measure starts afresh from the 40. Kept, the 30
			// would make a level of 31.9 with a spread of 4.1 at the ease.
			name:  "a call over the level starts it afresh: the link's ceiling at once",
			steps: after(link(30e6), later(300*time.Millisecond, steps(40e6, 40e6))...),
			want:  []expect{held, held, rose, exactly(policies.ReasonEase, 0.95*40e6), plateaued},
		},
		{
			// Between the link's two calls at 40 Mbit/s, one in which 25
			// reached the shaper with no queue at all: the senders left a
			// gap, not the link. Taken in, it would make a level of 38.7
			// with a spread of 4.5 Mbit/s at the ease, and the mark no
			// ceiling.
			name: "a call under the rate with no queue is not the link's",
			steps: []budgetStep{
				{rate: 44e6, achieved: 30e6, offered: 50e6, load: 30.0 / 44},
				{at: 50 * time.Millisecond, rate: 44e6, delta: 2 * time.Millisecond, achieved: 40e6, offered: 40e6, load: 40.0 / 44},
				{at: 100 * time.Millisecond, rate: 44e6, achieved: 35e6, offered: 25e6, load: 35.0 / 44},
				{at: 350 * time.Millisecond, rate: 44e6, delta: 2 * time.Millisecond, achieved: 40e6, offered: 50e6, load: 40.0 / 44},
				{at: 400 * time.Millisecond, rate: 44e6, delta: 13 * time.Millisecond, achieved: 40e6, offered: 40e6, load: 40.0 / 44},
				{at: time.Second, rate: 38e6, achieved: 38e6, offered: 38.5e6, load: 1},
			},
			want: []expect{held, rose, held, rose, exactly(policies.ReasonEase, 0.95*40e6), plateaued},
		},
	})
}

// link returns ticks 50ms apart from 0 in which the download's link, not
// our shaper, limits the traffic, delivering offered, its queue showing in
// the delay (2ms).
func link(offered ...float64) []budgetStep {
	var out []budgetStep
	for i, o := range offered {
		out = append(out, budgetStep{at: time.Duration(i) * 50 * time.Millisecond, rate: 55e6, delta: 2 * time.Millisecond, achieved: o, offered: o, load: o / 55e6})
	}
	return out
}

// later returns steps with d added to each one's time.
func later(d time.Duration, steps []budgetStep) []budgetStep {
	out := append([]budgetStep(nil), steps...)
	for i := range out {
		out[i].at += d
	}
	return out
}

// TestBudgetRiseHeadroom checks that a rise shrinks as the delay nears Hold,
// down to a quarter of the rise with no delay at all.
func TestBudgetRiseHeadroom(t *testing.T) {
	cfg := policies.DefaultBudgetConfig(0)
	const rate = 40e6
	var rises []float64
	for delay := time.Duration(0); delay <= cfg.Hold; delay += cfg.Hold / 8 {
		got := runBudget(t, cfg, wideBounds, []budgetStep{{rate: rate, delta: delay, achieved: rate, load: 1}})
		if got[0].Reason != reasonProbe {
			t.Fatalf("delay %v: reason %q, want %q", delay, got[0].Reason, reasonProbe)
		}
		rises = append(rises, got[0].Rate-rate)
	}
	for i := 1; i < len(rises); i++ {
		if rises[i] > rises[i-1] {
			t.Errorf("rise %d by %g, more than the one before, by %g", i, rises[i], rises[i-1])
		}
		if rises[i] < rises[0]/4*(1-tolerance) {
			t.Errorf("rise %d by %g, under a quarter of the rise with no delay, %g", i, rises[i], rises[0])
		}
	}
	if last := rises[len(rises)-1]; last >= rises[0]/2 {
		t.Errorf("rise at Hold by %g, not much under the rise with no delay, %g", last, rises[0])
	}
}

// TestBudgetRiseScalesWithBudget checks that the rise with no delay is in
// proportion to the budget: the queue a rise builds before the delay shows
// it grows with the rise's speed.
func TestBudgetRiseScalesWithBudget(t *testing.T) {
	const rate = 40e6
	rise := func(budget time.Duration) float64 {
		got := runBudget(t, policies.BudgetConfig{Budget: budget}, wideBounds, []budgetStep{{rate: rate, achieved: rate, load: 1}})
		if got[0].Reason != reasonProbe {
			t.Fatalf("budget %v: reason %q, want %q", budget, got[0].Reason, reasonProbe)
		}
		return got[0].Rate - rate
	}
	base := rise(15 * time.Millisecond)
	for _, tt := range []struct {
		budget time.Duration
		ratio  float64
	}{
		{5 * time.Millisecond, 1.0 / 3},
		{30 * time.Millisecond, 2},
		{60 * time.Millisecond, 4},
		{90 * time.Millisecond, 5}, // Step's ceiling, 10
	} {
		if got := rise(tt.budget) / base; math.Abs(got-tt.ratio) > 1e-9 {
			t.Errorf("budget %v rises %g times as far as 15ms, want %g", tt.budget, got, tt.ratio)
		}
	}
}

// TestBudgetSerialisation checks that the observation's serialisation time,
// one packet's time on a slow link, is taken off the delay.
func TestBudgetSerialisation(t *testing.T) {
	slow := 12 * time.Millisecond
	runBudgetCases(t, []budgetCase{
		{
			name:  "15ms on a slow link is under hold: probe",
			steps: []budgetStep{{rate: 2e6, delta: 15 * time.Millisecond, achieved: 2e6, load: 1, ser: slow}},
			// 3ms of 11.25ms used: headroom 1 - 3/11.25.
			want: []expect{exactly(reasonProbe, 2e6*(1+2*(1-3/11.25)*0.05))},
		},
		{
			// The probe waited for less than a whole packet ahead of it: a
			// reading under nothing counts as nothing, not as headroom
			// over Hold's (it once rose 1 + 8/11.25 times as fast).
			name:  "4ms on a slow link is under the packet's 12ms: probe as with no delay",
			steps: []budgetStep{{rate: 2e6, delta: 4 * time.Millisecond, achieved: 2e6, load: 1, ser: slow}},
			want:  []expect{exactly(reasonProbe, 2e6*(1+2*0.05))},
		},
		{
			name:  "15ms with the bloat verdict on a slow link: probe",
			steps: []budgetStep{{rate: 2e6, delta: 15 * time.Millisecond, bloat: true, achieved: 2e6, load: 1, ser: slow}},
			want:  []expect{rose},
		},
		{
			name:  "15ms without serialisation: ease",
			steps: []budgetStep{{rate: 2e6, delta: 15 * time.Millisecond, achieved: 2e6, load: 1}},
			want:  []expect{eased},
		},
		{
			name:  "between hold and budget after serialisation: ease",
			steps: []budgetStep{{rate: 2e6, delta: 25 * time.Millisecond, achieved: 2e6, load: 1, ser: slow}},
			want:  []expect{eased},
		},
		{
			name:  "over the budget after serialisation: cut",
			steps: []budgetStep{{rate: 2.5e6, delta: 42 * time.Millisecond, achieved: 2e6, load: 0.8, ser: slow}},
			want:  []expect{cut},
		},
		{
			name:  "bloat factor from the delay less serialisation",
			steps: []budgetStep{{rate: 2.5e6, delta: millis(83.25), bloat: true, achieved: 2e6, load: 0.8, ser: slow}},
			// 71.25ms: factor 1 - 60/300 = 0.8.
			want: []expect{exactly(reasonBloat, 1.6e6)},
		},
	})
}

// TestBudgetDecay checks the drift towards base (20 Mbit/s) when unloaded:
// Decay (0.02/s) times the time since the last call, never past base.
func TestBudgetDecay(t *testing.T) {
	idle := func(at time.Duration, rate float64) budgetStep {
		return budgetStep{at: at, rate: rate}
	}
	runBudgetCases(t, []budgetCase{
		{
			name:  "down from above",
			steps: []budgetStep{idle(0, 40e6)},
			want:  []expect{exactly(reasonDecay, 40e6*(1-0.02*0.05))},
		},
		{
			name:  "up from below",
			steps: []budgetStep{idle(0, 10e6)},
			want:  []expect{rises(reasonDecay)},
		},
		{
			name:  "not past base from above",
			steps: []budgetStep{idle(0, 20.01e6)},
			want:  []expect{exactly(reasonDecay, wideBounds.Base)},
		},
		{
			name:  "not past base from below",
			steps: []budgetStep{idle(0, 19.99e6)},
			want:  []expect{exactly(reasonDecay, wideBounds.Base)},
		},
		{
			name:  "at base holds",
			steps: []budgetStep{idle(0, 20e6)},
			want:  []expect{held},
		},
		{
			name:  "light load decays too",
			steps: []budgetStep{{rate: 40e6, achieved: 16e6, load: 0.4}},
			want:  []expect{decayed},
		},
		{
			// From half of Loaded the traffic is substantial (TCP recovering
			// from a loss, say) and the rate is still about right.
			name: "substantial load holds, light load decays",
			steps: []budgetStep{
				{rate: 40e6, achieved: 24e6, load: 0.6},
				{at: 100 * time.Millisecond, rate: 40e6, achieved: 12e6, load: 0.3},
			},
			want: []expect{held, decayed},
		},
	})
}

// TestBudgetBounds checks that every rate the policy computes is clamped into
// [Min, Max] (runBudgetCases checks that for every case; here the rules
// would leave them).
func TestBudgetBounds(t *testing.T) {
	bounds := policies.Bounds{Min: 12e6, Base: 20e6, Max: 100e6}
	runBudgetCases(t, []budgetCase{
		{
			name:   "probe above max",
			bounds: bounds,
			steps:  []budgetStep{{rate: 99e6, achieved: 99e6, load: 1}},
			want:   []expect{rose.atMost(bounds.Max)},
		},
		{
			name:   "probe at max",
			bounds: bounds,
			steps:  []budgetStep{{rate: 100e6, achieved: 100e6, load: 1}},
			want:   []expect{stays(reasonProbe)},
		},
		{
			name:   "cut below min",
			bounds: bounds,
			steps:  []budgetStep{{rate: 20e6, delta: millis(161.25), bloat: true, achieved: 20e6, load: 1}},
			want:   []expect{cut.atLeast(bounds.Min)},
		},
		{
			name:   "ease below min",
			bounds: bounds,
			steps:  []budgetStep{{rate: 40e6, delta: 13 * time.Millisecond, achieved: 10e6, load: 0.25}},
			want:   []expect{eased.atLeast(bounds.Min)},
		},
		{
			name:   "ease from above max",
			bounds: bounds,
			steps:  []budgetStep{{rate: 120e6, delta: 13 * time.Millisecond, achieved: 110e6, load: 0.92}},
			want:   []expect{eased.atMost(bounds.Max)},
		},
		{
			name:   "capacity drop below min",
			bounds: bounds,
			steps: after(steadyLoad(0, 61, 40e6),
				budgetStep{at: 3050 * time.Millisecond, rate: 42e6, achieved: 10e6, load: 0.24}),
			want: then(repeat(61, rose), dropped.atLeast(bounds.Min)),
		},
	})
}

// TestBudgetNeedsBothVerdicts checks that a bloat verdict from a few delayed
// samples (one noisy reflector) cuts only when the median across reflectors is
// over Hold as well.
func TestBudgetNeedsBothVerdicts(t *testing.T) {
	runBudgetCases(t, []budgetCase{
		{
			name:  "bloat with the median under hold: probe",
			steps: []budgetStep{{rate: 40e6, delta: millis(5.625), bloat: true, achieved: 40e6, load: 1}},
			want:  []expect{rose},
		},
		{
			name:  "bloat with the median at hold: probe",
			steps: []budgetStep{{rate: 40e6, delta: millis(11.25), bloat: true, achieved: 40e6, load: 1}},
			want:  []expect{rose},
		},
		{
			name:  "bloat with no added delay, unloaded: decay",
			steps: []budgetStep{{rate: 40e6, bloat: true, achieved: 8e6, load: 0.2}},
			want:  []expect{decayed},
		},
		{
			name:  "bloat with the median just over hold: cut",
			steps: []budgetStep{{rate: 40e6, delta: 12 * time.Millisecond, bloat: true, achieved: 40e6, load: 1}},
			want:  []expect{cut},
		},
	})
}

// TestBudgetStanding checks the hold while the shaper holds a backlog of
// limitingBacklog (3000 bytes) or more: a delay over Hold acts only once it
// has stood for Standing (300ms), counted from the first tick over Hold.
func TestBudgetStanding(t *testing.T) {
	over := func(at time.Duration, backlog uint64) budgetStep {
		return budgetStep{at: at, rate: 40e6, delta: millis(71.25), bloat: true, achieved: 36e6, load: 0.9, backlog: backlog}
	}
	easing := func(at time.Duration, backlog uint64) budgetStep {
		return budgetStep{at: at, rate: 40e6, delta: 13 * time.Millisecond, achieved: 36e6, load: 0.9, backlog: backlog}
	}
	runBudgetCases(t, []budgetCase{
		{
			name: "a backlog holds a delay over the budget until Standing",
			steps: []budgetStep{
				over(0, 6000), over(100*time.Millisecond, 6000), over(millis(299.9), 6000),
				over(300*time.Millisecond, 6000),
			},
			want: []expect{held, held, held, cut},
		},
		{
			// Upstream of the bottleneck, a backlog in our shaper says
			// nothing about the bottleneck's queue.
			name:  "on upload a backlog does not hold",
			steps: upload([]budgetStep{over(0, 6000)}),
			want:  []expect{cut},
		},
		{
			name:  "no backlog cuts at once",
			steps: []budgetStep{over(0, 0)},
			want:  []expect{cut},
		},
		{
			name:  "a backlog under 3000 bytes cuts at once",
			steps: []budgetStep{over(0, 2999)},
			want:  []expect{cut},
		},
		{
			name:  "a backlog of 3000 bytes holds",
			steps: []budgetStep{over(0, 3000)},
			want:  []expect{held},
		},
		{
			name:  "a backlog holds a delay between hold and budget, then eases",
			steps: []budgetStep{easing(0, 6000), easing(200*time.Millisecond, 6000), easing(300*time.Millisecond, 6000)},
			want:  []expect{held, held, eased},
		},
		{
			name: "the standing time counts from the first tick over hold",
			steps: []budgetStep{
				easing(0, 6000), over(150*time.Millisecond, 6000), over(300*time.Millisecond, 6000),
			},
			want: []expect{held, held, cut},
		},
		{
			name: "a delay back under hold starts the standing time again",
			steps: []budgetStep{
				easing(0, 6000),
				// A backlog with the delay under hold: the ordinary rise.
				{at: 200 * time.Millisecond, rate: 40e6, achieved: 40e6, load: 1, backlog: 6000},
				easing(400*time.Millisecond, 6000),
				// 600ms after the first tick over hold, but 200ms after this one.
				easing(600*time.Millisecond, 6000),
				easing(700*time.Millisecond, 6000),
			},
			want: []expect{held, rose, held, held, eased},
		},
		{
			name:  "custom Standing",
			cfg:   policies.BudgetConfig{Standing: 100 * time.Millisecond},
			steps: []budgetStep{over(0, 6000), over(100*time.Millisecond, 6000)},
			want:  []expect{held, cut},
		},
	})
}

// TestBudgetOverShare checks that the rise slows with the share of recent time
// spent over the budget: an average over about 5 s, updated on each call by
// share += (over - share) * min(dt/5, 1), with over 1 when the delay is over
// the budget, and the step multiplied by max(0.1, 1-2*share).
//
// The over-budget ticks are one second apart, at 41.25ms (a 0.9 cut each),
// on a link whose capacity keeps falling (40, 30, 20, 12 Mbit/s), so that no
// two cuts agree and the probes at 10 Mbit/s rise by the full Step otherwise.
func TestBudgetOverShare(t *testing.T) {
	overAt := func(at time.Duration, capacity float64) budgetStep {
		return budgetStep{at: at, rate: capacity * 1.25, delta: millis(41.25), achieved: capacity, load: 0.8}
	}
	probe := func(at time.Duration) budgetStep {
		return budgetStep{at: at, rate: 10e6, achieved: 10e6, load: 1}
	}
	sec := time.Second
	over := []budgetStep{overAt(0, 40e6), overAt(sec, 30e6), overAt(2*sec, 20e6), overAt(3*sec, 12e6)}
	cuts := repeat(len(over), cut)
	runBudgetCases(t, []budgetCase{
		{
			name:  "a second over the budget slows the rise",
			steps: after(over[:2], probe(1100*time.Millisecond)),
			// share: 0.01 after the first call (50ms), 0.01 + 0.99*0.2 = 0.208
			// after the second, 0.208 * (1 - 0.02) = 0.20384 at the probe.
			want: then(cuts[:2], exactly(reasonProbe, 10e6*(1+2*(1-2*0.20384)*0.1))),
		},
		{
			name:  "three seconds over the budget: a tenth of the step",
			steps: after(over, probe(3100*time.Millisecond)),
			// share: 0.01, 0.208, 0.3664, 0.49312, then 0.4832576 at the
			// probe: 1 - 2*share is under 0.1.
			want: then(cuts, exactly(reasonProbe, 10e6*(1+2*0.1*0.1))),
		},
		{
			// The ceiling is 38.8 Mbit/s. 20ms is over the budget but within
			// the wait after the last cut (264ms from 600ms): hold. The
			// probe's slowed step would rise by 19 % in 100ms: the curve is
			// lower, under the ceiling.
			name: "near a ceiling the curve, not the slowed step",
			steps: after(ceiling,
				budgetStep{at: 700 * time.Millisecond, rate: 40e6, delta: 20 * time.Millisecond, achieved: 40e6, load: 1},
				budgetStep{at: 800 * time.Millisecond, rate: 35e6, achieved: 35e6, load: 1}),
			want: then(ceilingCuts, held, rose.atMost(ceil)),
		},
	})
	eases := []budgetStep{
		{rate: 40e6, delta: 13 * time.Millisecond, achieved: 40e6, load: 1},
		{at: sec, rate: 40e6, delta: 13 * time.Millisecond, achieved: 40e6, load: 1},
		{at: 2 * sec, rate: 40e6, delta: 13 * time.Millisecond, achieved: 40e6, load: 1},
	}
	runOrderCases(t, []orderCase{
		{
			name:   "more time over the budget slows the rise more",
			reason: reasonProbe,
			lower:  budgetRun{steps: after(over[:3], probe(2100*time.Millisecond))},
			higher: budgetRun{steps: after(over[:2], probe(2100*time.Millisecond))},
		},
		{
			// share 0.208 falls by a fifth each second.
			name:   "the share falls again under the budget",
			reason: reasonProbe,
			lower:  budgetRun{steps: after(over[:2], probe(2*sec), probe(3*sec))},
			higher: budgetRun{steps: after(over[:2], probe(2*sec), probe(3*sec), probe(4*sec))},
		},
		{
			name:   "a delay between hold and the budget does not count",
			reason: reasonProbe,
			lower:  budgetRun{steps: after(eases, probe(2100*time.Millisecond))},
			higher: budgetRun{steps: []budgetStep{probe(2000 * time.Millisecond), probe(2100 * time.Millisecond)}},
			equal:  true,
		},
	})
}

// TestBudgetSteadyHold checks that after two cuts that agreed within 10 %
// (within Memory) Hold is halved: the rate sits just under the link's own
// ceiling, so a delay between Hold/2 (5.625ms) and Hold (11.25ms) eases off
// instead of rising.
func TestBudgetSteadyHold(t *testing.T) {
	// 300ms after the ceiling's second cut: past the wait (264ms) for an ease.
	at := 900 * time.Millisecond
	tick := func(at, delta time.Duration, rate float64) budgetStep {
		return budgetStep{at: at, rate: rate, delta: delta, achieved: rate, load: 1}
	}
	runBudgetCases(t, []budgetCase{
		{
			name:  "between half hold and hold eases",
			steps: after(ceiling, tick(at, 8*time.Millisecond, 38e6)),
			want:  then(ceilingCuts, eased),
		},
		{
			name:  "at the budget eases too",
			steps: after(ceiling, tick(at, defaultBudget, 38e6)),
			want:  then(ceilingCuts, eased),
		},
		{
			name:  "under half hold rises along the curve",
			steps: after(ceiling, tick(at, millis(2.8125), 35e6)),
			want:  then(ceilingCuts, rose.atMost(ceil)),
		},
		{
			// Twice the wait after the last cut, so that a delay no longer
			// growing cuts.
			name:  "the bloat verdict between half hold and hold cuts",
			steps: after(ceiling, budgetStep{at: 1200 * time.Millisecond, rate: 38e6, delta: 8 * time.Millisecond, bloat: true, achieved: 38e6, load: 1}),
			want:  then(ceilingCuts, cut),
		},
		{
			name:  "after a single cut the same delay rises",
			steps: []budgetStep{ceiling[0], tick(300*time.Millisecond, 8*time.Millisecond, 38e6)},
			want:  []expect{cut, rose},
		},
		{
			name: "after cuts that disagreed the same delay rises",
			steps: []budgetStep{
				ceiling[0],
				{at: 528 * time.Millisecond, rate: 25e6, delta: 14 * time.Millisecond, bloat: true, achieved: 20e6, load: 0.8},
				tick(828*time.Millisecond, 8*time.Millisecond, 20e6),
			},
			want: []expect{cut, cut, rose},
		},
		{
			name:  "after Memory the same delay rises",
			steps: after(ceiling, tick(10700*time.Millisecond, 8*time.Millisecond, 38e6)),
			want:  then(ceilingCuts, rose),
		},
	})
}

// TestBudgetUploadEaseUnderCeiling checks that on upload an ease under a
// ceiling the link has shown starts the ceiling's curve again but leaves
// the ceiling where it was: there a ceiling is the knee of the policy's own
// rise, and a little queue before the rate reaches it is the link's jitter.
// Marked, each such ease set the ceiling a little lower. The ceiling is
// ceil (two cuts that agreed); at 800ms the rate, 36 Mbit/s, is over the
// curve, with no delay; at 900ms an ease (8ms of delay: over the halved
// Hold, under the budget) takes it to 95 % of 36, under the zone of ceil.
// 100ms later, with no delay, the rise goes to the zone's edge, 90 % of
// ceil; or, at 36 Mbit/s, it holds, the curve starting again at the ease.
// On download, where a ceiling is measured, the ease marks a ceiling of
// 36, and 100ms after that mark the curve stands under 95 % of it.
func TestBudgetUploadEaseUnderCeiling(t *testing.T) {
	tick := func(at, delta time.Duration, rate float64) budgetStep {
		return budgetStep{at: at, rate: rate, delta: delta, achieved: rate, load: 1}
	}
	eases := func(rate, next float64) []budgetStep {
		return after(ceiling, tick(800*time.Millisecond, 0, 36e6), tick(900*time.Millisecond, 8*time.Millisecond, rate),
			tick(time.Second, 0, next))
	}
	runBudgetCases(t, []budgetCase{
		{
			name:  "upload: the ceiling stays",
			steps: upload(eases(36e6, 0.95*36e6)),
			want:  then(ceilingCuts, plateaued, eased, exactly(reasonProbe, 0.9*ceil)),
		},
		{
			// 400ms after the second cut the curve would stand at 36.3
			// Mbit/s; 100ms after the ease, at 35.3.
			name:  "upload: the curve starts again",
			steps: upload(eases(36e6, 36e6)),
			want:  then(ceilingCuts, plateaued, eased, plateaued),
		},
		{
			name:  "download: the ease marks a ceiling",
			steps: eases(36e6, 0.95*36e6),
			want:  then(ceilingCuts, plateaued, eased, plateaued),
		},
		{
			// Over the ceiling an ease marks on upload too: the knee, 36
			// Mbit/s at 800ms, and 100ms after that mark the curve stands
			// under 95 % of 40.
			name:  "upload: over the ceiling the ease marks",
			steps: upload(eases(40e6, 0.95*40e6)),
			want:  then(ceilingCuts, plateaued, eased, plateaued),
		},
	})
}

// TestBudgetSteadyReserve checks what a steady link keeps in reserve under
// Hold: half of it at the default budget, and on upload at a larger one only
// steadyMargin (5.625ms, half of the default Hold), since the rise near a
// ceiling follows the plateau curve whatever the budget. At a 60ms budget
// (Hold 45ms) the ceiling is ceil, from two cuts at 50ms of delay; at 900ms
// the rate, 36 Mbit/s, is under it with 30ms of delay (over half of Hold,
// under Hold less the margin, 39.375ms) or 42ms (over both).
func TestBudgetSteadyReserve(t *testing.T) {
	wide := policies.BudgetConfig{Budget: 60 * time.Millisecond}
	cutAt := func(at time.Duration) budgetStep {
		return budgetStep{at: at, rate: 50e6, delta: 50 * time.Millisecond, bloat: true, achieved: 40e6, load: 0.8}
	}
	tick := func(at, delta time.Duration) budgetStep {
		return budgetStep{at: at, rate: 36e6, delta: delta, achieved: 36e6, load: 1}
	}
	wideCeiling := func(delta time.Duration) []budgetStep {
		return []budgetStep{cutAt(0), {at: 300 * time.Millisecond, rate: 38e6, achieved: 38e6, load: 1},
			cutAt(600 * time.Millisecond), tick(800*time.Millisecond, 0), tick(900*time.Millisecond, delta)}
	}
	runBudgetCases(t, []budgetCase{
		{
			name:  "upload, 60ms: 30ms is within the reserve",
			cfg:   wide,
			steps: upload(wideCeiling(30 * time.Millisecond)),
			want:  then(ceilingCuts, plateaued, plateaued),
		},
		{
			name:  "upload, 60ms: 42ms eases",
			cfg:   wide,
			steps: upload(wideCeiling(42 * time.Millisecond)),
			want:  then(ceilingCuts, plateaued, eased),
		},
		{
			name:  "download, 60ms: 30ms eases (half of Hold)",
			cfg:   wide,
			steps: wideCeiling(30 * time.Millisecond),
			want:  then(ceilingCuts, plateaued, eased),
		},
		{
			// At the default budget Hold less the margin is half of Hold.
			name:  "upload, 15ms: 6ms eases (half of Hold)",
			steps: upload(after(ceiling, tick(800*time.Millisecond, 0), tick(900*time.Millisecond, 6*time.Millisecond))),
			want:  then(ceilingCuts, plateaued, eased),
		},
	})
}

// steadyLoad returns n loaded ticks 50ms apart from from, without added
// delay, whose achieved rates cycle through achieved; each at a rate 5 %
// above what gets through (load 40/42). With no earlier history the policy
// rises at each.
func steadyLoad(from time.Duration, n int, achieved ...float64) []budgetStep {
	steps := make([]budgetStep, n)
	for i := range steps {
		a := achieved[i%len(achieved)]
		steps[i] = budgetStep{
			at:       from + time.Duration(i)*50*time.Millisecond,
			rate:     a * 1.05,
			achieved: a,
			load:     1 / 1.05,
		}
	}
	return steps
}

// TestBudgetSteadyDelivery checks that two ceilings that agree make a link
// steady only when what got through while loaded varied little; on a link
// whose delivery varies (a cellular one) it takes a third that agrees. The
// history is 3 s of loaded ticks alternating between 40 and 20 Mbit/s; each
// cut measures 30 Mbit/s getting through a rate of 40 (a ceiling of 29.1),
// each followed by a tick with the delay back to nothing.
func TestBudgetSteadyDelivery(t *testing.T) {
	cellular := steadyLoad(0, 61, 40e6, 20e6)
	cut1 := func(at time.Duration) budgetStep {
		return budgetStep{at: at, rate: 40e6, delta: 14 * time.Millisecond, bloat: true, achieved: 30e6, load: 0.75}
	}
	clear := func(at time.Duration) budgetStep {
		return budgetStep{at: at, rate: 28.5e6, achieved: 28.5e6, load: 1}
	}
	probe := func(at time.Duration) budgetStep {
		return budgetStep{at: at, rate: 27e6, achieved: 27e6, load: 1}
	}
	three := after(cellular, cut1(3250*time.Millisecond), clear(3550*time.Millisecond), cut1(3850*time.Millisecond),
		clear(4150*time.Millisecond), cut1(4450*time.Millisecond), probe(4550*time.Millisecond))
	history := repeat(len(cellular), rose)
	runBudgetCases(t, []budgetCase{
		{
			name:  "two that agree on a varying link: fast",
			steps: after(cellular, cut1(3250*time.Millisecond), clear(3550*time.Millisecond), cut1(3850*time.Millisecond), probe(3950*time.Millisecond)),
			want:  then(history, cut, rose, cut, rose),
		},
		{
			// 27 Mbit/s is in the ceiling's zone, above the curve 100ms
			// after the mark: the rate holds.
			name:  "a third that agrees: the curve",
			steps: three,
			want:  then(history, cut, rose, cut, rose, cut, plateaued),
		},
		{
			// On upload a ceiling is the knee of the policy's own rise, and
			// like rises reach like knees: a third adds no evidence.
			name:  "a third that agrees on upload: fast",
			steps: upload(three),
			want:  then(history, cut, rose, cut, rose, cut, rose),
		},
	})
}

// upload returns steps as upload observations.
func upload(steps []budgetStep) []budgetStep {
	out := make([]budgetStep, len(steps))
	for i, s := range steps {
		s.up = true
		out[i] = s
	}
	return out
}

// TestBudgetCapacityDrop checks the cut on a sudden fall of what gets through
// on a link that delivered a steady rate while loaded: to MinCut of the new
// achieved rate, before any delay shows it. The history is 3s of loaded ticks
// (61, 50ms apart) at 42 Mbit/s with 40 Mbit/s getting through.
func TestBudgetCapacityDrop(t *testing.T) {
	const n = 61
	steady := steadyLoad(0, n, 40e6)
	history := repeat(n, rose)
	// A cellular-like link: what gets through alternates between 20 and 40
	// Mbit/s, a deviation far over 10 % of the mean.
	cellular := steadyLoad(0, n, 40e6, 20e6)
	fall := budgetStep{at: 3050 * time.Millisecond, rate: 42e6, achieved: 10e6, load: 0.24}
	with := func(s budgetStep, f func(*budgetStep)) budgetStep {
		f(&s)
		return s
	}
	// A delay of 8ms (over the halved Hold) in the ceiling's zone 450ms
	// after the drop, with backlog bytes in our shaper: it eases to MaxCut
	// of what gets through.
	zoneDelay := func(backlog uint64) []budgetStep {
		return after(steady, fall,
			budgetStep{at: 3150 * time.Millisecond, rate: 10e6, achieved: 10e6, load: 1},
			budgetStep{at: 3500 * time.Millisecond, rate: 9e6, delta: 8 * time.Millisecond, achieved: 9e6, load: 1, backlog: backlog})
	}
	zoneEase := then(history, dropped, plateaued, eased)
	runBudgetCases(t, []budgetCase{
		{
			name:  "a fall on a steady link cuts to MinCut of what gets through",
			steps: after(steady, fall),
			want:  then(history, exactly(reasonDrop, 0.5*10e6)),
		},
		{
			// The tick of the fall still carried some of the old rate (24
			// Mbit/s got through): the next one, with less getting through
			// than the new rate allows, measures the capacity cleanly.
			name: "a cleaner measure right after the fall cuts again",
			steps: after(steady, with(fall, func(s *budgetStep) { s.achieved, s.load = 24e6, 24.0/42 }),
				budgetStep{at: 3100 * time.Millisecond, rate: 12e6, achieved: 10e6, load: 10.0 / 12}),
			want: then(history, dropped, exactly(reasonDrop, 0.5*10e6)),
		},
		{
			// The new rate is at the capacity (10.2 Mbit/s reach the
			// shaper): the queue the senders built cannot drain, so cut
			// again.
			name: "a cleaner measure at the new rate cuts again",
			steps: after(steady, with(fall, func(s *budgetStep) { s.achieved, s.load = 20e6, 20.0/42 }),
				budgetStep{at: 3100 * time.Millisecond, rate: 10e6, achieved: 9.8e6, offered: 10.2e6, load: 0.98}),
			want: then(history, dropped, dropped),
		},
		{
			// So does one at 80 % of it: the drain would take four times as
			// long as at half.
			name: "a cleaner measure over the new rate cuts again",
			steps: after(steady, with(fall, func(s *budgetStep) { s.achieved, s.load = 16e6, 16.0/42 }),
				budgetStep{at: 3100 * time.Millisecond, rate: 8e6, achieved: 8e6, offered: 10e6, load: 1}),
			want: then(history, dropped, dropped),
		},
		{
			// All of the new rate got through and no more reached the
			// shaper: the capacity is at least the rate, unmeasured, and
			// the rate is the ceiling; the curve holds it there.
			name: "a measure the new rate held back only lowers the ceiling",
			steps: after(steady, with(fall, func(s *budgetStep) { s.achieved, s.load = 20e6, 20.0/42 }),
				budgetStep{at: 3100 * time.Millisecond, rate: 10e6, achieved: 9.8e6, load: 0.98}),
			want: then(history, dropped, plateaued),
		},
		{
			// 10 Mbit/s through a rate of 10.66: load 0.93 counts as loaded,
			// but the rate is above the capacity and the queue cannot drain.
			name: "a cleaner measure under the new rate cuts again, loaded or not",
			steps: after(steady, with(fall, func(s *budgetStep) { s.achieved, s.load = 21.32e6, 21.32/42 }),
				budgetStep{at: 3100 * time.Millisecond, rate: 10.66e6, achieved: 9.95e6, load: 9.95 / 10.66}),
			want: then(history, dropped, dropped),
		},
		{
			// Within a second of the drop the delay is the queue it left.
			name: "the delay right after a drop holds",
			steps: after(steady, fall,
				budgetStep{at: 3300 * time.Millisecond, rate: 5e6, delta: 40 * time.Millisecond, bloat: true, achieved: 5e6, load: 1}),
			want: then(history, dropped, held),
		},
		{
			// Later, less getting through may be the senders backing off.
			// 12 Mbit/s got through: the ceiling, where the rate holds.
			name: "but only in the tick after the fall",
			steps: after(steady, with(fall, func(s *budgetStep) { s.achieved, s.load = 24e6, 24.0/42 }),
				budgetStep{at: 3100 * time.Millisecond, rate: 12e6, achieved: 12e6, load: 1},
				budgetStep{at: 3150 * time.Millisecond, rate: 12e6, achieved: 10e6, load: 10.0 / 12}),
			want: then(history, dropped, plateaued, held),
		},
		{
			// On download what reaches the shaper in the tick after a drop
			// is what the link delivers, however low the new rate: 10
			// Mbit/s, the drop's own measure, stays the ceiling, and the
			// rise from half of it is fast, up to its zone (8.5 Mbit/s).
			name: "what reaches the shaper after the fall keeps the ceiling",
			steps: after(steady, fall,
				budgetStep{at: 3100 * time.Millisecond, rate: 5e6, achieved: 5e6, offered: 10e6, load: 1}),
			want: then(history, dropped, rose.atMost(0.85*10e6)),
		},
		{
			// The clean measure in the next tick shows the link still
			// delivering 39 Mbit/s (over 70 % of the 40 it delivered): the
			// fall was one tick's count, and the drop is undone, back to
			// the rate before it. The ceiling it set goes too: the next
			// tick with no delay rises at Step's speed, not along the
			// drop's curve (which would hold it under 85 % of 10 Mbit/s).
			name: "a fall the next tick does not show is undone",
			steps: after(steady, fall,
				budgetStep{at: 3100 * time.Millisecond, rate: 5e6, achieved: 5e6, offered: 39e6, load: 1},
				budgetStep{at: 3150 * time.Millisecond, rate: 42e6, achieved: 42e6, load: 1}),
			want: then(history, dropped, exactly(policies.ReasonDropUndone, 42e6), rose.atLeast(42e6*1.05)),
		},
		{
			// Without what reached the shaper, the tick after the drop
			// measures no more than the new rate: nothing to undo.
			name: "no undo without what reached the shaper",
			steps: after(steady, fall,
				budgetStep{at: 3100 * time.Millisecond, rate: 5e6, achieved: 5e6, load: 1}),
			want: then(history, dropped, plateaued),
		},
		{
			// On upload our shaper is upstream of the bottleneck: less
			// passing it is the senders sending less, and the unloaded tick
			// drifts towards base.
			name:  "a fall on upload is no drop",
			steps: upload(after(steady, fall)),
			want:  then(history, decayed),
		},
		{
			// At the lowest rate allowed nothing can be cut, and the steady
			// history is the bound's: the unloaded tick holds at base.
			name:   "no drop at the lowest rate",
			bounds: policies.Bounds{Min: 42e6, Base: 42e6, Max: 1e9},
			steps:  after(steady, fall),
			want:   then(history, held),
		},
		{
			name:  "before the delay shows it",
			steps: after(steady, with(fall, func(s *budgetStep) { s.delta, s.bloat = millis(71.25), true })),
			want:  then(history, dropped),
		},
		{
			name:  "a fall on a link that varies is left to the delay signal",
			steps: after(cellular, fall),
			want:  then(history, decayed),
		},
		{
			name:  "a fall with a backlog in the shaper is no drop",
			steps: after(steady, with(fall, func(s *budgetStep) { s.backlog = 6000 })),
			want:  then(history, decayed),
		},
		{
			// With half of Loaded or more getting through the rate holds.
			name:  "a fall to just over 70 % of the mean is no drop",
			steps: after(steady, with(fall, func(s *budgetStep) { s.achieved, s.load = 29e6, 0.69 })),
			want:  then(history, held),
		},
		{
			name:  "a fall with 70 % of the rate still getting through is no drop",
			steps: after(steady, budgetStep{at: 3050 * time.Millisecond, rate: 38e6, achieved: 27e6, load: 0.71}),
			want:  then(history, held),
		},
		{
			name:  "no history of load: no drop",
			steps: []budgetStep{fall},
			want:  []expect{decayed},
		},
		{
			// The fall within the refractory time is not acted on; once that
			// has passed it is (one unloaded tick does not wear three seconds
			// of loaded history away).
			name: "not within the refractory time of a cut",
			steps: after(steady,
				budgetStep{at: 3050 * time.Millisecond, rate: 42e6, delta: millis(71.25), bloat: true, achieved: 40e6, load: 1 / 1.05},
				budgetStep{at: 3150 * time.Millisecond, rate: 32e6, achieved: 10e6, load: 0.3125},
				budgetStep{at: 3300 * time.Millisecond, rate: 32e6, achieved: 10e6, load: 0.3125},
			),
			want: then(history, cut, decayed, dropped),
		},
		{
			// Two seconds with next to nothing getting through (traffic that
			// ended, not a drop) wear three seconds of loaded history away.
			name: "not after a quiet spell",
			steps: func() []budgetStep {
				steps := append([]budgetStep(nil), steady...)
				for i := 1; i <= 40; i++ {
					steps = append(steps, budgetStep{at: 3000*time.Millisecond + time.Duration(i)*50*time.Millisecond, rate: 42e6, achieved: 1e6, load: 1.0 / 42})
				}
				return append(steps, budgetStep{at: 5050 * time.Millisecond, rate: 42e6, achieved: 10e6, load: 0.24})
			}(),
			want: then(history, repeat(41, decayed)...),
		},
		{
			name: "not after a loaded stretch shorter than a second",
			steps: []budgetStep{
				{at: 0, rate: 42e6, achieved: 40e6, load: 1 / 1.05},
				{at: 50 * time.Millisecond, rate: 42e6, achieved: 40e6, load: 1 / 1.05},
				{at: 100 * time.Millisecond, rate: 42e6, achieved: 10e6, load: 10.0 / 42},
			},
			want: []expect{rose, rose, decayed},
		},
		{
			name: "the new rate counts as a ceiling two cuts agreed on",
			steps: after(steady, fall,
				// At it the rate holds: the curve starts from 85 % of it.
				budgetStep{at: 3150 * time.Millisecond, rate: 10e6, achieved: 10e6, load: 1},
				// And Hold is halved: 8ms eases, once a second has passed
				// since the drop (before, it is the drop's own queue).
				budgetStep{at: 4100 * time.Millisecond, rate: 10e6, delta: 8 * time.Millisecond, achieved: 10e6, load: 1},
			),
			want: then(history, dropped, plateaued, eased),
		},
		{
			// The measured capacity (10 Mbit/s) is what the bottleneck
			// delivers while it holds a queue; the ceiling is the knee
			// under it, 97 %: 100ms after the drop the curve stands at
			// 86.45 % of 9.7 Mbit/s (8.39), under the rate, which holds
			// (with 10 as the ceiling it would rise to 8.645).
			name: "a drop's ceiling is 97 % of what it measured",
			steps: after(steady, fall,
				budgetStep{at: 3100 * time.Millisecond, rate: 5e6, achieved: 5e6, offered: 10e6, load: 1},
				budgetStep{at: 3150 * time.Millisecond, rate: 8.4e6, achieved: 8.4e6, load: 1}),
			want: then(history, dropped, rose, plateaued),
		},
		{
			// The senders sending less (streams in loss recovery at once)
			// look like a drop, but leave no queue: with no delay within a
			// second of it, its ceiling (4.85 Mbit/s, 97 % of what got
			// through) is forgotten and the rise is Step's. At the
			// ceiling's zone before that the curve holds the rate.
			name: "a drop with no queue after it is forgotten",
			steps: after(steady, fall,
				budgetStep{at: 3100 * time.Millisecond, rate: 5e6, achieved: 5e6, load: 1},
				budgetStep{at: 4100 * time.Millisecond, rate: 5e6, achieved: 5e6, load: 1}),
			want: then(history, dropped, plateaued, rose),
		},
		{
			// The same drop with its queue showing (40ms, held as the
			// drop's own) keeps the ceiling: a second after it the curve
			// stands under the rate, which holds.
			name: "a drop whose queue showed keeps its ceiling",
			steps: after(steady, fall,
				budgetStep{at: 3100 * time.Millisecond, rate: 5e6, achieved: 5e6, load: 1},
				budgetStep{at: 3300 * time.Millisecond, rate: 5e6, delta: 40 * time.Millisecond, bloat: true, achieved: 5e6, load: 1},
				budgetStep{at: 4100 * time.Millisecond, rate: 5e6, achieved: 5e6, load: 1}),
			want: then(history, dropped, plateaued, held, plateaued),
		},
		{
			// In the ceiling's zone (from 85 % of it after a drop) the
			// rate drains nothing: a delay over Hold is a queue of its own
			// and eases at once, within the second after the drop.
			name:  "in the ceiling's zone the delay after a drop eases",
			steps: zoneDelay(0),
			want:  zoneEase,
		},
		{
			// Nor does a backlog in our shaper wait for Standing: a link
			// with a ceiling of its own has no fades whose tail the delay
			// could be, and behind an ingress shaper the packets it drops
			// have crossed the bottleneck already, so its queue grows.
			name:  "on a link with a ceiling a backlog does not hold",
			steps: zoneDelay(6000),
			want:  zoneEase,
		},
	})
}
