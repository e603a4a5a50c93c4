// Package controller owns the control loop of one link: every tick it reads the
// shapers' counters, asks the estimator for an Observation per direction, asks
// the direction's policy for a rate, enforces the bounds and the idle and stall
// rules, writes the rate through its Shaper and records a Decision for every
// change. Time is injected: Tick takes the current time, so the simulator
// drives exactly this code with a fake clock.
package controller

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/autoshape/autoshape/estimator"
	"github.com/autoshape/autoshape/policies"
)

// A State is the controller's mode for a link.
type State int

// The controller's states.
const (
	// Active: probes run and policies decide.
	Active State = iota
	// Idle: the link has carried almost nothing for a while; probes are
	// paused and the rates drift back to base.
	Idle
	// Stall: no probe has been answered for a while (or ever); rates are
	// never raised and after a timeout they fall back to the safe rate. It
	// holds until an answer comes: an idle spell in between pauses the
	// probes, not the stall's rules.
	Stall
)

// String returns "active", "idle" or "stall".
func (s State) String() string {
	switch s {
	case Active:
		return "active"
	case Idle:
		return "idle"
	case Stall:
		return "stall"
	}
	return fmt.Sprintf("state(%d)", int(s))
}

// A Prober is the probe side of the estimator: the controller pauses it while
// the link is idle.
type Prober interface {
	SetIdle(idle bool)
}

// DirectionConfig bounds one direction.
type DirectionConfig struct {
	Bounds policies.Bounds
	// Safe is the rate a stalled direction falls back to; 0 means Base. A
	// fallback never raises the rate.
	Safe float64
}

// DefaultTick is the control interval when Config.Tick is zero.
const DefaultTick = 50 * time.Millisecond

// IdleTick is the control interval a caller may slow to while the link is
// Idle: the rate is at (or drifting to) base and the probes are paused, so
// load that comes back waits at most this long, at base, for the probes to
// restart. The controller's timers and the idle drift count
// time, not ticks, so its decisions stay those of the fast tick.
const IdleTick = time.Second

// Config tunes a Controller. Zero durations and ratios take the defaults
// named on each field.
type Config struct {
	// Link names the link in decisions and logs.
	Link string
	// Tick is the control interval, default DefaultTick.
	Tick time.Duration
	// Directions holds the bounds per direction, indexed by
	// estimator.Direction.
	Directions [2]DirectionConfig
	// IdleLoad is the load ratio under which a direction counts as unloaded,
	// default 0.05; IdleAfter is how long both directions must stay unloaded
	// before the link goes idle, default 10s.
	IdleLoad  float64
	IdleAfter time.Duration
	// IdleStep is the fraction of the distance to base covered per Tick of
	// time while idle, default 0.05 (base is reached within a few seconds),
	// however seldom Tick is called.
	IdleStep float64
	// StallAfter is how long without any probe answer makes a stall, default
	// 1s; FallbackAfter is how long a stall lasts before the rates fall back to
	// the safe rate, default 5s.
	StallAfter    time.Duration
	FallbackAfter time.Duration
	// Recovery is how long after a stall ends rates may not rise, default 1s.
	Recovery time.Duration
	// Now, when set, is read before and after each reading of a shaper's
	// counters, and the reading is stamped with the midpoint (the kernel
	// took the counters somewhere within the call); the achieved and
	// offered rates are measured between those stamps. Nil stamps each
	// reading with the tick's time. On a busy router a reading can come
	// milliseconds after its tick, by a varying amount, and at a 50 ms
	// tick each millisecond of that is 2 % of the rate measured: inside
	// the lab's User-mode Linux kernel some ticks showed three times the
	// shaper's rate getting through (docs/peers.md, "Fifth set").
	Now func() time.Time
}

func (c Config) withDefaults() Config {
	if c.Tick == 0 {
		c.Tick = DefaultTick
	}
	if c.IdleLoad == 0 {
		c.IdleLoad = 0.05
	}
	if c.IdleAfter == 0 {
		c.IdleAfter = 10 * time.Second
	}
	if c.IdleStep == 0 {
		c.IdleStep = 0.05
	}
	if c.StallAfter == 0 {
		c.StallAfter = time.Second
	}
	if c.FallbackAfter == 0 {
		c.FallbackAfter = 5 * time.Second
	}
	if c.Recovery == 0 {
		c.Recovery = time.Second
	}
	for i := range c.Directions {
		if c.Directions[i].Safe == 0 {
			c.Directions[i].Safe = c.Directions[i].Bounds.Base
		}
	}
	return c
}

