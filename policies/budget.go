package policies

import (
	"fmt"
	"math"
	"time"

	"github.com/autoshape/autoshape/estimator"
)

// BudgetConfig tunes the Budget policy. Only Budget is meant to be set by
// users; every other field is derived from it when zero (see
// DefaultBudgetConfig) and exists as an advanced override.
type BudgetConfig struct {
	// Budget is the added delay under load the user accepts, default 15ms.
	Budget time.Duration
	// Hold is the added delay above which the rate stops rising and starts
	// to ease off, default three quarters of the budget.
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
	// Step is the largest rise per second, as a fraction of the rate, by
	// default in proportion to the budget (see stepPerBudget): 2 (+200 %/s)
	// at 15ms, at most 10. It is reached with the whole headroom below Hold and a quarter
	// of it at Hold, and slowed as the share of recent time over the budget
	// grows (to a tenth at half the time). Near a ceiling the link has shown
	// the rise follows a curve of its own (see Budget).
	Step float64
	// Memory is how long a rate where bloat was seen stays remembered, default
	// 10s.
	Memory time.Duration
	// Standing is how long the delay must stay over Hold before the policy
	// acts while the shaper holds a backlog (it, not the bottleneck, limits
	// the traffic now), default 20x the budget (300ms at 15ms). Without a
	// backlog the policy acts at once.
	Standing time.Duration
	// Loaded is the load ratio from which the link counts as loaded, default
	// 0.9: the rate only rises when the traffic presses against it (above the
	// capacity, less gets through than the rate allows).
	Loaded float64
	// Decay is the drift towards base per second when unloaded, default 0.02.
	Decay float64
}

// stepPerBudget is the default Step per second of budget: 2 (+200 %/s) at
// the default 15ms. A rise at s per second past the capacity goes on for the
// lag until the delay shows the queue it builds (a round trip, half a round
// of the probes and a tick, slowStartLag), and the queue it leaves grows with
// s, as about s·lag²/2 of delay: so the rise a budget absorbs grows in
// proportion to the budget. A fixed step made the budget buy little: a larger
// budget only let the same rise run on a little longer, and a 5ms budget
// overshot it as far as a 15ms one (docs/frontier.md).
const stepPerBudget = 2 / 0.015

// steadyMargin is the delay an upload keeps in reserve under Hold on a
// steady link (see start): half of the default Hold. Near a ceiling the rate
// moves along the plateau curve, whose pace is set by time (about 3 s to
// the ceiling) and which goes at most 10 % past it, not by Step. So the
// queue a rise there can build before the delay shows it, which the reserve
// is for, depends on the curve and on the signal's lag, not on the budget;
// halving Hold reserved more the larger the budget, and a large budget
// bought little (docs/frontier.md, "A steady upload's reserve").
const steadyMargin = estimator.DefaultBudget * 3 / 4 / 2 // the default Hold (see withDefaults), halved

// DefaultBudgetConfig returns the defaults derived from budget.
func DefaultBudgetConfig(budget time.Duration) BudgetConfig {
	return BudgetConfig{Budget: budget}.withDefaults()
}

func (c BudgetConfig) withDefaults() BudgetConfig {
	if c.Budget == 0 {
		c.Budget = estimator.DefaultBudget
	}
	if c.Hold == 0 {
		c.Hold = c.Budget * 3 / 4
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
		c.Step = math.Min(stepPerBudget*c.Budget.Seconds(), 10)
	}
	if c.Memory == 0 {
		c.Memory = 10 * time.Second
	}
	if c.Standing == 0 {
		c.Standing = 20 * c.Budget
	}
	if c.Loaded == 0 {
		c.Loaded = 0.9
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
	case !(c.Step > 0 && c.Step <= 10):
		return fmt.Errorf("budget policy: step %g must be in (0, 10]", c.Step)
	case c.Memory < 0 || c.Standing < 0:
		return fmt.Errorf("budget policy: memory %v or standing %v is negative", c.Memory, c.Standing)
	case !(c.Loaded > 0 && c.Loaded <= 1):
		return fmt.Errorf("budget policy: loaded %g must be in (0, 1]", c.Loaded)
	case !(c.Decay > 0 && c.Decay < 1):
		return fmt.Errorf("budget policy: decay %g must be in (0, 1)", c.Decay)
	}
	return nil
}

// Budget is autoshape's main policy: it keeps the added delay under load
// within one number, the latency budget, at the highest rate that allows.
// Each call applies the first rule that matches, with the delay taken as the
// observation's Delta less its Serialisation (at low rates one packet's time
// is the floor of the delay):
//
//   - Capacity drop (download only, see capacityDrop and sinceDrop): on a link
//     that has been delivering a steady rate, a sudden fall of what gets
//     through, with no backlog in our shaper, is a capacity drop seen a round
//     trip before any delay: cut to MinCut of the new capacity, and again in
//     the next tick if that measures it lower; a drop that tick does not
//     show (what reaches the shaper is still over dropShare of the old rate)
//     was one tick's count, and is undone. A drop whose queue the delay
//     does not show within afterDrop was the senders sending less, and its
//     ceiling is forgotten.
//   - Standing (download only, see standing): while our shaper holds a backlog
//     (it, not the bottleneck upstream, limits the traffic now) a delay over
//     Hold may be the lagging tail of a fade already over; hold until it has
//     stood for Standing. On upload our shaper is upstream of the bottleneck
//     and its backlog says nothing about the bottleneck's queue; nor on a link
//     with a ceiling of its own (see below), which has no fades.
//   - Over the link (download only, see overLink): a delay over Hold while
//     less reaches our shaper than its rate passes says the rate is over the
//     link's capacity and the queue is the link's: unless the link has a
//     ceiling of its own (see below), go to what reaches the shaper at once,
//     without the wait that spaces cuts.
//   - Over budget (see cut; the estimator's bloat verdict with the median over
//     Hold, or the median over the budget): cut towards what the link delivers
//     now (the achieved rate smoothed over 200 ms, or CAKE's capacity estimate
//     when there is no achieved rate), by a factor that grows with how far the
//     delay is over Hold, so that the bottleneck's queue drains in about Drain;
//     never by more than half. A further cut waits for the refractory time plus
//     the delay that caused the last one, and until twice that only follows a
//     delay that is still growing. When all of the rate got through (always so
//     on upload, where our shaper is upstream of the bottleneck) the capacity
//     is unmeasured and lies below the rate: the cut goes twice as deep.
//   - Between Hold and the budget (see ease): ease off to MaxCut of what gets
//     through, spaced like cuts: holding a rate above the capacity would let
//     the queue grow into the budget.
//   - Loaded and under Hold (see rise): rise, by up to Step per second scaled
//     by the headroom left below Hold and slowed by the share of recent time
//     spent over the budget. Near a ceiling the link has shown (two episodes of
//     delay whose cuts or eases agreed within 10 %, within Memory, on a link
//     that delivered a steady rate, or three that agreed on download, or a
//     capacity drop, or on download one that agreed with what the link
//     delivered steadily while it limited the traffic: see linkSteady),
//     with Hold lowered to half since the rate sits just under
//     it (on upload, at budgets over the default, by steadyMargin): fast only
//     up to 90 % of it, then along CUBIC's window curve (see
//     plateau): concave up to the ceiling, a plateau there, convex past it, up
//     to 10 % over it; a rate past that with no delay says the ceiling is no
//     longer the link's, and it rises as on any link. Past the plateau, while
//     the delay shows next to no queue, the rise past the ceiling is a slow
//     start instead (see slowStart), paced by that evidence, not the curve's
//     clock: a ceiling that is gone gives way within half a second. On
//     download the slow start may begin before the plateau, once the small
//     queue a live ceiling keeps upstream has gone from the delay (see
//     queueAtCeiling). Every rise is vouched for by a delay sample that came
//     since the previous call (see start): a call that brought none holds.
//   - Unloaded (see unloaded): drift towards base, unless the traffic is
//     substantial (half of Loaded or more): then hold.
//
// Each cut or ease marks a ceiling (see mark): what got through when that
// measures the link, else the knee, the rate when the delay last showed next
// to no queue; an ease on upload under a ceiling the link has shown only
// starts the ceiling's curve again (see ease).
type Budget struct {
	cfg  BudgetConfig
	last time.Time // previous call
	// ceilings is what a capacity drop changes (see capacityDrop).
	ceilings
	// justDropped: the previous call was a capacity drop; beforeDrop is
	// what it changed, as it stood before, and the rate then.
	justDropped bool
	beforeDrop  ceilings
	rateBefore  float64
	achieved    float64 // achieved rate smoothed over about 200ms
	offered     float64 // and the offered rate (0 while not measured)
	// knee is the rate of the last loaded call with next to no queue.
	knee      float64
	kneeAt    time.Time
	overSince time.Time // the delay has been over Hold since
	overShare float64   // share of the last ~5 s over the budget
	// What got through while loaded, over about 2 s (its time worn down by
	// unloaded time).
	loaded spread
	// clearSince: the delay has shown next to none of the ceiling's queue
	// since.
	clearSince time.Time
	// freshAt is the last call that brought a delay sample, and sampleGap
	// the usual time between such calls in seconds (see start).
	freshAt   time.Time
	sampleGap float64
	// What the download's link delivered while it, not our shaper, limited
	// the traffic (see linkLimits), over about 500 ms, and the last such
	// call.
	link   spread
	linkAt time.Time
	// triedAt is the slow start's first try (see slowStart).
	triedAt time.Time
	// What the shaper passed in the controller's current stall (see
	// Blind).
	blind blindSpell
}

