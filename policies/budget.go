package policies

import (
	"fmt"
	"math"
	"time"
)

// BudgetConfig tunes the Budget policy. Only Budget is meant to be set by
// users; every other field is derived from it when zero (see
// DefaultBudgetConfig) and exists as an advanced override.
type BudgetConfig struct {
	// Budget is the added delay under load the user accepts, default 15ms.
	Budget time.Duration
	// Hold is the added delay above which the rate stops rising, default half
	// the budget.
	Hold time.Duration
	// Drain is the time in which a cut should empty the bottleneck's queue
	// back to Hold, default 20x the budget (300ms at 15ms). Shorter cuts
	// deeper.
	Drain time.Duration
	// MinCut and MaxCut bound the factor of one cut, defaults 0.5 and 0.95.
	MinCut, MaxCut float64
	// Refractory is the least time between two cuts, default 250ms; the wait
	// also grows with the delay still queued, which a cut needs time to drain.
	Refractory time.Duration
	// Step is the largest rise per second, as a fraction of the rate, default
	// 0.5 (+50 %/s), reached with the whole headroom below Hold. Near a rate
	// where bloat was recently seen the rise is GentleStep per second,
	// default 0.05.
	Step, GentleStep float64
	// Memory is how long a rate where bloat was seen stays remembered, default
	// 30s.
	Memory time.Duration
	// Loaded is the load ratio from which the link counts as loaded, default
	// 0.8: the rate only rises when the traffic presses against it.
	Loaded float64
	// Decay is the drift towards base per second when unloaded, default 0.02.
	Decay float64
}

// DefaultBudgetConfig returns the defaults derived from budget.
func DefaultBudgetConfig(budget time.Duration) BudgetConfig {
	return BudgetConfig{Budget: budget}.withDefaults()
}

func (c BudgetConfig) withDefaults() BudgetConfig {
	if c.Budget == 0 {
		c.Budget = 15 * time.Millisecond
	}
	if c.Hold == 0 {
		c.Hold = c.Budget / 2
	}
	if c.Drain == 0 {
		c.Drain = 20 * c.Budget
	}
	if c.MinCut == 0 {
		c.MinCut = 0.5
	}
	if c.MaxCut == 0 {
		c.MaxCut = 0.95
	}
	if c.Refractory == 0 {
		c.Refractory = 250 * time.Millisecond
	}
	if c.Step == 0 {
		c.Step = 0.5
	}
	if c.GentleStep == 0 {
		c.GentleStep = 0.05
	}
	if c.Memory == 0 {
		c.Memory = 30 * time.Second
	}
	if c.Loaded == 0 {
		c.Loaded = 0.8
	}
	if c.Decay == 0 {
		c.Decay = 0.02
	}
	return c
}

// Validate reports the first problem with c, naming the field.
func (c BudgetConfig) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Budget < 0:
		return fmt.Errorf("budget policy: budget %v is negative", c.Budget)
	case c.Hold <= 0 || c.Hold > c.Budget:
		return fmt.Errorf("budget policy: hold %v must be in (0, budget %v]", c.Hold, c.Budget)
	case c.Drain <= 0:
		return fmt.Errorf("budget policy: drain %v must be positive", c.Drain)
	case !(c.MinCut > 0 && c.MinCut <= c.MaxCut && c.MaxCut < 1):
		return fmt.Errorf("budget policy: cuts must satisfy 0 < min_cut (%g) <= max_cut (%g) < 1", c.MinCut, c.MaxCut)
	case c.Refractory < 0:
		return fmt.Errorf("budget policy: refractory %v is negative", c.Refractory)
	case !(c.Step > 0 && c.Step <= 10) || !(c.GentleStep > 0 && c.GentleStep <= c.Step):
		return fmt.Errorf("budget policy: steps must satisfy 0 < gentle_step (%g) <= step (%g) <= 10", c.GentleStep, c.Step)
	case c.Memory < 0:
		return fmt.Errorf("budget policy: memory %v is negative", c.Memory)
	case !(c.Loaded > 0 && c.Loaded <= 1):
		return fmt.Errorf("budget policy: loaded %g must be in (0, 1]", c.Loaded)
	case !(c.Decay > 0 && c.Decay < 1):
		return fmt.Errorf("budget policy: decay %g must be in (0, 1)", c.Decay)
	}
	return nil
}

