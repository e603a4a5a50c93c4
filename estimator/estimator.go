package estimator

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Bounds on the configuration and on the memory an Estimator keeps.
const (
	// MaxWindow is the largest Config.Window accepted.
	MaxWindow = 1024
	// MaxPendingDeltas is how many per-sample deltas a direction keeps for the
	// next Observation; when Observe is not called, the oldest are dropped.
	MaxPendingDeltas = 64
	// MaxOverhead is the largest Config.Overhead accepted, as for tc-cake.
	MaxOverhead = 256

	// maxSerialisation keeps the serialisation time's float-to-Duration
	// conversion in range for absurdly low shaper rates.
	maxSerialisation = time.Hour
)

// Defaults for the zero fields of a Config.
const (
	DefaultBudget     = 15 * time.Millisecond
	DefaultMTU        = 1500
	DefaultWindow     = 6
	DefaultDelayed    = 3
	DefaultFresh      = time.Second
	DefaultRiseTau    = 60 * time.Second
	DefaultFallWeight = 0.5
	DefaultLoadedAt   = 0.5
)

// A Config tunes an Estimator. Zero fields take the Default values.
type Config struct {
	// Budget is the latency budget, the base of the bloat threshold.
	Budget time.Duration
	// MTU is the size in bytes of a full-size IP packet.
	MTU int
	// Overhead is the link-layer bytes added to each packet, between 0 and
	// MaxOverhead. It only lengthens Observation.Serialisation (and so the
	// threshold); a negative overhead (compensating for headers the counter
	// includes) is not accepted: leave it at 0 instead.
	Overhead int
	// Window is how many of the newest per-sample deltas of a direction the
	// bloat detector looks at, between 1 and MaxWindow.
	Window int
	// Delayed is how many of the samples in the window must exceed the
	// threshold for the direction to count as bloated, between 1 and Window.
	Delayed int
	// Fresh is how recent (by send time, relative to the observation) a
	// reflector's newest sample must be for the reflector to count in the
	// combined delta. A direction whose newest sample is older is never
	// reported as bloated.
	Fresh time.Duration
	// RiseTau is the time constant with which a baseline rises towards higher
	// delays: a delay that stays up is absorbed into the baseline after a few
	// RiseTau.
	RiseTau time.Duration
	// FallWeight, in (0, 1], is the weight of a sample below the baseline:
	// baselines fall fast, so a route change to a shorter path is followed at
	// once.
	FallWeight float64
	// LoadedAt, in (0, 1], is the load ratio at or above which a direction
	// takes the blame for delay seen in echo (round-trip) samples.
	LoadedAt float64
}

// withDefaults returns c with its zero fields set to the defaults.
func (c Config) withDefaults() Config {
	if c.Budget == 0 {
		c.Budget = DefaultBudget
	}
	if c.MTU == 0 {
		c.MTU = DefaultMTU
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.Delayed == 0 {
		c.Delayed = DefaultDelayed
	}
	if c.Fresh == 0 {
		c.Fresh = DefaultFresh
	}
	if c.RiseTau == 0 {
		c.RiseTau = DefaultRiseTau
	}
	if c.FallWeight == 0 {
		c.FallWeight = DefaultFallWeight
	}
	if c.LoadedAt == 0 {
		c.LoadedAt = DefaultLoadedAt
	}
	return c
}

// Validate reports the first field of c (after defaults are applied) that is
// out of range, in an error naming the field, its value and the range.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Budget < 0:
		return fmt.Errorf("estimator: Budget (%v) must be positive", c.Budget)
	case c.MTU < 68 || c.MTU > 65535:
		return fmt.Errorf("estimator: MTU (%d) must be between 68 and 65535", c.MTU)
	case c.Overhead < 0 || c.Overhead > MaxOverhead:
		return fmt.Errorf("estimator: Overhead (%d) must be between 0 and %d", c.Overhead, MaxOverhead)
	case c.Window < 1 || c.Window > MaxWindow:
		return fmt.Errorf("estimator: Window (%d) must be between 1 and %d", c.Window, MaxWindow)
	case c.Delayed < 1 || c.Delayed > c.Window:
		return fmt.Errorf("estimator: Delayed (%d) must be between 1 and Window (%d)", c.Delayed, c.Window)
	case c.Fresh < 0:
		return fmt.Errorf("estimator: Fresh (%v) must be positive", c.Fresh)
	case c.RiseTau < 0:
		return fmt.Errorf("estimator: RiseTau (%v) must be positive", c.RiseTau)
	case !(c.FallWeight > 0 && c.FallWeight <= 1):
		return fmt.Errorf("estimator: FallWeight (%v) must be in (0, 1]", c.FallWeight)
	case !(c.LoadedAt > 0 && c.LoadedAt <= 1):
		return fmt.Errorf("estimator: LoadedAt (%v) must be in (0, 1]", c.LoadedAt)
	}
	return nil
}