// Validate reports the first problem with c, naming the field.
func (c Config) Validate() error {
	c = c.withDefaults()
	if c.Tick < time.Millisecond {
		return fmt.Errorf("controller: tick %v is shorter than 1ms", c.Tick)
	}
	for _, d := range estimator.Directions {
		b := c.Directions[d].Bounds
		if b == (policies.Bounds{}) {
			continue // an uncontrolled direction; New checks it has no shaper
		}
		if err := ValidateBounds(b); err != nil {
			return fmt.Errorf("controller: %s: %w", d, err)
		}
		if s := c.Directions[d].Safe; !(s >= b.Min && s <= b.Max) {
			return fmt.Errorf("controller: %s: safe rate %.0f bit/s is outside [min %.0f, max %.0f]", d, s, b.Min, b.Max)
		}
	}
	if c.IdleLoad < 0 || c.IdleLoad >= 1 {
		return fmt.Errorf("controller: idle load %g must be in [0, 1)", c.IdleLoad)
	}
	if c.IdleStep <= 0 || c.IdleStep > 1 {
		return fmt.Errorf("controller: idle step %g must be in (0, 1]", c.IdleStep)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"idle_after", c.IdleAfter}, {"stall_after", c.StallAfter}, {"fallback_after", c.FallbackAfter}, {"recovery", c.Recovery}} {
		if d.v < 0 {
			return fmt.Errorf("controller: %s %v is negative", d.name, d.v)
		}
	}
	return nil
}

// ValidateBounds checks 0 < min <= base <= max <= MaxRate and that a whole
// bit/s lies in [min, max]: the controller writes whole kbit/s where one
// lies in the bounds and whole bit/s where none does, and never a rate
// outside them.
func ValidateBounds(b policies.Bounds) error {
	for _, r := range []struct {
		name string
		v    float64
	}{{"min", b.Min}, {"base", b.Base}, {"max", b.Max}} {
		if math.IsNaN(r.v) || math.IsInf(r.v, 0) {
			return fmt.Errorf("%s rate %v bit/s is not a finite number", r.name, r.v)
		}
	}
	switch {
	case b.Min <= 0:
		return fmt.Errorf("min rate %.0f bit/s must be positive", b.Min)
	case b.Min > b.Max:
		return fmt.Errorf("min rate %.0f bit/s is above max rate %.0f bit/s", b.Min, b.Max)
	case b.Max > MaxRate:
		return fmt.Errorf("max rate %.0f bit/s is above the largest rate accepted, %d bit/s", b.Max, uint64(MaxRate))
	case math.Ceil(b.Min) > math.Floor(b.Max):
		return fmt.Errorf("min rate %g bit/s and max rate %g bit/s hold no whole bit/s: no rate can be written within them", b.Min, b.Max)
	case b.Base < b.Min || b.Base > b.Max:
		return fmt.Errorf("base rate %.0f bit/s is outside [min %.0f, max %.0f]", b.Base, b.Min, b.Max)
	}
	return nil
}

// quantise returns the rate to write for r within b: r clamped into b and
// rounded to whole kbit/s (finer steps change nothing a shaper can hold and
// would flood the decision log), or to whole bit/s when no whole kbit/s
// lies in b. The result is always within b, whose Validate passed.
func quantise(b policies.Bounds, r float64) float64 {
	r = b.Clamp(r)
	unit := 1000.0
	if math.Ceil(b.Min/unit)*unit > b.Max {
		unit = 1
	}
	lo, hi := math.Ceil(b.Min/unit)*unit, math.Floor(b.Max/unit)*unit
	return min(max(math.Round(r/unit)*unit, lo), hi)
}

