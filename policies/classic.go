package policies

import (
	"fmt"
	"math"
	"time"
)

// A ClassicConfig holds the thresholds of the Classic policy. The zero value
// is not valid; start from DefaultClassicConfig.
type ClassicConfig struct {
	// DelayThreshold is the delta above which a sample counts as delayed.
	DelayThreshold time.Duration
	// Window is the number of most recent samples the bloat detector looks at.
	Window int
	// Detect is how many delayed samples in the window mean bloat.
	Detect int
	// CutAt is the mean delta of the window at or below which a cut is
	// mildest (factor MildCut).
	CutAt time.Duration
	// CutMax is the mean delta at or above which a cut is deepest (factor
	// DeepCut). Between CutAt and CutMax the factor is interpolated linearly.
	CutMax time.Duration
	// MildCut and DeepCut are the factors of the mildest and the deepest cut.
	MildCut, DeepCut float64
	// BloatRefractory is the shortest time between two cuts; the rate is not
	// raised within it after a cut either.
	BloatRefractory time.Duration
	// HighLoad is the load (achieved / shaper rate) above which the link
	// counts as loaded and the rate may be raised.
	HighLoad float64
	// MaxRaise is the raise factor when the mean delta is at or below
	// RaiseFullBelow.
	MaxRaise float64
	// RaiseFullBelow is the mean delta at or below which the full MaxRaise
	// applies.
	RaiseFullBelow time.Duration
	// RaiseNoneAt is the mean delta at or above which the rate is not raised;
	// between RaiseFullBelow and RaiseNoneAt the factor tapers linearly.
	RaiseNoneAt time.Duration
	// DecayDown and DecayUp are the factors that move a lightly loaded link
	// towards its base rate from above and from below.
	DecayDown, DecayUp float64
	// DecayRefractory is the shortest time between two decay steps.
	DecayRefractory time.Duration
}

// DefaultClassicConfig returns cake-autorate's documented default settings.
func DefaultClassicConfig() ClassicConfig {
	return ClassicConfig{
		DelayThreshold:  30 * time.Millisecond,
		Window:          6,
		Detect:          3,
		CutAt:           30 * time.Millisecond,
		CutMax:          60 * time.Millisecond,
		MildCut:         0.99,
		DeepCut:         0.75,
		BloatRefractory: 300 * time.Millisecond,
		HighLoad:        0.75,
		MaxRaise:        1.04,
		RaiseFullBelow:  10 * time.Millisecond,
		RaiseNoneAt:     30 * time.Millisecond,
		DecayDown:       0.99,
		DecayUp:         1.01,
		DecayRefractory: time.Second,
	}
}

// validate reports the first field of c that cannot work, by name.
func (c ClassicConfig) validate() error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("invalid classic policy config: %s %s", field, fmt.Sprintf(format, args...))
	}
	// Float checks are written as !(valid) so that NaN fails them too.
	switch {
	case c.DelayThreshold <= 0:
		return bad("DelayThreshold", "must be positive, got %v", c.DelayThreshold)
	case c.Window < 1:
		return bad("Window", "must be at least 1, got %d", c.Window)
	case c.Detect < 1 || c.Detect > c.Window:
		return bad("Detect", "must be between 1 and Window (%d), got %d", c.Window, c.Detect)
	case c.CutAt < 0:
		return bad("CutAt", "must not be negative, got %v", c.CutAt)
	case c.CutMax <= c.CutAt:
		return bad("CutMax", "must be greater than CutAt (%v), got %v", c.CutAt, c.CutMax)
	case !(c.MildCut > 0 && c.MildCut <= 1):
		return bad("MildCut", "must be in (0, 1], got %v", c.MildCut)
	case !(c.DeepCut > 0 && c.DeepCut <= c.MildCut):
		return bad("DeepCut", "must be in (0, MildCut (%v)], got %v", c.MildCut, c.DeepCut)
	case c.BloatRefractory < 0:
		return bad("BloatRefractory", "must not be negative, got %v", c.BloatRefractory)
	case !(c.HighLoad >= 0 && c.HighLoad <= 1):
		return bad("HighLoad", "must be in [0, 1], got %v", c.HighLoad)
	case !(c.MaxRaise >= 1 && c.MaxRaise <= 2):
		return bad("MaxRaise", "must be in [1, 2], got %v", c.MaxRaise)
	case c.RaiseFullBelow < 0:
		return bad("RaiseFullBelow", "must not be negative, got %v", c.RaiseFullBelow)
	case c.RaiseNoneAt <= c.RaiseFullBelow:
		return bad("RaiseNoneAt", "must be greater than RaiseFullBelow (%v), got %v", c.RaiseFullBelow, c.RaiseNoneAt)
	case !(c.DecayDown > 0 && c.DecayDown <= 1):
		return bad("DecayDown", "must be in (0, 1], got %v", c.DecayDown)
	case !(c.DecayUp >= 1 && c.DecayUp <= 2):
		return bad("DecayUp", "must be in [1, 2], got %v", c.DecayUp)
	case c.DecayRefractory < 0:
		return bad("DecayRefractory", "must not be negative, got %v", c.DecayRefractory)
	}
	return nil
}