// serialisation returns the time one full-size packet, with its link-layer
// overhead, takes on the wire at the given shaper rate (bit/s); 0 for an
// unknown rate (<= 0 or NaN).
func (c Config) serialisation(rate float64) time.Duration {
	if !(rate > 0) {
		return 0
	}
	bits := float64(c.MTU+c.Overhead) * 8
	ser := math.Round(bits * float64(time.Second) / rate)
	if ser > float64(maxSerialisation) {
		ser = float64(maxSerialisation)
	}
	return time.Duration(ser)
}

// An Estimator turns delay samples, shaper byte counters and CAKE's capacity
// estimate into one Observation per direction.
//
// Each (reflector, kind) pair has its own baseline: the first sample sets it,
// samples below it pull it down fast (Config.FallWeight), samples above it
// pull it up slowly (time constant Config.RiseTau). A sample's delta is its
// delay over the baseline as it stood before the sample, never negative, so
// any constant clock offset of one-way delays cancels. OWDUp samples count for
// Up, OWDDown for Down and RTT samples for both; an RTT sample is not used for
// a direction for which the same reflector has sent a one-way sample within
// Config.Fresh before it, since the one-way delay says more.
//
// A step of either clock (NTP at boot) changes the offset at once: the
// up and down baselines move by it when a probe's pair of one-way samples
// shows one (see clockStep), so a step is never read as delay. RTT
// samples, timed on the monotonic clock, need no such care.
//
// An Estimator is pure: time arrives with the inputs, and it starts no
// goroutines. It takes no locks and is not safe for concurrent use: the
// controller serialises the calls.
//
// Memory is bounded by the number of reflector names it has seen; the probe
// pool calls ForgetReflector when it drops a reflector.
type Estimator struct {
	cfg        Config
	reflectors map[string]*reflector
	dirs       [2]direction
	// scratch holds the fresh deltas while the median is taken.
	scratch []time.Duration
	// up is an OWDUp sample held until the OWDDown sample of the same probe
	// comes (see AddSample); upSet says whether there is one.
	up    Sample
	upSet bool
}

// A reflector is the state of one reflector.
type reflector struct {
	baselines [3]Baseline // by Kind
	newest    [2]newest   // by Direction
}

// newest is a reflector's newest (by send time) sample for one direction.
type newest struct {
	delta time.Duration
	sent  time.Time
	echo  bool // from an RTT sample
	set   bool
}

// An entry is one per-sample delta in a bloat window.
type entry struct {
	delta time.Duration
	echo  bool // from an RTT sample: subject to blame
}

// A direction is the per-direction state.
type direction struct {
	// window is a ring of the newest Window deltas in arrival order.
	window []entry
	next   int // where the next entry goes
	filled int // valid entries, up to len(window)

	// pending are the deltas since the last Observe. The buffer handed out
	// by Observe is spare until the following Observe.
	pending, spare []time.Duration

	last  time.Time // newest send time
	seen  bool      // last is set
	meter rateMeter
	// sent and offered meter the shaper's IP counters: what it sent, and
	// what reached it (sent, dropped and queued).
	sent, offered rateMeter
	capacity      float64
	backlog       uint64
	// maxRate is the highest rate of the shaper, bit/s (0: unknown): the
	// meters' test of a counter that went backwards.
	maxRate float64
}

// offeredRate is the rate at which traffic reached the shaper, counted as
// Achieved is: the achieved rate scaled by what reached the shaper over what
// it sent in the same interval; 0 before AddOffered has measured both.
func (ds *direction) offeredRate() float64 {
	if ds.sent.rate <= 0 {
		return 0
	}
	return ds.meter.rate * ds.offered.rate / ds.sent.rate
}

// New returns an Estimator with cfg's zero fields set to their defaults, or
// an error when cfg does not validate.
func New(cfg Config) (*Estimator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	e := &Estimator{
		cfg:        cfg,
		reflectors: make(map[string]*reflector),
	}
	for d := range e.dirs {
		e.dirs[d].window = make([]entry, cfg.Window)
		e.dirs[d].pending = make([]time.Duration, 0, MaxPendingDeltas)
		e.dirs[d].spare = make([]time.Duration, 0, MaxPendingDeltas)
	}
	return e, nil
}

// Config returns the configuration in effect, defaults applied.
func (e *Estimator) Config() Config { return e.cfg }