// A Controller runs the control loop of one link. It is not safe for
// concurrent use: its caller serialises AddSample and Tick.
type Controller struct {
	cfg      Config
	est      *estimator.Estimator
	shapers  [2]Shaper
	policies [2]policies.Policy
	prober   Prober

	rates    [2]float64 // what was last written, bit/s
	intended [2]float64 // what the policy last asked for: its next input
	written  [2]bool    // whether a rate was ever written
	// yielded: the rate is CAKE's autorate-ingress's (see Yielder), and
	// rates holds the rate the shaper reported at the last tick.
	yielded   [2]bool
	state     State
	quietFrom time.Time // start of the current unloaded stretch (zero: loaded)
	noRaise   time.Time // no increases before this instant
	// probeFrom is when probing (re)started: the first tick, or the end of
	// an idle spell. Answers to probes sent before it do not count.
	probeFrom time.Time
	// lastAnswer is the send time of the newest answered probe, as of the
	// last tick.
	lastAnswer time.Time
	// stallFrom is when the current stall began, zero when answers came
	// after it: an idle spell does not end a stall, answers do.
	stallFrom time.Time
	lastObs   [2]estimator.Observation
	// counted is the counters' reading the estimator last took, per
	// direction (see shaperStalled).
	counted [2]counted
	// lastTick is the time of the previous Tick; idleSteps is how many
	// Ticks' worth of idle drift the current one covers.
	lastTick  time.Time
	idleSteps int
}

// New builds a Controller. A nil shaper leaves that direction uncontrolled
// (its policy may then be nil too). prober may be nil.
func New(cfg Config, est *estimator.Estimator, shapers [2]Shaper, pols [2]policies.Policy, prober Prober) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if est == nil {
		return nil, errors.New("controller: no estimator")
	}
	cfg = cfg.withDefaults()
	c := &Controller{cfg: cfg, est: est, shapers: shapers, policies: pols, prober: prober}
	for _, d := range estimator.Directions {
		if shapers[d] != nil && pols[d] == nil {
			return nil, fmt.Errorf("controller: %s has a shaper but no policy", d)
		}
		if shapers[d] != nil && cfg.Directions[d].Bounds == (policies.Bounds{}) {
			return nil, fmt.Errorf("controller: %s has a shaper but no bounds", d)
		}
		c.rates[d] = cfg.Directions[d].Bounds.Base
		c.intended[d] = c.rates[d]
		if shapers[d] != nil {
			// Counters cannot move much faster than the shaper's highest
			// rate: a bigger fall is a reset, not a wrap.
			est.SetMaxRate(d, cfg.Directions[d].Bounds.Max)
		}
	}
	return c, nil
}

// Restore sets the rates to start from (clamped into the bounds), as saved by
// an earlier run; the first tick writes them. Call it before the first Tick.
func (c *Controller) Restore(rates [2]float64) {
	for _, d := range estimator.Directions {
		if rates[d] > 0 && c.shapers[d] != nil {
			c.rates[d] = quantise(c.cfg.Directions[d].Bounds, rates[d])
			c.intended[d] = c.rates[d]
		}
	}
}

// Reattach swaps the shapers (after the interface came back, or the qdisc
// was made again) and makes the next tick write its rate, whatever the new
// shapers hold.
func (c *Controller) Reattach(shapers [2]Shaper) {
	for _, d := range estimator.Directions {
		if (shapers[d] == nil) != (c.shapers[d] == nil) {
			continue // a direction cannot appear or vanish
		}
		c.shapers[d] = shapers[d]
		c.written[d] = false
	}
}

// AddSample hands one probe answer to the estimator.
func (c *Controller) AddSample(s estimator.Sample) { c.est.AddSample(s) }

// Rate returns the rate last written for d, in bit/s (Base before the first
// tick).
func (c *Controller) Rate(d estimator.Direction) float64 { return c.rates[d] }

// State returns the controller's current state.
func (c *Controller) State() State { return c.state }

// Observation returns the observation of d made at the last tick.
func (c *Controller) Observation(d estimator.Direction) estimator.Observation { return c.lastObs[d] }