// Budget is autoshape's main policy: it keeps the added delay under load
// within one number, the latency budget, at the highest rate that allows.
//
//   - Over budget (the estimator's bloat verdict): cut towards what the link
//     delivers now (the lower of the current rate and, where there is one,
//     CAKE's capacity estimate, else the achieved rate), by a factor that
//     grows with how far the delay is over the hold level, so that the
//     bottleneck's queue drains in about Drain. A further cut waits for the
//     refractory time plus the delay still queued, and is skipped while the
//     delay is falling: the last cut is still working.
//   - Between Hold and the budget: hold.
//   - Loaded and under Hold: rise, by up to Step per second scaled by the
//     headroom left below Hold, but only GentleStep per second above 90 % of
//     the capacity seen at the last bloat, for Memory after it.
//   - Unloaded: drift towards base.
type Budget struct {
	cfg       BudgetConfig
	last      time.Time // previous call
	lastCut   time.Time
	cutDelay  time.Duration // the delay that triggered the last cut
	bloatRate float64       // the capacity seen at the last bloat episode
	bloatAt   time.Time
}

var _ Policy = (*Budget)(nil)

// NewBudget returns a Budget policy.
func NewBudget(cfg BudgetConfig) (*Budget, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Budget{cfg: cfg.withDefaults()}, nil
}

// Name returns "budget".
func (b *Budget) Name() string { return "budget" }

// Next proposes the next rate.
func (b *Budget) Next(in Input) Proposal {
	dt := 0.05
	if !b.last.IsZero() {
		dt = math.Min(math.Max(in.Now.Sub(b.last).Seconds(), 0), 1)
	}
	b.last = in.Now
	c := b.cfg
	rate := in.Rate
	o := in.Obs
	delay := o.Delta

	if o.Bloat {
		return b.cut(in)
	}
	if delay > c.Hold {
		return Proposal{Rate: rate, Reason: ReasonHold}
	}
	if o.Load >= c.Loaded {
		headroom := 1 - float64(delay)/float64(c.Hold)
		step := c.Step * headroom
		if b.bloatRate > 0 && in.Now.Sub(b.bloatAt) < c.Memory && rate >= 0.9*b.bloatRate {
			step = math.Min(step, c.GentleStep)
		}
		next := rate * (1 + step*dt)
		return Proposal{Rate: in.Bounds.Clamp(next), Reason: ReasonProbe}
	}
	base := in.Bounds.Base
	switch {
	case rate > base:
		return Proposal{Rate: math.Max(rate*(1-c.Decay*dt), base), Reason: ReasonDecay}
	case rate < base:
		return Proposal{Rate: math.Min(rate*(1+c.Decay*dt), base), Reason: ReasonDecay}
	}
	return Proposal{Rate: rate, Reason: ReasonHold}
}

// cut handles a bloated observation.
func (b *Budget) cut(in Input) Proposal {
	c := b.cfg
	o := in.Obs
	delay := o.Delta
	hold := Proposal{Rate: in.Rate, Reason: ReasonHold}
	if !b.lastCut.IsZero() {
		since := in.Now.Sub(b.lastCut)
		wait := c.Refractory + b.cutDelay
		if since < wait {
			return hold
		}
		if since < 2*wait && delay < b.cutDelay*8/10 {
			return hold // draining: the last cut is working
		}
	}
	// What the link delivers now.
	capacity := in.Rate
	if o.CapacityEstimate > 0 {
		capacity = math.Min(capacity, o.CapacityEstimate)
	} else if o.Achieved > 0 {
		capacity = math.Min(capacity, o.Achieved)
	}
	over := float64(delay-c.Hold) / float64(c.Drain)
	factor := math.Min(math.Max(1-over, c.MinCut), c.MaxCut)
	if b.lastCut.IsZero() || in.Now.Sub(b.lastCut) > c.Memory/4 {
		b.bloatRate = capacity // a new episode: remember where it began
	}
	b.lastCut = in.Now
	b.cutDelay = delay
	b.bloatAt = in.Now
	return Proposal{Rate: in.Bounds.Clamp(capacity * factor), Reason: ReasonBloat}
}