// spread is a measure's mean and variance, smoothed over a window, and the
// time in seconds and the number of measures behind them.
type spread struct {
	mean, variance, time float64
	n                    int
}

// add takes in x, measured over dt seconds, smoothed over window seconds;
// the first measure (no time behind the spread) starts it.
func (s *spread) add(x, dt, window float64) {
	if s.time == 0 {
		s.mean, s.variance = x, 0
	}
	w := math.Min(dt/window, 1)
	d := x - s.mean
	s.mean += d * w
	s.variance += (d*d - s.variance) * w
	s.time += dt
	s.n++
}

// dev is the spread's standard deviation.
func (s spread) dev() float64 { return math.Sqrt(s.variance) }

// ceilings is the Budget's memory of the link's ceilings: its cuts, marks
// and capacity drops.
type ceilings struct {
	lastCut   time.Time
	cutDelay  time.Duration // the delay that triggered the last cut
	bloatRate float64       // the capacity seen at the last cut
	prevBloat float64       // and at the one before
	prevPrev  float64       // and before that
	bloatAt   time.Time
	dropAt    time.Time // the last capacity drop
	dropRate  float64   // and the rate it cut to
	// dropQueued: the delay has shown the queue the last drop left.
	dropQueued bool
	// What the download's link showed while the rate pressed against the
	// ceiling, forgotten with the ceiling.
	shown shownAtCeiling
}