// Tick runs one control step at now and returns the decisions it carried out
// (one per rate change). Errors from the shapers are returned after every
// direction was tried; the rate a failed write meant to set is not recorded,
// so the next tick tries again.
func (c *Controller) Tick(ctx context.Context, now time.Time) ([]Decision, error) {
	var errs []error
	for _, d := range estimator.Directions {
		if c.shapers[d] == nil {
			continue
		}
		st, read, err := c.readStats(ctx, d, now)
		if err != nil {
			errs = append(errs, fmt.Errorf("failed to read %s shaper stats: %w", d, err))
			continue
		}
		if !c.shaperStalled(d, st, read) {
			// What the rate counts: with the line's framing when the
			// shaper knows it (ATM cells cost a small packet three
			// times its size).
			wire := st.WireBytes
			if wire == 0 {
				wire = st.Bytes
			}
			c.est.AddCounter(d, read, wire)
			// What reached the shaper: what it sent, dropped (at its
			// mean packet size) and holds.
			offered := st.Bytes + st.Backlog
			if st.Packets > 0 {
				offered += st.Drops * (st.Bytes / st.Packets)
			}
			c.est.AddOffered(d, read, st.Bytes, offered)
			c.counted[d] = counted{bytes: st.Bytes, backlog: st.Backlog, at: read}
		}
		// CAKE's estimate means something only while autorate-ingress
		// feeds it; otherwise it is a rate from the past.
		estimate := 0.0
		if st.AutorateIngress {
			estimate = float64(st.CapacityEstimate)
		}
		c.est.SetCapacityEstimate(d, estimate)
		c.est.SetBacklog(d, st.Backlog)
		if c.yielded[d] {
			// CAKE sets its own rate: the load is against that rate.
			// Autorate-ingress found off was turned off by someone else
			// (or the qdisc was made again): the rate is no longer
			// CAKE's, and the next tick writes one.
			c.yielded[d] = st.AutorateIngress
			if !st.AutorateIngress {
				c.written[d] = false
			} else if st.Rate > 0 {
				c.rates[d], c.intended[d] = float64(st.Rate), float64(st.Rate)
			}
		}
	}
	obs := c.est.Observe(now, c.rates)
	c.lastObs = obs
	c.updateState(now, obs)
	c.idleSteps = 1
	if !c.lastTick.IsZero() {
		// A slower caller gets the drift the ticks it skipped would have
		// made; bounded, as a clock jump is not a long idle spell and base
		// is reached in far fewer.
		c.idleSteps = min(max(int((now.Sub(c.lastTick)+c.cfg.Tick/2)/c.cfg.Tick), 1), 1000)
	}
	c.lastTick = now

	var decisions []Decision
	for _, d := range estimator.Directions {
		if c.shapers[d] == nil {
			continue
		}
		to, reason := c.next(now, d, obs[d])
		dec, changed, err := c.apply(ctx, now, d, to, reason, obs[d])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if changed {
			decisions = append(decisions, dec)
		}
	}
	return decisions, errors.Join(errs...)
}

// A counted is the reading of a direction's shaper counters that the
// estimator last took.
type counted struct {
	bytes, backlog uint64
	at             time.Time // zero before the first
}

// stalledPackets is how many full-size packets the shaper's rate must have
// allowed over an interval before nothing sent in it, with a backlog held
// at its start, says the shaper did not run.
const stalledPackets = 2

// shaperStalled reports whether reading st of d's shaper counters, taken
// at read, shows a shaper that did not run since the last reading taken: it held a
// backlog then, sent nothing since, and its rate would have sent
// stalledPackets full-size packets meanwhile. The kernel did not run the
// shaper (the guest kernel of the real-CAKE lab stalled so in about 2 % of
// its 50 ms ticks, with up to 126 kB held), or its counters were not
// updated: either way it is no measure of the link, whose delivery the
// rates stand for. Its counters are not taken, so the next reading
// measures over both intervals and the rates keep their last values. A
// shaper that held nothing and sent nothing may be a link that delivered
// nothing (a cellular fade): that is measured.
func (c *Controller) shaperStalled(d estimator.Direction, st ShaperStats, read time.Time) bool {
	last := c.counted[d]
	return !last.at.IsZero() && last.backlog > 0 && st.Bytes == last.bytes &&
		c.rates[d]*read.Sub(last.at).Seconds() >= stalledPackets*estimator.DefaultMTU*8
}

// readStats reads d's shaper counters and returns them with the time they
// were taken: the midpoint of the call by Config.Now (the kernel took them
// somewhere within it), or now without one.
func (c *Controller) readStats(ctx context.Context, d estimator.Direction, now time.Time) (ShaperStats, time.Time, error) {
	if c.cfg.Now == nil {
		st, err := c.shapers[d].Stats(ctx)
		return st, now, err
	}
	start := c.cfg.Now()
	st, err := c.shapers[d].Stats(ctx)
	return st, start.Add(c.cfg.Now().Sub(start) / 2), err
}