// AddSample takes one delay sample. Samples are expected in arrival order;
// one whose send time is older than its reflector's newest for a direction
// still enters the bloat window and Deltas but does not replace the newest.
// Samples of an unknown Kind are ignored.
//
// The OWDUp and OWDDown samples of one timestamp probe (same reflector,
// same send time, up first, as the probe targets give them) are taken as a
// pair: an OWDUp sample waits for its OWDDown, and is taken alone when any
// other sample or a call to Observe comes first. A pair is checked for a
// clock step (see clockStep) before its baselines move.
func (e *Estimator) AddSample(s Sample) {
	if s.Kind < RTT || s.Kind > OWDDown {
		return
	}
	if s.Kind == OWDDown && e.upSet && e.up.Reflector == s.Reflector && e.up.Sent.Equal(s.Sent) {
		e.upSet = false
		e.addPair(e.reflector(s.Reflector), e.up, s)
		return
	}
	e.flushUp()
	if s.Kind == OWDUp {
		e.up, e.upSet = s, true
		return
	}
	e.addAlone(e.reflector(s.Reflector), s)
}

// reflector returns the state of the named reflector, made if new.
func (e *Estimator) reflector(name string) *reflector {
	r := e.reflectors[name]
	if r == nil {
		r = new(reflector)
		e.reflectors[name] = r
	}
	return r
}

// flushUp takes the waiting OWDUp sample, if any, alone.
func (e *Estimator) flushUp() {
	if e.upSet {
		e.upSet = false
		e.addAlone(e.reflector(e.up.Reflector), e.up)
	}
}

// addAlone takes one sample without its pair.
func (e *Estimator) addAlone(r *reflector, s Sample) {
	b := &r.baselines[s.Kind]
	var delta time.Duration
	if s.Kind != RTT && b.Deviation(s.Delay) < -clockStepMin {
		// Far below its baseline, and no other half to tell: it may be one
		// half of a clock step whose other half was lost, so it does not
		// pull the baseline down (the next pair settles it).
		delta = 0
	} else {
		delta = b.Update(s.Delay, s.Sent, e.cfg.RiseTau, e.cfg.FallWeight)
	}
	switch s.Kind {
	case OWDUp:
		e.add(r, Up, delta, s.Sent, false)
	case OWDDown:
		e.add(r, Down, delta, s.Sent, false)
	case RTT:
		for _, d := range Directions {
			if n := r.newest[d]; n.set && !n.echo && s.Sent.Sub(n.sent) <= e.cfg.Fresh {
				continue
			}
			e.add(r, d, delta, s.Sent, true)
		}
	}
}

// addPair takes the OWDUp and OWDDown samples of one probe. When they show
// a clock step, both baselines move by it first, so the step is no delay.
func (e *Estimator) addPair(r *reflector, up, down Sample) {
	bu, bd := &r.baselines[OWDUp], &r.baselines[OWDDown]
	if bu.set && bd.set {
		if o, ok := clockStep(bu.Deviation(up.Delay), bd.Deviation(down.Delay), r.newest[Up].delta, r.newest[Down].delta); ok {
			bu.Shift(-o)
			bd.Shift(o)
		}
	}
	du := bu.Update(up.Delay, up.Sent, e.cfg.RiseTau, e.cfg.FallWeight)
	dd := bd.Update(down.Delay, down.Sent, e.cfg.RiseTau, e.cfg.FallWeight)
	e.add(r, Up, du, up.Sent, false)
	e.add(r, Down, dd, down.Sent, false)
}

// clockStepMin is the smallest change of clock offset taken as a step.
// NTP steps a clock only for offsets above 128 ms (ntpd; busybox's and
// chrony's usual settings step from 1 s) and slews smaller ones, which the
// baselines follow; below it, a baseline left high by a long stretch of
// load could pass for a step and hide delay on the other side.
//
// Echo probes need none of this: they time the round trip on the
// monotonic clock, which no step moves.
const clockStepMin = 100 * time.Millisecond