// shownAtCeiling is what the download's link showed while the rate pressed
// against the ceiling.
type shownAtCeiling struct {
	// The queue the link upstream showed (see queueAtCeiling): the delay's
	// mean over about a second, and the loaded time at the ceiling behind
	// it in seconds.
	queue, queueTime float64
	// The spell since clearSince: the delay it showed at the ceiling,
	// summed over its seconds, and those seconds.
	spell, spellTime float64
	// The most that reached the shaper in a call, the loaded time at the
	// ceiling behind it in seconds, and the last call in which the link
	// delivered more than that allows (see peakAtCeiling).
	peak, peakTime float64
	grewAt         time.Time
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

// Next proposes the next rate: the first of the rules in Budget's doc that
// applies.
func (b *Budget) Next(in Input) Proposal {
	t := b.start(in)
	if p, ok := b.capacityDrop(in, t.dt); ok {
		return p
	}
	if p, ok := b.sinceDrop(in, t); ok {
		return p
	}
	b.trackOver(in.Now, t)
	if p, ok := b.standing(in, t); ok {
		return p
	}
	if p, ok := b.overLink(in, t); ok {
		return p
	}
	switch {
	case t.over:
		return b.cut(in, t.delay)
	case t.delay > t.hold:
		return b.ease(in, t)
	case b.pressed(in.Obs) && !t.fresh:
		return Proposal{Rate: in.Rate, Reason: ReasonHold}
	case b.pressed(in.Obs):
		return b.rise(in, t)
	}
	return b.unloaded(in, t.dt)
}

// A tick is what the rules of one call share.
type tick struct {
	dt     float64       // seconds since the previous call, within [0, 1]
	delay  time.Duration // the added delay less one packet's serialisation, never under 0
	hold   time.Duration // Hold, lowered on a steady link (see start)
	steady bool          // the link shows a ceiling of its own (see steady)
	over   bool          // the delay is over budget: cut
	fresh  bool          // a delay sample came since the previous call
	rise   float64       // the seconds of rise it vouches for (see start)
}

// start updates what every call tracks (time, achieved rate, knee) and returns what the rules share.
func (b *Budget) start(in Input) tick {
	c, o := b.cfg, in.Obs
	t := tick{dt: 0.05}
	if !b.last.IsZero() {
		t.dt = math.Min(math.Max(in.Now.Sub(b.last).Seconds(), 0), 1)
	}
	b.last = in.Now
	// One 50 ms sample of the achieved rate can fall in a fade (nothing
	// delivered for 100 ms is common on cellular links); what a cut aims at is
	// the capacity of the last few hundred milliseconds.
	b.achieved = follow(b.achieved, o.Achieved, t.dt)
	if o.Offered > 0 {
		b.offered = follow(b.offered, o.Offered, t.dt)
	} else {
		b.offered = 0 // unmeasured
	}
	// The packet's time is the floor of the delay: a probe waits for at
	// most one packet ahead of it at an empty queue, often less, so a
	// reading under it says there is no queue, as one at it does. Counted
	// under nothing it set the rise's headroom over one: at 0.3 Mbit/s a
	// packet takes 40 ms, readings fell to -26 ms (a headroom of 3.3), and
	// a slow upload rose back into the next tooth twice as fast as the
	// budget sets (docs/frontier.md, "A reading under nothing").
	t.delay = max(o.Delta-o.Serialisation, 0)
	// A rise is vouched for by a delay sample that came since the previous
	// call: a call with none (the answers late: a busy router, or a queue
	// the last rises built, which the delay cannot show until they come)
	// holds the rate, and a call with one rises for the time since the
	// last such call, at most twice the usual time between them (or the
	// call's own dt). So at any probe rate the rise keeps its speed while
	// samples come as usual, and time without them is time without a rise.
	t.rise = t.dt
	if t.fresh = len(o.Deltas) > 0; t.fresh {
		if !b.freshAt.IsZero() {
			since := math.Min(math.Max(in.Now.Sub(b.freshAt).Seconds(), 0), 1)
			if b.sampleGap == 0 {
				b.sampleGap = since
			}
			t.rise = math.Min(since, math.Max(t.dt, 2*b.sampleGap))
			b.sampleGap += (since - b.sampleGap) / 8
		}
		b.freshAt = in.Now
	}
	if linkLimits(in) && t.delay > 0 {
		switch gap := in.Now.Sub(b.linkAt); {
		case gap > linkForget:
			b.link = spread{}
		case gap > linkWindow:
			b.link.mean = o.Offered
		case o.Offered > linkGrowth*b.link.mean+countingNoise:
			b.link = spread{}
		}
		b.link.add(o.Offered, t.dt, linkWindow.Seconds())
		b.linkAt = in.Now
	}
	t.steady = b.steady(in.Now, o.Direction)
	t.hold = c.Hold
	if t.steady {
		// A link with a ceiling of its own: the rate sits just under it, where
		// any rise shows as delay soon, so stop earlier: at half of Hold, or,
		// on upload, at Hold less steadyMargin where that is higher (budgets
		// over the default). On download the halved Hold stays: there the
		// rate sits at a measured ceiling, and the same reserve lowered the
		// Poisson download's curve (docs/frontier.md).
		t.hold = c.Hold / 2
		if o.Direction == estimator.Up {
			t.hold = max(t.hold, c.Hold-steadyMargin)
		}
	}
	// A cut needs both verdicts: enough delayed samples in the window (fast)
	// and the median across reflectors over the hold level (robust), or a
	// median over the budget on its own.
	t.over = (o.Bloat && t.delay > t.hold) || t.delay > c.Budget
	// The share of recent time over the budget (about 5 s): on a link whose
	// capacity keeps falling away, rising as fast as on a steady one only
	// refills the queue, so the rise slows as that share grows.
	overNow := 0.0
	if t.delay > c.Budget {
		overNow = 1
	}
	b.overShare += (overNow - b.overShare) * math.Min(t.dt/5, 1)
	if t.delay <= t.hold/2 && (o.Load >= c.Loaded || o.Backlog >= limitingBacklog) {
		b.knee, b.kneeAt = in.Rate, in.Now
	}
	b.queueAtCeiling(in, t)
	return t
}

// linkLimits reports whether the download's link, not our shaper, limits
// the traffic in this call: less reached the shaper than its rate passes
// (by more than offeredMargin). What reached it is then what the link
// delivered: its capacity, in this tick.
func linkLimits(in Input) bool {
	o := in.Obs
	return o.Direction == estimator.Down && o.Offered > 0 && o.Offered < (1-offeredMargin)*in.Rate
}

// The measure of what the link delivers (Budget.link) takes a call in which
// the link limits the traffic only when the delay shows a queue. While the
// link upstream limits it, the senders' excess waits in the link's queue,
// which the delay shows. A call in which less than the rate reached the
// shaper, with no queue anywhere, is the senders not filling the rate:
// their windows lagging a rise, or a gap between bursts. It says nothing of
// the link. In the simulator's step at a 20 ms round trip (seed 5), one
// such call during the ramp past a gone ceiling (21.1 Mbit/s at a rate of
// 22.9, the delay under nothing) was still the level when the link then
// delivered 40: a level of 32.7 with a spread of 9.7 at the ease, so the
// new ceiling was not the link's, and the rate rose back through it at
// full speed into a second tooth of 14.1 ms.
//
// And a call within linkWindow of the last that delivered more than
// linkGrowth times the level, plus countingNoise, starts the measure
// afresh: a link delivers no more than its capacity, so either the level
// was not its capacity (a call of the senders' ramp in which a queue
// showed) or the capacity grew.
const linkGrowth = 1.05

// linkWindow is the window over which what the download's link delivered is
// measured (see linkLimits); after a call where the link limits the traffic
// that comes over linkWindow after the last one, the measure's level starts
// afresh from it but keeps its spread. A level older than its window says
// nothing of the link now: in the host lab's step the last call of the low
// phase at 10 Mbit/s, 1.5 s before the first at the restored 40, weighed in
// that call as if it were a tick old (a level of 11.5 Mbit/s and a spread
// of 10), so the link never showed steady through the teeth that followed.
// How much the link varies is its own (a line, or a cellular radio) and
// keeps: a level and a spread from two calls alone made a cellular download
// steady by chance: on the frontier two of three seed groups of the
// generated set had one run more over 1.0 (lte-drive's download 0.86 →
// 1.12 in seeds 9-12; docs/frontier.md, "A level from the low phase").
// After linkForget without such a call the whole measure starts afresh.
const (
	linkWindow = 500 * time.Millisecond
	linkForget = 2 * time.Second
)

// follow returns mean, smoothed over about 200 ms, after a tick of dt
// seconds that measured x; the first measure (mean 0) starts it.
func follow(mean, x, dt float64) float64 {
	if mean == 0 {
		return x
	}
	return mean + (x-mean)*math.Min(dt/0.2, 1)
}

// queueAtCeiling keeps what the delay shows while the download's rate
// presses against a ceiling, and since when it has shown next to none of it.
//
// On download our shaper is downstream of the bottleneck. At a rate a few
// per cent under a ceiling that is still the link's, the senders, whose
// windows grow until our shaper drops, send a little over the link's
// capacity, and the link upstream holds part of their window: the delay at
// the ceiling shows a small standing queue (in the host lab on step, a
// median of 2.7-3.9 ms at the 10 Mbit/s ceiling). Once the link's capacity
// has grown past the ceiling, it holds none, and the whole window waits in
// our shaper: at the same rate the delay falls to nothing (0.0 ms in every
// 100 ms after the restore to 40 Mbit/s). So a delay that stays under
// clearShare of the queue the ceiling showed, for clearFor, while the
// traffic presses against the rate, is the link showing that the ceiling is
// gone (see cleared). On upload our shaper is upstream of the bottleneck
// and the senders' excess waits in it, not in the link, whatever the
// capacity: no such sign.
//
// The queue's mean is not learnt from a spell that shows none of it until
// the spell ends: learnt as it came, the absence the sign looks for wore
// the mean down under its floor before clearFor (in the host lab, from
// 1.1ms to under 0.7ms in the first 0.2 s at the ceiling after the
// restore, and the slow start waited for the plateau's clock instead,
// 2.1 s after the restore).
// A spell that ends is noise at a ceiling still there, and is learnt then.
// A reading under nothing (one packet's serialisation taken off a delay
// that showed no queue: -1.3ms at 9 Mbit/s) counts as nothing (see start).
func (b *Budget) queueAtCeiling(in Input, t tick) {
	o := in.Obs
	if o.Direction != estimator.Down || !b.pressed(o) || b.bloatRate <= 0 {
		b.endSpell()
		return
	}
	b.peakAtCeiling(in, t)
	s := &b.shown
	delay := float64(t.delay)
	// A queue of under an eighth of Hold is too small to tell from none.
	clear := s.queueTime >= 1 && s.queue >= float64(t.hold)/8 && delay <= clearShare*s.queue
	if !clear {
		b.endSpell()
	} else if b.clearSince.IsZero() {
		b.clearSince = in.Now
	}
	if in.Rate >= ceilingBand*b.bloatRate && in.Rate <= (2-ceilingBand)*b.bloatRate && t.delay <= t.hold {
		if clear {
			s.spell += delay * t.dt
			s.spellTime += t.dt
		} else {
			s.learn(delay, t.dt)
		}
	}
}

// endSpell ends a spell in which the delay showed none of the ceiling's
// queue, and folds what it showed into the queue's mean.
func (b *Budget) endSpell() {
	b.clearSince = time.Time{}
	if s := &b.shown; s.spellTime > 0 {
		s.learn(s.spell/s.spellTime, s.spellTime)
		s.spell, s.spellTime = 0, 0
	}
}

// learn takes a delay measured over dt seconds at the ceiling into the
// queue's mean, over about a second.
func (s *shownAtCeiling) learn(delay, dt float64) {
	if s.queueTime == 0 {
		s.queue = delay
	}
	s.queue += (delay - s.queue) * math.Min(dt, 1)
	s.queueTime += dt
}

// peakAtCeiling keeps the most that reached the download's shaper in a
// call while its rate pressed against the ceiling (from the zone's edge to
// 10 % over it, as the plateau curve goes), and notes a call in which the
// link delivered more than that allows.
//
// What reaches our download shaper in a call is what the link upstream
// delivered in it, never more than its capacity over that time. So the most
// that reached it in a call, over a second or more at the ceiling, is the
// link's capacity with what a call's counting adds to it (bursts, timing);
// a call in which peakGrowth times that reached it is the link delivering
// more than it could at the ceiling: its capacity grew, and the ceiling is
// gone (see cleared). At a short round trip the senders' windows are many
// times the path's bandwidth-delay product and keep the link saturated
// whatever our rate (in the simulator at 2 ms, 10 Mbit/s reached a shaper
// set to 7.3); once the capacity returns, the queue they keep there drains
// at the new capacity (13-16 Mbit/s in the first calls) while the delay,
// already next to nothing at our rate, has nothing more to show. At longer
// round trips our shaper clocks the senders and what reaches it stays near
// its rate: no sign, and the other evidence (see queueAtCeiling) decides.
func (b *Budget) peakAtCeiling(in Input, t tick) {
	o := in.Obs
	if in.Rate < b.zone(in.Now)*b.bloatRate || in.Rate > 1.1*b.bloatRate || o.Offered <= 0 {
		return
	}
	if b.shown.peakTime >= 1 && o.Offered > peakGrowth*b.shown.peak {
		b.shown.grewAt = in.Now
		return
	}
	b.shown.peak = math.Max(b.shown.peak, o.Offered)
	b.shown.peakTime += t.dt
}

// cleared reports whether the ceiling is gone: the link delivered more
// than it could at the ceiling within the last clearFor (see
// peakAtCeiling), or the download's rate is at the ceiling (ceilingBand of
// it or more) and the delay has shown next to none of the queue the ceiling
// showed for clearFor, the traffic pressing against the rate (see
// queueAtCeiling).
//
// The clearFor may begin while the rate is still under the band, climbing
// the plateau curve after a mark, where a live ceiling keeps less of a queue
// upstream and its absence says less. At a live ceiling that makes the first
// tick at the band a probe past it, about 1.3 s after the mark (the curve's
// climb from the zone's edge to 98 %), not 3 s: a probe cadence, and the
// recovery's. Counting only time at the band was measured on `step` in the
// simulator (seeds 1-6, 2026-12-04): the share of the low phase over the
// budget fell from 3.5 to 0.7 % at a 20 ms round trip (p95 10.1 → 8.7 ms),
// but the recovery went from 2.75 to 4.85 s at 40 ms and from 2.05 to
// 2.25 s at 20 ms. Counting it, or its last lag, only at the rates at
// which the ceiling showed its queue (2026-12-05) cut the host lab's teeth
// at the restored 40 Mbit/s ceiling but cost real CAKE's recovery 0.8 s
// (docs/frontier.md, "The ceiling's queue where it shows").
func (b *Budget) cleared(in Input) bool {
	if !b.shown.grewAt.IsZero() && in.Now.Sub(b.shown.grewAt) < clearFor {
		return true
	}
	return in.Rate >= ceilingBand*b.bloatRate && !b.clearSince.IsZero() && in.Now.Sub(b.clearSince) >= clearFor
}

// peakGrowth is how much more than the most it delivered at the ceiling the
// link must deliver in a call to show that its capacity grew: a quarter,
// over the counting noise of a call (at a steady 10 Mbit/s on real CAKE,
// what reached the shaper moved by 12 % from call to call, standard
// deviation, and its most in a call over 15 s was 12 % over its median,
// though one call of a probe past the ceiling reached 24 % over the
// capacity: each such call raises the most) and well under what the
// simulator's restore to 40 Mbit/s showed (a third to three fifths more).
const peakGrowth = 1.25

// ceilingBand is how close to a ceiling, as a fraction of it, the rate
// presses against it: from 98 % of it to 2 % over. clearShare is the share
// of the queue the ceiling showed under which the delay shows none of it;
// clearFor is how long it must show none: a few times the lag in which a
// queue shows in the delay (slowStartLag).
const (
	ceilingBand = 0.98
	clearShare  = 0.25
	clearFor    = 500 * time.Millisecond
)

// sinceDrop holds while the queue a capacity drop left drains, and forgets a drop that left none.
func (b *Budget) sinceDrop(in Input, t tick) (Proposal, bool) {
	if b.dropAt.IsZero() {
		return Proposal{}, false
	}
	since := in.Now.Sub(b.dropAt)
	// A capacity drop leaves the queue the senders built before the
	// cut, which the delay shows within a round trip or two. A drop
	// that shows none within afterDrop was the senders sending less
	// (several streams in loss recovery at once, a transfer ending),
	// not the link: its ceiling, which would hold the rate at what
	// they sent, is forgotten.
	switch {
	case since < afterDrop:
		b.dropQueued = b.dropQueued || t.delay > t.hold/2
	case !b.dropQueued:
		b.dropAt = time.Time{}
		b.bloatRate, b.prevBloat, b.prevPrev = 0, 0, 0
	}
	// Within afterDrop the delay shows the queue the senders built
	// before the drop was cut, which the cut drains: neither a cut nor
	// a new ceiling. Only while the rate is where the drop set it or
	// under the ceiling's zone, though: in the zone it drains nothing,
	// and a delay over Hold is a queue of its own.
	if since < afterDrop && (t.over || t.delay > t.hold) &&
		(in.Rate <= b.dropRate || in.Rate < b.zone(in.Now)*b.bloatRate) {
		return Proposal{Rate: in.Rate, Reason: ReasonHold}, true
	}
	return Proposal{}, false
}

// trackOver keeps when the delay last rose over Hold, zero while it is under.
func (b *Budget) trackOver(now time.Time, t tick) {
	if !t.over && t.delay <= t.hold {
		b.overSince = time.Time{}
	} else if b.overSince.IsZero() {
		b.overSince = now
	}
}

// standing holds a delay over Hold while our download shaper has a backlog, until it stands for Standing.
func (b *Budget) standing(in Input, t tick) (Proposal, bool) {
	// The delay signal lags the queue by a round trip and the probe
	// interval. While our own shaper holds a backlog it is what limits the
	// traffic now, so the bottleneck's queue is not growing: the delay seen
	// may be the tail of a fade that is already over. Act only once it has
	// stood for Standing.
	// That holds on download only, where our shaper is downstream of the
	// bottleneck; on upload a backlog in our shaper says nothing about the
	// bottleneck's queue, which grows whenever the rate exceeds the capacity.
	o := in.Obs
	if o.Direction == estimator.Down && !t.steady && o.Backlog >= limitingBacklog && in.Now.Sub(b.overSince) < b.cfg.Standing {
		return Proposal{Rate: in.Rate, Reason: ReasonHold}, true
	}
	return Proposal{}, false
}

// overLink brings the download's rate down to what the link delivers when
// the delay shows a queue over Hold while less reaches the shaper than its
// rate passes.
//
// On download our shaper is downstream of the link. While its rate is over
// the link's capacity it holds no queue and limits nothing: the link
// upstream delivers its capacity, which is what reaches the shaper
// (Observation.Offered), and the senders' excess waits in the link's queue,
// where it shows in the delay. There no rate of ours between the capacity
// and the current one changes anything, and a queue the link holds is one
// the senders keep filling until it overflows, whatever the budget: the
// rate must come down to the capacity before our shaper controls the queue
// again. It goes to what reaches the shaper (over about 200 ms) at once,
// without the wait that spaces cuts (no cut of ours is what drains this
// queue) and without marking a ceiling (a capacity that the delay did not
// show the knee of); the ordinary rules then drain the queue from there.
// Less than offeredMargin under the rate is counting noise. Measured on
// the simulator's Poisson link, a steady 10 Mbit/s whose opportunities come
// at random: the rate rose to its bound over the capacity in the troughs of
// the delay, and stood there while the link's queue grew to 60-80 ms, where
// classic's utilisation could be reached at no budget up to 90 ms
// (docs/frontier.md).
//
// On a link with a ceiling of its own (steady) the rule stands aside: there
// a rate over the capacity is a probe just past a knee the link has shown,
// and the ordinary ease marks it and drains the probe's queue (MaxCut of
// what gets through). Going only to the capacity left that queue standing
// for the wait that spaces cuts: in the host lab's step, two of six runs
// then took over 1 s to bring the delay back under the budget after the
// drop.
func (b *Budget) overLink(in Input, t tick) (Proposal, bool) {
	if in.Obs.Direction != estimator.Down || b.offered <= 0 || t.delay <= t.hold || t.steady ||
		b.offered >= (1-offeredMargin)*in.Rate {
		return Proposal{}, false
	}
	return Proposal{Rate: in.Bounds.Clamp(b.offered), Reason: ReasonEase}, true
}

// offeredMargin is how far under the rate, as a fraction of it, what reaches
// the shaper must be to say that the link, not the shaper, limits it.
const offeredMargin = 0.03

// ease handles a delay between Hold and the budget: MaxCut of what gets through, spaced like cuts.
func (b *Budget) ease(in Input, t tick) Proposal {
	c, o, rate, delay := b.cfg, in.Obs, in.Rate, t.delay
	if !b.lastCut.IsZero() && in.Now.Sub(b.lastCut) < c.Refractory+b.cutDelay {
		return Proposal{Rate: rate, Reason: ReasonHold}
	}
	// Approaching the budget: a standing queue keeps growing while the
	// rate holds above the capacity, so ease off to what gets through: on
	// download, what the link delivers when it limits the traffic (see
	// capacity), as the mark measures it. The smoothed measure of what got
	// through lags the senders' ramp after a slow start past a gone
	// ceiling: in the host lab's step, eases to 34.4-35.5 Mbit/s of 40, from
	// which the plateau's curve took up to 3.3 s to bring what got through
	// back to 90 % (docs/frontier.md, "The ease after the ramp"). Never
	// more than the link delivered in this call, though: the measure's
	// level may hold a burst from the first calls of the queue (41.6 Mbit/s
	// in a host-lab run at 40, where an ease to MaxCut of it, 99 % of the
	// capacity, left the queue to grow to the budget).
	// Less getting through than the rate allows means the capacity has
	// just fallen (or the traffic thinned): then the last tick's achieved
	// rate is the better guide, however low, down to MinCut of the rate.
	ref := b.capacity(in, o.Offered)
	floor := rate * c.MinCut
	if o.Load < c.Loaded && o.Achieved >= 0.2*rate {
		ref = math.Min(ref, o.Achieved)
		floor = 0
	}
	b.lastCut = in.Now
	b.cutDelay = delay
	// On upload a ceiling is the knee of the policy's own rise, or what
	// the senders offered (see mark), not what the link delivered. An
	// ease under a ceiling the link has shown (steady) saw a little queue
	// before the rate reached that knee, which on a link whose delay has
	// jitter of its own is the jitter: it starts the ceiling's curve
	// again, from the zone's edge, but leaves the ceiling where it was.
	// Marked, it set each ceiling a little under the last, since the curve
	// nears the ceiling from below: on the simulator's Poisson upload
	// (3 Mbit/s delivered at random) the ceiling went from 2.25 to
	// 2.02 Mbit/s in 8 s, the rate held under it, until a slow start past
	// it ran on to the bound (docs/frontier.md). A capacity that really
	// fell keeps the delay rising to the budget, and the cut there marks
	// it. On download a ceiling is measured (what got through while the
	// link held a queue), and every ease marks.
	if t.steady && o.Direction == estimator.Up && rate < b.bloatRate {
		b.bloatAt = in.Now
	} else {
		b.mark(in)
	}
	next := math.Max(ref*c.MaxCut, floor)
	return Proposal{Rate: in.Bounds.Clamp(math.Min(next, rate)), Reason: ReasonEase}
}

// pressed reports whether the traffic presses against the rate.
func (b *Budget) pressed(o estimator.Observation) bool {
	// Either nearly all the rate gets through, or our shaper holds a
	// backlog while at least half gets through: with a short drop-tail
	// queue (HTB's bfifo where the kernel lacks fq_codel) TCP may not fill
	// the rate it is shaped to, yet it needs more.
	c := b.cfg
	return o.Load >= c.Loaded || (o.Backlog >= limitingBacklog && o.Load >= c.Loaded/2)
}

// rise handles a loaded link under Hold: up by Step, or along the plateau curve near a ceiling.
func (b *Budget) rise(in Input, t tick) Proposal {
	rate := in.Rate
	headroom := math.Max(1-float64(t.delay)/float64(t.hold), 0.25)
	step := b.cfg.Step * math.Max(0.1, 1-2*b.overShare)
	target := b.bloatRate * b.plateau(in.Now)
	zone := b.zone(in.Now)
	if t.steady && rate >= (zone-0.01)*b.bloatRate && rate <= 1.1*b.bloatRate {
		// In the ceiling's zone, up to 10 % over it: as CUBIC probes
		// around its last window, concave up to the ceiling, a
		// plateau at it, then convex past it, so that the rate
		// crosses the knee slowly (the queue it builds there stays
		// small by the time the delay shows it). A rate 10 % over
		// the ceiling with no delay (or one a bound set there) says
		// the ceiling is no longer the link's: its capacity came
		// back, and the rate rises as on any link to find it.
		next := rate + math.Min(math.Max(target-rate, 0), rate*step*headroom*t.rise)
		if (in.Now.Sub(b.bloatAt) >= plateauAt || b.cleared(in)) && t.delay <= t.hold/2 {
			// Past the plateau, load pressing against the rate with
			// next to no queue is evidence that the ceiling is gone:
			// the rise past it follows that evidence (see slowStart),
			// not the curve's clock. On download the evidence may come
			// sooner: the queue a live ceiling keeps upstream gone
			// (see queueAtCeiling).
			next = math.Max(next, math.Min(b.slowStart(rate, t.rise, in.Now), rate*(1+step*headroom*t.rise)))
		}
		return Proposal{Rate: in.Bounds.Clamp(next), Reason: ReasonProbe}
	}
	next := rate * (1 + step*headroom*t.rise)
	if edge := zone * b.bloatRate; t.steady && rate < edge {
		// Fast up to the ceiling's zone, not past its edge in one step.
		next = math.Min(next, edge)
	}
	return Proposal{Rate: in.Bounds.Clamp(next), Reason: ReasonProbe}
}

// unloaded handles traffic that does not press against the rate: hold, or drift towards base.
func (b *Budget) unloaded(in Input, dt float64) Proposal {
	c, rate := b.cfg, in.Rate
	// Substantial traffic is TCP recovering from a loss or the like, and the
	// rate is still about right.
	if in.Obs.Load >= c.Loaded/2 {
		return Proposal{Rate: rate, Reason: ReasonHold}
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

// capacityDrop acts on a sudden fall of what gets through on a steady
// download link: while loaded, the link delivered a rate that varied by less
// than 10 % over the last seconds; now less than dropShare (70 %) of that
// gets through, less than dropShare of the rate, and our shaper holds no
// backlog, so the link delivers less than it did. The delay signal shows
// that only a round trip plus the queue later, since the probe replies wait
// in that very queue; the counters show it within a tick. The senders keep
// sending at the old rate for about a round trip, so the cut aims at MinCut
// of the new capacity to drain what piles up meanwhile, and the ordinary
// rules take over from there. On links
// whose delivered rate varies more (cellular ones) such falls come and go
// within a tick or two and are left to the delay signal. The history of
// loaded ticks is mostly ticks our shaper limited, whose counts vary little,
// so a link whose own delivery is noisy tick by tick can pass as steady: a
// drop that the next tick's clean measure does not show is undone.
func (b *Budget) capacityDrop(in Input, dt float64) (Proposal, bool) {
	o := in.Obs
	c := b.cfg
	// What got through while loaded, averaged over about 2 s, and how much it
	// varied: a steady link varies by a few per cent, a cellular one by half.
	// The history must hold at least a second of loaded time.
	mean, dev, stretch := b.loaded.mean, b.loaded.dev(), b.loaded.time
	// The tick that saw the drop may still have carried some of the old
	// rate, and so may the cut based on it. In the next one the bottleneck
	// still drains the senders' queue, so what reaches our shaper is the new
	// capacity, measured cleanly, however low the new rate (what gets
	// through it is no more than that rate): if it is lower than the drop's
	// own measure, it is the ceiling. Unless the rate held it back (all of
	// the rate got through, and no more reached the shaper), it also tells
	// whether the new rate drains the senders' queue: at 3/4 of the
	// capacity and above the drain is slow (at the capacity there is none),
	// so cut again, to MinCut of it. (Later, less getting through may as
	// well be the senders backing off after their losses.)
	refine := b.justDropped
	b.justDropped = false
	capacity := math.Max(o.Achieved, o.Offered)
	if refine && capacity >= dropShare*mean {
		// The clean measure does not show the fall: the link still
		// delivers what it did, and the drop was a dip in one tick's
		// count. On a link whose delivery is a Poisson process (the
		// packets of a cellular scheduler, the generated Poisson link), a
		// 50 ms count at 10 Mbit/s is about 42 packets and varies by
		// 15 %, so a tick under dropShare of the mean comes every few
		// seconds of load; taken as a drop, each set a ceiling a third
		// under the link and held the rate under it for seconds. Undo it.
		b.ceilings = b.beforeDrop
		b.achieved = capacity
		return Proposal{Rate: in.Bounds.Clamp(b.rateBefore), Reason: ReasonDropUndone}, true
	}
	if refine && capacity*measuredKnee < b.bloatRate && capacity >= 0.1*b.bloatRate {
		b.measured(capacity, in.Now)
		clean := capacity < 0.97*in.Rate || o.Offered > in.Rate
		if next := capacity * c.MinCut; clean && in.Rate > 1.5*next {
			b.dropRate = in.Bounds.Clamp(next)
			return Proposal{Rate: b.dropRate, Reason: ReasonDrop}, true
		}
	}
	if b.trackDelivery(o, dt) {
		return Proposal{}, false
	}
	if o.Direction != estimator.Down {
		// On upload our shaper is upstream of the bottleneck: what passes it
		// is what the senders offer, up to the rate, whatever the link
		// delivers, so less of it is the senders sending less (a stream in
		// loss recovery, an ending transfer). A capacity drop there shows
		// only in the delay. (A lab ADSL upload cut on such a fall to under
		// what the download's ACKs need, and its own queue of ACKs then
		// held the probes: read as bloat, it cut down to the minimum.)
		return Proposal{}, false
	}
	// Nearly nothing getting through is more likely traffic that ended than
	// a link that lost nine tenths of its capacity: the idle rules handle it.
	// At the lowest rate allowed nothing can be cut, and the steady history
	// is the bound's, not the link's: a dip there (the senders backing off)
	// would only set a ceiling under the bound and hold the rate at it.
	if stretch < 1 || dev >= 0.1*mean || in.Rate <= in.Bounds.Min ||
		o.Load >= dropShare || o.Achieved >= dropShare*mean || o.Achieved < 0.1*mean {
		return Proposal{}, false
	}
	if !b.lastCut.IsZero() && in.Now.Sub(b.lastCut) < c.Refractory {
		return Proposal{}, false
	}
	b.beforeDrop, b.rateBefore = b.ceilings, in.Rate
	b.measured(o.Achieved, in.Now)
	b.lastCut = in.Now
	b.cutDelay = 0
	b.dropAt = in.Now
	b.dropQueued = false
	b.justDropped = true
	b.dropRate = in.Bounds.Clamp(o.Achieved * c.MinCut)
	return Proposal{Rate: b.dropRate, Reason: ReasonDrop}, true
}

// dropShare is the share of what a steady download link delivered under
// which a tick's delivery counts as a capacity drop (see capacityDrop).
const dropShare = 0.7

// measured records a capacity measured directly, not inferred from a delay,
// as what gets through, with the knee under it (measuredKnee, as mark does)
// as the ceiling: the rise is gentle near it as if three episodes had agreed
// on it.
func (b *Budget) measured(capacity float64, now time.Time) {
	ceiling := capacity * measuredKnee
	b.prevPrev, b.prevBloat, b.bloatRate = ceiling, ceiling, ceiling
	b.shown = shownAtCeiling{}
	b.bloatAt = now
	b.achieved = capacity
}

// trackDelivery keeps what got through while loaded (mean and variance over
// about 2 s, and the loaded time behind them) and reports whether this tick
// was loaded. Unloaded time wears the history down twice as fast as loaded
// time builds it: a dip of a tick or two keeps it, a quiet spell ends it.
func (b *Budget) trackDelivery(o estimator.Observation, dt float64) (loaded bool) {
	if o.Load < 0.8 && o.Backlog < limitingBacklog {
		b.loaded.time = math.Max(b.loaded.time-2*dt, 0)
		return false
	}
	b.loaded.add(o.Achieved, dt, 2)
	return true
}

// measuredKnee is where under a measured capacity the queue starts to grow:
// what the bottleneck delivers while it holds a queue is its capacity, and a
// rate just at it keeps that queue.
const measuredKnee = 0.97

// mark records a ceiling: the capacity the link showed when the delay rose.
// When less got through than the rate allowed, what got through is the
// capacity, measured, and the ceiling is measuredKnee of it. On download
// the bottleneck upstream of our shaper delivers its capacity while it
// holds a queue; when the link limits the traffic in this call, what it
// delivered (see linkLimits) counts if that is higher, since the smoothed
// measure of what got through lags a ramp. On upload what got through is
// what the senders offered: the link's capacity while the link's queue
// clocks them, and what their windows allow in calls without a queue
// (docs/frontier.md, "An upload's ceiling from what the senders
// offered"). When all of it got through, our shaper was the limit and the
// capacity lies below the rate: the best guess is the knee, the rate when
// the delay last showed next to no queue.
// Later marks in one episode (the delay not back under hold since the last
// mark) measure the rate the policy cut to rather than the link, so the
// episode keeps its highest.
func (b *Budget) mark(in Input) {
	if in.Rate <= in.Bounds.Min {
		// The bound's rate, not the link's: nothing to learn.
		return
	}
	capacity := b.capacity(in, in.Rate)
	switch {
	case capacity < 0.97*in.Rate:
		capacity *= measuredKnee
	case b.knee > 0 && in.Now.Sub(b.kneeAt) < b.cfg.Memory:
		capacity = math.Min(capacity, b.knee)
	}
	if b.bloatRate > 0 && !b.overSince.IsZero() && !b.overSince.After(b.bloatAt) {
		b.bloatRate = math.Max(b.bloatRate, capacity)
	} else {
		if math.Abs(capacity-b.bloatRate) > 0.1*capacity {
			// Another ceiling: the queue the last one showed says
			// nothing of it.
			b.shown = shownAtCeiling{}
		}
		b.prevPrev, b.prevBloat, b.bloatRate = b.prevBloat, b.bloatRate, capacity
	}
	b.bloatAt = in.Now
}

// capacity is what the link delivers now (see delivered), or on download,
// when the link limits the traffic in this call, what it delivered (see
// linkLimits), at most most, if that is higher: the smoothed measure of
// what got through lags a ramp (35.9 Mbit/s for 40 after a slow start past
// a gone ceiling, in the simulator's step).
func (b *Budget) capacity(in Input, most float64) float64 {
	capacity := b.delivered(in)
	if linkLimits(in) {
		capacity = math.Max(capacity, math.Min(b.link.mean, most))
	}
	return capacity
}

// plateauAt is how long after a ceiling was marked the gentle rise reaches
// it; the rise is as slow again past it.
const plateauAt = 3 * time.Second

// plateau is where the gentle rise stands, as a fraction of the ceiling, at
// now: from the zone's edge at the mark, concave up to the ceiling at
// plateauAt, then convex, 10 % over it (where the zone ends) at twice
// plateauAt from the usual 90 % edge (CUBIC's window curve,
// W(t) = Wmax + C(t - K)^3).
func (b *Budget) plateau(now time.Time) float64 {
	z := b.zone(now)
	x := now.Sub(b.bloatAt).Seconds()/plateauAt.Seconds() - 1
	return 1 + (1-z)*x*x*x
}

// slowStartLag is how long a queue that a rise builds takes to show in the
// delay: a round trip, half a round of the reflectors' probes and a tick.
// slowStartFrom is the first excess over the ceiling that slowStart tries,
// as a fraction of it.
const (
	slowStartLag  = 150 * time.Millisecond
	slowStartFrom = 0.02
)

// slowStart is the rate past the ceiling, from rate, at now, dt seconds
// after the last call, while the delay shows next to no queue. The first
// try is slowStartFrom over the ceiling, and it holds for slowStartLag: the
// delay cannot show the queue the try builds before then, so until then it
// vouches for nothing past the try. A ceiling still the link's (its
// capacity a few per cent over it, where mark put it) shows as delay at
// the try, and the ease that follows marks it again. Past the lag the
// excess doubles every slowStartLag, as TCP's slow start doubles its
// window every round trip that brings no loss, and a ceiling that is gone
// lets it reach the zone's end, 10 % over it, about 3.3 lags after the
// try; the rise is Step's from there. The later doublings do not wait
// each for its lag: a ceiling that showed none of the try's queue is
// likely gone, and a lag at each would cost the recovery one more.
func (b *Budget) slowStart(rate, dt float64, now time.Time) float64 {
	excess, first := rate-b.bloatRate, slowStartFrom*b.bloatRate
	if excess < first/2 {
		b.triedAt = now
		return b.bloatRate + first
	}
	if now.Sub(b.triedAt) < slowStartLag {
		return rate
	}
	// One observation vouches for one lag at most: after a gap between
	// calls the excess doubles once, not once per lag of the gap.
	lags := math.Min(dt/slowStartLag.Seconds(), 1)
	return b.bloatRate + math.Max(excess, first)*math.Exp2(lags)
}

// zone is where the gentle zone starts, as a fraction of the ceiling: 90 %,
// or 85 % for Memory after a capacity drop, whose new level the link's own
// accounting (framing, the bottleneck's queue) may put a little lower than
// what got through in the tick after it; the rate then settles under the
// knee before it probes for it.
func (b *Budget) zone(now time.Time) float64 {
	if !b.dropAt.IsZero() && now.Sub(b.dropAt) < b.cfg.Memory {
		return 0.85
	}
	return 0.9
}

// steady reports whether the link shows a ceiling of its own: a capacity
// drop was measured within Memory, or, on download, the ceiling agrees with
// what the link delivered steadily (see linkSteady), or the last two
// episodes' ceilings, within Memory, agreed (within 10 %) and what got
// through while loaded varied little, or, on download, the last three
// agreed.
func (b *Budget) steady(now time.Time, d estimator.Direction) bool {
	if b.bloatRate <= 0 || now.Sub(b.bloatAt) >= b.cfg.Memory {
		return false
	}
	if !b.dropAt.IsZero() && now.Sub(b.dropAt) < b.cfg.Memory {
		return true
	}
	if d == estimator.Down && b.linkSteady(now) {
		return true
	}
	if math.Abs(b.bloatRate-b.prevBloat) > 0.1*b.bloatRate {
		return false
	}
	// Two ceilings agree by chance on a link whose capacity moves (a
	// cellular one): that takes what got through while loaded to have
	// varied little as well, or a third ceiling that agrees. On upload the
	// third is no evidence: our shaper is upstream of the bottleneck, so a
	// ceiling there is not what the link delivered but mostly the knee of
	// the policy's own rise, and rises from like cuts reach like knees
	// whatever the link does (a cellular upload crawled along such a
	// ceiling for seconds with twice the capacity free).
	if b.loaded.dev() < 0.1*b.loaded.mean+countingNoise {
		return true
	}
	return d == estimator.Down && math.Abs(b.bloatRate-b.prevPrev) <= 0.1*b.bloatRate
}

// linkSteady reports whether the download's ceiling is one the link has
// shown in what it delivered while it limited the traffic (see linkLimits):
// in two calls or more within Memory, varying by under 5 % of it (plus
// countingNoise), with the ceiling within 5 % of measuredKnee of it.
//
// Two calls, not 100 ms: one call has no spread, and two calls of a 50 ms
// tick span 100 ms only to within the timer's jitter. In a host-lab run of
// step, the first ease after the restore found a level of 40.07 Mbit/s
// from two calls 50 ms apart, a spread of 0.02 and its own mark in
// agreement, and still did not count it as the link's: the one test it
// failed was the measure's time, two calls' worth. The rate rose back at
// full speed into a second tooth of 15.6 ms.
//
// What the link delivers while it limits the traffic is its capacity, tick
// by tick. On a link with a capacity of its own (a line, or the lab's
// step) it is the same from one tick to the next; on a cellular link it
// moves with the radio, by tens of per cent between ticks, and on the
// simulator's Poisson link by about 15 %. So one such measure that agrees
// with the ceiling makes the ceiling the link's at once. Otherwise that
// took marks that agree, each of them an ease after a rise past the
// capacity: on step, in the simulator at a 2 ms round trip, three teeth
// of 15-18 ms after the restore to 40 Mbit/s before the third mark, and
// on real CAKE, after a drop the drop rule did not catch, teeth of
// 24-28 ms at 10 Mbit/s (docs/frontier.md, "Teeth at a new ceiling").
func (b *Budget) linkSteady(now time.Time) bool {
	return b.link.n >= 2 && now.Sub(b.linkAt) < b.cfg.Memory &&
		b.link.dev() < 0.05*b.link.mean+countingNoise &&
		math.Abs(b.bloatRate-measuredKnee*b.link.mean) <= 0.05*b.bloatRate
}

// countingNoise is how much a tick's achieved rate varies on a steady link
// from counting whole packets: two full-size packets per 50 ms tick.
const countingNoise = 2 * 1500 * 8 / 0.05

// cut handles a delay over budget: towards what gets through, deeper the further over Hold.
func (b *Budget) cut(in Input, delay time.Duration) Proposal {
	c := b.cfg
	o := in.Obs
	hold := Proposal{Rate: in.Rate, Reason: ReasonHold}
	if !b.lastCut.IsZero() {
		since := in.Now.Sub(b.lastCut)
		wait := c.Refractory + b.cutDelay
		if since < wait {
			return hold
		}
		if since < 2*wait && delay <= b.cutDelay {
			// Not growing: the last cut is working; the delay signal lags the
			// queue by a round trip and the probe interval.
			return hold
		}
	}
	capacity := b.delivered(in)
	over := float64(delay-c.Hold) / float64(c.Drain)
	if capacity >= 0.97*in.Rate {
		// All the rate got through: our shaper, not the link, limited it
		// (always so on upload), and the capacity lies below the rate by
		// an unknown amount: cut twice as deep as the delay asks.
		over *= 2
	}
	factor := math.Min(math.Max(1-over, c.MinCut), c.MaxCut)
	b.mark(in)
	b.lastCut = in.Now
	b.cutDelay = delay
	// Never more than MinCut of the rate in one step, unless less gets
	// through than the rate allows (but not next to nothing, as in a fade):
	// then what gets through is the capacity, measured.
	floor := in.Rate * c.MinCut
	if o.Load < c.Loaded && o.Achieved >= 0.2*in.Rate {
		floor = 0
	}
	next := math.Max(capacity*factor, floor)
	return Proposal{Rate: in.Bounds.Clamp(next), Reason: ReasonBloat}
}

// delivered is what the link delivers now: the achieved rate, or CAKE's
// capacity estimate when no rate was measured, and never more than the rate.
//
// On download the achieved rate (through the shaper) equals the bottleneck's
// capacity exactly while the bottleneck holds a queue, which is when the
// policy cuts; CAKE's estimate lags behind capacity drops (it falls by 1/256
// per packet train), so it is only the fallback.
func (b *Budget) delivered(in Input) float64 {
	switch o := in.Obs; {
	case b.achieved > 0:
		return math.Min(in.Rate, b.achieved)
	case o.CapacityEstimate > 0:
		return math.Min(in.Rate, o.CapacityEstimate)
	}
	return in.Rate
}

// afterDrop is how long after a capacity drop the delay is taken for the
// queue the drop left: a round trip for the senders to notice, and the
// drain at MinCut of the capacity.
const afterDrop = time.Second

// limitingBacklog is the shaper backlog, in bytes, from which the shaper
// counts as the limit: two full-size packets.
const limitingBacklog = 3000