// updateState moves between active, idle and stall.
func (c *Controller) updateState(now time.Time, obs [2]estimator.Observation) {
	loaded := false
	for _, d := range estimator.Directions {
		if c.shapers[d] != nil && obs[d].Load >= c.cfg.IdleLoad {
			loaded = true
		}
	}
	if loaded {
		c.quietFrom = time.Time{}
	} else if c.quietFrom.IsZero() {
		c.quietFrom = now
	}
	if c.probeFrom.IsZero() {
		c.probeFrom = now // the first tick: probing starts with the controller
	}
	last := obs[estimator.Down].LastSample
	if up := obs[estimator.Up].LastSample; up.After(last) {
		last = up
	}
	c.lastAnswer = last

	switch c.state {
	case Active:
		switch {
		case !c.quietFrom.IsZero() && now.Sub(c.quietFrom) >= c.cfg.IdleAfter:
			c.enter(Idle, now)
		case c.stalled(now):
			c.enter(Stall, now)
		}
	case Idle:
		if loaded {
			c.enter(Active, now)
		}
	case Stall:
		// A stall holds until an answer comes back; the time since it
		// began is what the fallback counts, answers or none ever.
		if !c.stalled(now) {
			c.noRaise = now.Add(c.cfg.Recovery)
			c.stallFrom = time.Time{}
			c.enter(Active, now)
		} else if !c.quietFrom.IsZero() && now.Sub(c.quietFrom) >= c.cfg.IdleAfter {
			c.enter(Idle, now)
		}
	}
	if c.state == Stall && c.stallFrom.IsZero() {
		c.stallFrom = now
	}
	if c.state == Active && !c.stallFrom.IsZero() && c.lastAnswer.After(c.stallFrom) {
		c.stallFrom = time.Time{} // answered after an idle spell that paused the stall
	}
}

// stalled reports whether no probe sent within StallAfter of now has been
// answered, counting from when probing (re)started when no answer is newer:
// a link that has never been answered stalls StallAfter after the start,
// and stays stalled until an answer comes.
func (c *Controller) stalled(now time.Time) bool {
	from := c.lastAnswer
	if from.Before(c.probeFrom) {
		from = c.probeFrom
	}
	return now.Sub(from) > c.cfg.StallAfter
}

// answered reports whether a probe sent since probing (re)started has been
// answered: without one, nothing is known about the delay, and no rate may
// rise.
func (c *Controller) answered() bool {
	return !c.lastAnswer.IsZero() && !c.lastAnswer.Before(c.probeFrom)
}

func (c *Controller) enter(s State, now time.Time) {
	if s == c.state {
		return
	}
	if c.prober != nil && (s == Idle || c.state == Idle) {
		c.prober.SetIdle(s == Idle)
	}
	if c.state == Idle {
		c.probeFrom = now // probing resumes: give it StallAfter to answer
	}
	c.state = s
}

// next decides the rate for d in the current state.
func (c *Controller) next(now time.Time, d estimator.Direction, obs estimator.Observation) (float64, policies.Reason) {
	cur := c.intended[d]
	dc := c.cfg.Directions[d]
	// held is where a direction that may not rise stays: the rate written,
	// not a small rise still waiting to add up (see apply).
	held := cur
	if c.written[d] {
		held = math.Min(cur, c.rates[d])
	}
	if !c.stallFrom.IsZero() && c.state != Active {
		// Stalled, or idle since a stall: no answer has come to say the
		// link carries more. Never raise; fall back to the safe rate
		// FallbackAfter into the stall; lower where a Blind policy asks,
		// once the probes have been answered (a link never answered has
		// a reflector list or a path that does not answer, not a queue
		// past the deadline: the safe rate is the user's answer to it).
		to, reason := held, policies.ReasonStall
		if now.Sub(c.stallFrom) >= c.cfg.FallbackAfter && dc.Safe < held {
			to, reason = dc.Safe, policies.ReasonFallback
		}
		if b, ok := c.policies[d].(policies.Blind); ok && c.state == Stall && !c.lastAnswer.IsZero() {
			p := b.Blind(policies.Input{Now: now, Obs: obs, Rate: held, Bounds: dc.Bounds}, c.stallFrom)
			if p.Rate < to {
				to, reason = p.Rate, p.Reason
			}
		}
		return to, reason
	}
	switch c.state {
	case Idle:
		base := dc.Bounds.Base
		for range c.idleSteps {
			// Snap to base when close, or when the step would round away
			// to nothing (whole kbit/s are written).
			if d := math.Abs(base - cur); d < 0.01*base || d*c.cfg.IdleStep < 1000 {
				return base, policies.ReasonIdle
			}
			cur += (base - cur) * c.cfg.IdleStep
		}
		return cur, policies.ReasonIdle
	}
	p := c.policies[d].Next(policies.Input{Now: now, Obs: obs, Rate: cur, Bounds: dc.Bounds})
	if p.Rate > held && (now.Before(c.noRaise) || !c.answered()) {
		return held, policies.ReasonStall
	}
	return p.Rate, p.Reason
}