// A Classic policy follows cake-autorate's documented default rules, so that
// autoshape can be compared side by side with it and users who migrate can
// keep its behaviour. It is written from the documented behaviour, not from
// cake-autorate's code.
//
// The rules: the last Window per-sample deltas are kept; when at least Detect
// of them exceed DelayThreshold the link is bloated and the rate is cut, at
// most once per BloatRefractory, by a factor between MildCut and DeepCut
// chosen by the window's mean delta. Otherwise, when the load is above
// HighLoad and no cut happened within BloatRefractory, the rate is raised by
// up to MaxRaise, tapering to nothing as the mean delta approaches
// RaiseNoneAt. Otherwise (low load) the rate steps towards the base rate, at
// most once per DecayRefractory, never past it.
//
// Simplifications against cake-autorate:
//   - Rules are evaluated once per controller tick over all samples that
//     arrived since the previous tick, not once per sample, so at most one
//     rate change happens per tick and a bloat state persists until newer
//     samples push the delayed ones out of the window.
//   - The cut and raise factors come from the plain mean of the window's
//     deltas; there is no separate smoothed average.
//   - Per-reflector baselines, reflector rotation, sleep and stall handling
//     live in the estimator and the controller, not here; with no sample
//     seen yet a loaded link is held rather than raised.
//   - CAKE's capacity estimate and the achieved rate play no part beyond
//     the load ratio.
type Classic struct {
	cfg ClassicConfig

	// ring holds the last cfg.Window deltas; next is where the next one goes
	// and n how many are present.
	ring []time.Duration
	next int
	n    int

	lastCut, lastDecay time.Time
	cutSeen, decaySeen bool
}

var _ Policy = (*Classic)(nil)

// NewClassic returns a Classic policy, or an error naming the first invalid
// field of cfg.
func NewClassic(cfg ClassicConfig) (*Classic, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Classic{cfg: cfg, ring: make([]time.Duration, cfg.Window)}, nil
}

// Name returns "classic".
func (*Classic) Name() string { return "classic" }

// Next records the deltas that arrived since the previous call and proposes
// a cut, a raise, a step towards base or a hold.
func (c *Classic) Next(in Input) Proposal {
	for _, d := range in.Obs.Deltas {
		c.push(d)
	}
	delayed, mean := c.window()
	cfg := c.cfg

	rate, reason := in.Rate, ReasonHold
	switch {
	case delayed >= cfg.Detect:
		if !c.cutSeen || in.Now.Sub(c.lastCut) >= cfg.BloatRefractory {
			rate *= interpolate(mean, cfg.CutAt, cfg.CutMax, cfg.MildCut, cfg.DeepCut)
			reason = ReasonBloat
			c.lastCut, c.cutSeen = in.Now, true
		}
	case in.Obs.Load > cfg.HighLoad:
		// Raising right after a cut would undo it before the queue has drained.
		if c.n == 0 || (c.cutSeen && in.Now.Sub(c.lastCut) < cfg.BloatRefractory) {
			break
		}
		if f := interpolate(mean, cfg.RaiseFullBelow, cfg.RaiseNoneAt, cfg.MaxRaise, 1); f != 1 {
			rate *= f
			reason = ReasonProbe
		}
	default:
		if c.decaySeen && in.Now.Sub(c.lastDecay) < cfg.DecayRefractory {
			break
		}
		base := in.Bounds.Base
		switch {
		case rate > base:
			rate = math.Max(rate*cfg.DecayDown, base)
		case rate < base:
			rate = math.Min(rate*cfg.DecayUp, base)
		default:
			// Already at base: nothing to step, and no reason to start the
			// refractory period.
			return Proposal{Rate: in.Bounds.Clamp(rate), Reason: ReasonHold}
		}
		reason = ReasonDecay
		c.lastDecay, c.decaySeen = in.Now, true
	}
	return Proposal{Rate: in.Bounds.Clamp(rate), Reason: reason}
}

// push adds d to the window, dropping the oldest delta when it is full.
func (c *Classic) push(d time.Duration) {
	c.ring[c.next] = d
	c.next = (c.next + 1) % len(c.ring)
	if c.n < len(c.ring) {
		c.n++
	}
}

// window returns how many deltas in the window exceed the delay threshold and
// their mean (zero when the window is empty).
func (c *Classic) window() (delayed int, mean time.Duration) {
	if c.n == 0 {
		return 0, 0
	}
	// The ring fills from index 0, so while it is not full the first n slots
	// are exactly the deltas present.
	var sum time.Duration
	for _, d := range c.ring[:c.n] {
		if d > c.cfg.DelayThreshold {
			delayed++
		}
		sum += d
	}
	return delayed, sum / time.Duration(c.n)
}

// interpolate returns y0 when x <= x0, y1 when x >= x1, and the linear
// interpolation between them otherwise. It requires x1 > x0.
func interpolate(x, x0, x1 time.Duration, y0, y1 float64) float64 {
	switch {
	case x <= x0:
		return y0
	case x >= x1:
		return y1
	}
	return y0 + (y1-y0)*float64(x-x0)/float64(x1-x0)
}