// clockStep tells a step of either clock from queueing in one timestamp
// probe. dUp and dDown are its one-way delays' deviations from their
// baselines (folded modulo a day); prevUp and prevDown the queueing the
// reflector's previous probe showed on each side.
//
// A change o of the offset between the two clocks (ours stepped forward
// or the reflector's back: o > 0) moves the delays by −o up and +o down
// and leaves the round trip as it was; queueing only ever adds delay, on
// one side or both. So the offset change is at least −dUp and at most
// dDown: when that range holds 0, queueing alone explains the probe and
// there is no step. Within it, the change taken is the one that leaves
// each side's queueing nearest to what the previous probe showed (queues
// do not jump when a clock does); when the round trip itself fell (a
// shorter path, and no offset leaves both sides' queueing at zero or
// more), the same rule shares the fall, neither side falling by more than
// the round trip did. A step is reported only when the
// change is at least clockStepMin and the round trip moved by at most half
// as much: a step, not load.
//
// Offsets are known modulo a day, and the even split of dDown − dUp
// modulo half a day, so of the two candidates half a day apart, the one
// that leaves each side near half the round trip's change is taken: a
// 12 h step is found as surely as a 2 s one.
func clockStep(dUp, dDown, prevUp, prevDown time.Duration) (time.Duration, bool) {
	rtt := FoldDay(dUp + dDown)
	even := FoldDay((dDown - dUp) / 2)
	if alt := FoldDay(even + day/2); absDur(FoldDay(dUp+alt)-rtt/2) < absDur(FoldDay(dUp+even)-rtt/2) {
		even = alt
	}
	// With rtt >= 0, the offsets in [lo, hi] leave both sides' queueing
	// at zero or more; with rtt < 0, none does, and those in [lo, hi]
	// leave neither side's fall more than rtt.
	lo, hi := even-absDur(rtt)/2, even+absDur(rtt)/2
	if rtt >= 0 && lo <= 0 && hi >= 0 {
		return 0, false // queueing alone explains it
	}
	o := min(max(even-(prevDown-prevUp)/2, lo), hi)
	if absDur(o) < clockStepMin || absDur(rtt) > absDur(o)/2 {
		return 0, false
	}
	return o, true
}

// absDur returns |d|.
func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// add attributes one sample's delta to direction d.
func (e *Estimator) add(r *reflector, d Direction, delta time.Duration, sent time.Time, echo bool) {
	if n := &r.newest[d]; !n.set || !sent.Before(n.sent) {
		*n = newest{delta: delta, sent: sent, echo: echo, set: true}
	}
	ds := &e.dirs[d]
	ds.window[ds.next] = entry{delta: delta, echo: echo}
	ds.next = (ds.next + 1) % len(ds.window)
	ds.filled = min(ds.filled+1, len(ds.window))
	if len(ds.pending) == cap(ds.pending) {
		ds.pending = ds.pending[:copy(ds.pending, ds.pending[1:])]
	}
	ds.pending = append(ds.pending, delta)
	if !ds.seen || sent.After(ds.last) {
		ds.last, ds.seen = sent, true
	}
}

// AddCounter takes a reading of the byte counter of direction d's shaper.
// The first reading gives no rate; a reading not later than the previous one
// is ignored. A counter that went backwards is taken as a 32-bit wrap, a
// 64-bit wrap or, when neither is plausible, a reset: the achieved rate then
// keeps its previous value and the next interval starts at this reading.
// A wrap is plausible when the advance it implies is within a few times the
// rate set by SetMaxRate over the interval (without one, when it is less
// than half the counter's range).
func (e *Estimator) AddCounter(d Direction, t time.Time, bytes uint64) {
	if d != Down && d != Up {
		return
	}
	e.dirs[d].meter.add(t, bytes, e.dirs[d].maxRate)
}

// SetMaxRate records the highest rate, in bit/s, that direction d's shaper
// may be set to (its max bound; 0: unknown). The counters of d cannot
// plausibly advance much faster, so a counter that went backwards by more
// than that allows for is a reset, not a wrap.
func (e *Estimator) SetMaxRate(d Direction, bps float64) {
	if d != Down && d != Up {
		return
	}
	e.dirs[d].maxRate = bps
}

// AddOffered records a reading of direction d's shaper counters taken at t:
// sent, the bytes it has sent, and offered, the bytes that have reached it
// (sent, dropped and still queued), both as the kernel counts them. Read
// with AddCounter's, they give the offered rate (see Observation.Offered).
func (e *Estimator) AddOffered(d Direction, t time.Time, sent, offered uint64) {
	if d != Down && d != Up {
		return
	}
	e.dirs[d].sent.add(t, sent, e.dirs[d].maxRate)
	e.dirs[d].offered.add(t, offered, e.dirs[d].maxRate)
}

// SetCapacityEstimate records CAKE's capacity estimate for direction d in
// bit/s; 0 means there is none.
func (e *Estimator) SetCapacityEstimate(d Direction, bps float64) {
	if d != Down && d != Up {
		return
	}
	e.dirs[d].capacity = bps
}

// SetBacklog records the bytes queued in direction d's shaper.
func (e *Estimator) SetBacklog(d Direction, bytes uint64) {
	if d != Down && d != Up {
		return
	}
	e.dirs[d].backlog = bytes
}