// apply clamps, rounds and writes a rate, returning the decision and whether
// the rate changed.
func (c *Controller) apply(ctx context.Context, now time.Time, d estimator.Direction, to float64, reason policies.Reason, obs estimator.Observation) (Decision, bool, error) {
	b := c.cfg.Directions[d].Bounds
	clamped := b.Clamp(to)
	if math.IsNaN(to) {
		clamped = c.rates[d]
	}
	rate := quantise(b, clamped)
	if reason == policies.ReasonYield && c.written[d] {
		return c.yield(ctx, now, d, rate, obs)
	}
	c.intended[d] = rate
	if c.written[d] && rate == c.rates[d] {
		return Decision{}, false, nil
	}
	// Small rises and drifts wait until they add up to half a per cent (or
	// reach base): a shaper gains nothing from them, and the decision log
	// would get one line every tick. Cuts are written at once.
	if c.written[d] && gradual(reason) && rate != quantise(b, b.Base) && math.Abs(rate-c.rates[d]) < 0.005*c.rates[d] {
		return Decision{}, false, nil
	}
	if !c.written[d] {
		reason = policies.ReasonStart
	}
	change, err := c.shapers[d].SetRate(ctx, uint64(rate))
	if err != nil {
		return Decision{}, false, fmt.Errorf("failed to set %s rate to %.0f bit/s: %w", d, rate, err)
	}
	dec := Decision{
		Time: now, Link: c.cfg.Link, Direction: d,
		From: c.rates[d], To: rate, Reason: reason, State: c.state,
		Clamped: clamped != to, Obs: obs, Change: change,
		Reflectors: c.est.ReflectorDeltas(d, now),
	}
	c.rates[d] = rate
	c.written[d] = true
	c.yielded[d] = false
	return dec, true, nil
}

// yield hands d's rate to CAKE's autorate-ingress, starting from rate, where
// the shaper can (see Yielder) and has not already; elsewhere the rate
// stays as it is.
func (c *Controller) yield(ctx context.Context, now time.Time, d estimator.Direction, rate float64, obs estimator.Observation) (Decision, bool, error) {
	y, ok := c.shapers[d].(Yielder)
	if c.yielded[d] || !ok {
		return Decision{}, false, nil
	}
	change, err := y.Yield(ctx, uint64(rate))
	if err != nil {
		return Decision{}, false, fmt.Errorf("failed to hand %s rate to autorate-ingress: %w", d, err)
	}
	dec := Decision{
		Time: now, Link: c.cfg.Link, Direction: d,
		From: c.rates[d], To: rate, Reason: policies.ReasonYield, State: c.state,
		Obs: obs, Change: change, Reflectors: c.est.ReflectorDeltas(d, now),
	}
	c.rates[d], c.intended[d] = rate, rate
	c.yielded[d] = true
	return dec, true, nil
}

// Gradual reports whether the decision is one of the small steps a loaded
// or idle link takes all the time (a rise within the budget, a drift
// towards base), rather than an event (a cut, a drop, a stall, a start).
func (d Decision) Gradual() bool { return gradual(d.Reason) }

// gradual reports whether a reason moves the rate in small steps.
func gradual(r policies.Reason) bool {
	switch r {
	case policies.ReasonProbe, policies.ReasonDecay, policies.ReasonIdle, policies.ReasonHold:
		return true
	}
	return false
}