// ForgetReflector drops the baselines and newest samples of the named
// reflector; the deltas it already contributed to the bloat windows stay.
// The probe pool calls it when it drops a reflector, which keeps memory
// bounded however many reflectors come and go.
func (e *Estimator) ForgetReflector(name string) {
	if e.upSet && e.up.Reflector == name {
		e.upSet = false
	}
	delete(e.reflectors, name)
}

// Baseline returns the current baseline of one reflector's samples of kind k,
// and false when there is none.
func (e *Estimator) Baseline(name string, k Kind) (time.Duration, bool) {
	r := e.reflectors[name]
	if r == nil || k < RTT || k > OWDDown || !r.baselines[k].set {
		return 0, false
	}
	return r.baselines[k].value, true
}

// Observe returns what the estimator knows at now about both directions,
// indexed by Direction. rates are the shapers' current rates in bit/s, also
// indexed by Direction (<= 0 when unknown).
//
// The Deltas slices of the result belong to the Estimator and stay valid only
// until the next call to Observe.
func (e *Estimator) Observe(now time.Time, rates [2]float64) [2]Observation {
	e.flushUp()
	var loads [2]float64
	for _, d := range Directions {
		if rates[d] > 0 {
			loads[d] = e.dirs[d].meter.rate / rates[d]
		}
	}
	cutoff := now.Add(-e.cfg.Fresh)
	var obs [2]Observation
	for _, d := range Directions {
		ds := &e.dirs[d]
		o := Observation{
			Time:             now,
			Direction:        d,
			Serialisation:    e.cfg.serialisation(rates[d]),
			Achieved:         ds.meter.rate,
			Offered:          ds.offeredRate(),
			ShaperRate:       rates[d],
			Load:             loads[d],
			CapacityEstimate: ds.capacity,
			Backlog:          ds.backlog,
			LastSample:       ds.last,
		}
		o.Threshold = e.cfg.Budget + o.Serialisation
		o.Delta, o.Reflectors = e.combined(d, cutoff)
		if ds.seen && !ds.last.Before(cutoff) {
			blame := loads[d] >= e.cfg.LoadedAt || loads[d] >= loads[d.Other()]
			o.Bloat = ds.delayed(o.Threshold, blame) >= e.cfg.Delayed
		}
		if n := len(ds.pending); n > 0 {
			o.Deltas = ds.pending[:n:n]
			ds.pending, ds.spare = ds.spare[:0], ds.pending
		}
		obs[d] = o
	}
	return obs
}

// combined returns the median of the newest deltas of the reflectors whose
// newest sample for d was sent at or after cutoff, and how many there are.
// With an even count it takes the lower middle value, so that fewer than half
// of the reflectors reading high cannot move it.
func (e *Estimator) combined(d Direction, cutoff time.Time) (time.Duration, int) {
	e.scratch = e.scratch[:0]
	for _, r := range e.reflectors {
		if n := r.newest[d]; n.set && !n.sent.Before(cutoff) {
			e.scratch = append(e.scratch, n.delta)
		}
	}
	if len(e.scratch) == 0 {
		return 0, 0
	}
	slices.Sort(e.scratch)
	return e.scratch[(len(e.scratch)-1)/2], len(e.scratch)
}

// delayed counts the deltas in the window over threshold. Echo deltas count
// only when the direction takes the blame for them.
func (ds *direction) delayed(threshold time.Duration, blame bool) int {
	n := 0
	for _, en := range ds.window[:ds.filled] {
		if en.delta > threshold && (blame || !en.echo) {
			n++
		}
	}
	return n
}

// A ReflectorDelta is one reflector's newest delay delta for a direction.
type ReflectorDelta struct {
	Reflector string
	Delta     time.Duration
}

// ReflectorDeltas returns, for direction d, the newest delta of every
// reflector with a sample sent within Fresh of now, sorted by reflector name:
// what the combined Delta is the median of.
func (e *Estimator) ReflectorDeltas(d Direction, now time.Time) []ReflectorDelta {
	if d != Down && d != Up {
		return nil
	}
	cutoff := now.Add(-e.cfg.Fresh)
	var out []ReflectorDelta
	for name, r := range e.reflectors {
		if n := r.newest[d]; n.set && !n.sent.Before(cutoff) {
			out = append(out, ReflectorDelta{Reflector: name, Delta: n.delta})
		}
	}
	slices.SortFunc(out, func(a, b ReflectorDelta) int { return strings.Compare(a.Reflector, b.Reflector) })
	return out
}
