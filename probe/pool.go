package probe

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/autoshape/autoshape/estimator"
	"go.uber.org/zap"
)

// Defaults for the zero fields of a PoolConfig.
const (
	DefaultPoolActive         = 6
	DefaultPoolRate           = 40
	DefaultPoolDeadline       = time.Second
	DefaultPoolMissLimit      = 5
	DefaultPoolBaselineFactor = 2
	DefaultPoolBaselineMargin = 20 * time.Millisecond
	DefaultPoolCheckEvery     = 5 * time.Second
	DefaultPoolRotate         = 10 * time.Minute
	DefaultPoolStallAfter     = time.Second
	DefaultPoolCooldown       = 5 * time.Minute
)

// Bounds on a PoolConfig.
const (
	// MaxPoolRate is the largest PoolConfig.Rate accepted, in answers per
	// second.
	MaxPoolRate = 1000
	// MaxPoolInterval is the longest time between two probes to one
	// reflector (PoolConfig.Active / PoolConfig.Rate) accepted.
	MaxPoolInterval = time.Minute
	// MaxPoolDeadline is the largest PoolConfig.Deadline accepted.
	MaxPoolDeadline = 30 * time.Second
)

// NoRotation as PoolConfig.Rotate turns the slow rotation off (any negative
// value does).
const NoRotation time.Duration = -1

// The health check's fixed tuning.
const (
	// A reflector's baseline (its round trip without queueing) follows a
	// lower round trip at once by half the difference and a higher one with
	// this time constant, like the Estimator's baselines: a route change
	// shows within a minute, a burst of load does not.
	poolRiseTau    = time.Minute
	poolFallWeight = 0.5
	// A reflector's baseline is judged only after it has been probed this
	// long: one that joins during a loaded stretch starts with a loaded
	// round trip and needs a lull to find its true baseline.
	poolWarmup = time.Minute
)

// A PoolConfig tunes a Pool. Zero fields take the defaults.
type PoolConfig struct {
	// Reflectors are the addresses to probe, in order of preference: the
	// first Active start probed, the rest are spares. Empty means
	// DefaultReflectors (only its IPv4 addresses for Method Timestamp).
	Reflectors []netip.Addr
	// Active is how many reflectors are probed at a time, default 6 (or the
	// length of Reflectors when shorter); at least 2 unless Reflectors has
	// only one address.
	Active int
	// Rate is the number of probes per second, all reflectors together,
	// default 40: each active reflector is probed every Active/Rate seconds
	// (150 ms with six), and the reflectors take turns at even spacing. The
	// combined delay is the median of each reflector's newest answer, so it
	// lags a growing queue by about half that (docs/sim-vs-lab.md has the
	// lab's figures at 20 and 40).
	Rate float64
	// Method is how reflectors are probed (the zero value is Echo).
	Method Method
	// Deadline is how long an answer may take before its probe counts as
	// lost, default 1s.
	Deadline time.Duration
	// MissLimit is how many probes in a row a reflector may lose before it
	// is replaced, default 5.
	MissLimit int
	// A reflector whose baseline round trip is above the median of the
	// active reflectors' baselines × BaselineFactor + BaselineMargin is
	// replaced (default 2 × median + 20ms): a far reflector sees more of
	// the internet's own queues, which are not the link's.
	BaselineFactor float64
	BaselineMargin time.Duration
	// CheckEvery is the interval of the health check, default 5s. Each
	// check replaces at most one reflector.
	CheckEvery time.Duration
	// Rotate is the interval of the slow rotation, which replaces the
	// longest-serving reflector by a spare even when all are healthy, so
	// that no reflector is leaned on for ever, default 10 min; NoRotation
	// (or any negative value) turns it off. It is at least CheckEvery.
	Rotate time.Duration
	// StallAfter is how long without any answer makes the pool stalled,
	// default 1s. It must be longer than the time between two probes
	// (1/Rate).
	StallAfter time.Duration
	// Cooldown is how long a replaced reflector waits at the end of the
	// spare list before it may be probed again, default 5 min.
	Cooldown time.Duration
}

// withDefaults returns c with its zero fields set to the defaults. The
// Reflectors slice is always a copy, with IPv4-mapped IPv6 addresses
// unmapped.
func (c PoolConfig) withDefaults() PoolConfig {
	var list []netip.Addr
	if len(c.Reflectors) == 0 {
		for _, a := range DefaultReflectors {
			if c.Method == Timestamp && !a.Is4() {
				continue
			}
			list = append(list, a)
		}
	} else {
		list = make([]netip.Addr, len(c.Reflectors))
		for i, a := range c.Reflectors {
			list[i] = a.Unmap()
		}
	}
	c.Reflectors = list
	if c.Active == 0 {
		c.Active = min(DefaultPoolActive, len(c.Reflectors))
	}
	if c.Rate == 0 {
		c.Rate = DefaultPoolRate
	}
	if c.Deadline == 0 {
		c.Deadline = DefaultPoolDeadline
	}
	if c.MissLimit == 0 {
		c.MissLimit = DefaultPoolMissLimit
	}
	if c.BaselineFactor == 0 {
		c.BaselineFactor = DefaultPoolBaselineFactor
	}
	if c.BaselineMargin == 0 {
		c.BaselineMargin = DefaultPoolBaselineMargin
	}
	if c.CheckEvery == 0 {
		c.CheckEvery = DefaultPoolCheckEvery
	}
	if c.Rotate == 0 {
		c.Rotate = DefaultPoolRotate
	}
	if c.StallAfter == 0 {
		c.StallAfter = DefaultPoolStallAfter
	}
	if c.Cooldown == 0 {
		c.Cooldown = DefaultPoolCooldown
	}
	return c
}

// spacing returns the time between two probes of the pool (1/Rate) and the
// time between two probes to one reflector (Active times that), so that the
// reflectors' turns are exactly evenly spaced.
func (c PoolConfig) spacing() (slot, interval time.Duration) {
	slot = time.Duration(math.Round(float64(time.Second) / c.Rate))
	return slot, slot * time.Duration(c.Active)
}

// Validate reports the first field of c (after defaults are applied) that is
// out of range, in an error naming the field, its value and the range.
func (c PoolConfig) Validate() error {
	c = c.withDefaults()
	n := len(c.Reflectors)
	if n == 0 {
		return errors.New("estimator: PoolConfig.Reflectors is empty")
	}
	if c.Method != Echo && c.Method != Timestamp && c.Method != Auto {
		return fmt.Errorf("estimator: PoolConfig.Method (%v) is unknown", c.Method)
	}
	seen := make(map[netip.Addr]int, n)
	for i, a := range c.Reflectors {
		switch {
		case !a.IsValid():
			return fmt.Errorf("estimator: PoolConfig.Reflectors[%d] is not a valid address", i)
		case a.IsUnspecified() || a.IsMulticast():
			return fmt.Errorf("estimator: PoolConfig.Reflectors[%d] (%s) is not a unicast address", i, a)
		case c.Method == Timestamp && !a.Is4():
			return fmt.Errorf("estimator: PoolConfig.Reflectors[%d] (%s) is IPv6, which Method timestamp cannot probe (use auto)", i, a)
		}
		if j, dup := seen[a]; dup {
			return fmt.Errorf("estimator: PoolConfig.Reflectors[%d] (%s) repeats Reflectors[%d]", i, a, j)
		}
		seen[a] = i
	}
	if lo := min(2, n); c.Active < lo || c.Active > n {
		return fmt.Errorf("estimator: PoolConfig.Active (%d) must be between %d and the number of Reflectors (%d)", c.Active, lo, n)
	}
	if !(c.Rate > 0 && c.Rate <= MaxPoolRate) {
		return fmt.Errorf("estimator: PoolConfig.Rate (%g) must be in (0, %d] probes per second", c.Rate, MaxPoolRate)
	}
	slot, interval := c.spacing()
	switch {
	case interval > MaxPoolInterval:
		return fmt.Errorf("estimator: PoolConfig.Rate (%g) is too low for %d active reflectors: each would be probed every %v, more than %v", c.Rate, c.Active, interval, MaxPoolInterval)
	case c.Deadline <= 0 || c.Deadline > MaxPoolDeadline:
		return fmt.Errorf("estimator: PoolConfig.Deadline (%v) must be in (0, %v]", c.Deadline, MaxPoolDeadline)
	case c.MissLimit < 1:
		return fmt.Errorf("estimator: PoolConfig.MissLimit (%d) must be at least 1", c.MissLimit)
	case !(c.BaselineFactor >= 1) || math.IsInf(c.BaselineFactor, 0):
		return fmt.Errorf("estimator: PoolConfig.BaselineFactor (%g) must be at least 1", c.BaselineFactor)
	case c.BaselineMargin < 0:
		return fmt.Errorf("estimator: PoolConfig.BaselineMargin (%v) must not be negative", c.BaselineMargin)
	case c.CheckEvery <= 0:
		return fmt.Errorf("estimator: PoolConfig.CheckEvery (%v) must be positive", c.CheckEvery)
	case c.Rotate > 0 && c.Rotate < c.CheckEvery:
		return fmt.Errorf("estimator: PoolConfig.Rotate (%v) must be at least CheckEvery (%v), or negative for no rotation", c.Rotate, c.CheckEvery)
	case c.StallAfter <= slot:
		return fmt.Errorf("estimator: PoolConfig.StallAfter (%v) must be longer than the time between two probes (1/Rate = %v)", c.StallAfter, slot)
	case c.Cooldown < 0:
		return fmt.Errorf("estimator: PoolConfig.Cooldown (%v) must not be negative", c.Cooldown)
	}
	return nil
}

// A ReplaceReason says why a reflector left the active set.
type ReplaceReason int

// Reasons for a replacement, in order of precedence: when several
// reflectors are bad, a check replaces one with the first reason.
const (
	// ReplaceFailed: its Target could not be made, or its Run ended on its
	// own.
	ReplaceFailed ReplaceReason = iota
	// ReplaceLost: it lost PoolConfig.MissLimit probes in a row, or gave no
	// result at all for longer than the deadline plus MissLimit+1 probe
	// intervals, while other reflectors answered.
	ReplaceLost
	// ReplaceInconsistent: its answers contradict the physics: its last
	// PoolConfig.MissLimit answers in a row were inconsistent (see
	// Result.Inconsistent) while other reflectors answered consistently,
	// or its baseline round trip is impossible (below zero, or longer than
	// the deadline, which no answer may take).
	ReplaceInconsistent
	// ReplaceBaseline: its baseline round trip was far above the others'.
	ReplaceBaseline
	// ReplaceRotate: the slow rotation took its turn.
	ReplaceRotate
)

// String returns "failed", "lost", "inconsistent", "baseline" or "rotate".
func (r ReplaceReason) String() string {
	switch r {
	case ReplaceFailed:
		return "failed"
	case ReplaceLost:
		return "lost"
	case ReplaceInconsistent:
		return "inconsistent"
	case ReplaceBaseline:
		return "baseline"
	case ReplaceRotate:
		return "rotate"
	}
	return fmt.Sprintf("replace_reason(%d)", int(r))
}

// Replacements count a Pool's replacements by reason.
type Replacements struct {
	Failed, Lost, Inconsistent, Baseline, Rotate uint64
}

// A PoolState is what a Pool is doing.
type PoolState int

// Pool states.
const (
	// PoolStopped: Run is not running.
	PoolStopped PoolState = iota
	// PoolProbing: probes run and answers come.
	PoolProbing
	// PoolIdle: probing is paused by SetIdle.
	PoolIdle
	// PoolStalled: probes run, but no reflector answered within
	// PoolConfig.StallAfter.
	PoolStalled
)

// String returns "stopped", "probing", "idle" or "stalled".
func (s PoolState) String() string {
	switch s {
	case PoolStopped:
		return "stopped"
	case PoolProbing:
		return "probing"
	case PoolIdle:
		return "idle"
	case PoolStalled:
		return "stalled"
	}
	return fmt.Sprintf("pool_state(%d)", int(s))
}

// ReflectorStats describe one active reflector.
type ReflectorStats struct {
	Addr netip.Addr
	// Since is when it was first probed since it joined the active set
	// (zero before that).
	Since time.Time
	// Answered and Lost count its probes since it joined the active set;
	// Misses counts the probes it lost in a row. Inconsistent counts the
	// answers (among Answered) that gave no sample because they
	// contradicted themselves.
	Answered, Lost, Inconsistent uint64
	Misses                       int
	// Baseline is its baseline round trip (for timestamps, the sum of the
	// one-way delays, in which the clock offsets cancel), 0 before its
	// first answer.
	Baseline time.Duration
	// Method is the method of its latest answer (PoolConfig.Method before
	// the first).
	Method Method
}

// PoolStats describe a Pool.
type PoolStats struct {
	State PoolState
	// Reflectors are the active reflectors, in the order of their turns.
	Reflectors []ReflectorStats
	// Spares are the spare reflectors in the order they will be taken,
	// those cooling down included.
	Spares       []netip.Addr
	Replacements Replacements
	// Dropped counts the samples dropped because the sample channel was
	// full.
	Dropped uint64
}

// A Pool probes a few reflectors out of a longer list, one Target each,
// and keeps the set healthy: every PoolConfig.CheckEvery it replaces at most
// one reflector that failed, lost PoolConfig.MissLimit probes in a row,
// answers in contradiction with itself (see ReplaceInconsistent), or whose
// baseline round trip sits far above the others', and on the slow
// rotation schedule the longest-serving one, by the first spare that is not
// cooling down. While the pool is stalled (no reflector answers), losses
// are the link's, and no reflector is replaced for them. The set never
// shrinks: with no spare left, a bad reflector is kept (and logged once).
//
// Probes are staggered: reflector i of the N active ones is probed
// i×interval/N after the first, so probes never leave in bursts and the
// pool sends one probe every 1/Rate. A replacement takes the turn of the
// reflector it replaces. Paced targets (see Pacer) send at the Pace
// nearest their turn.
//
// A Pool implements controller.Prober: SetIdle(true) stops all probes,
// SetIdle(false) starts them again at once, staggered.
//
// Memory: a Pool's state is fixed at construction (one record per
// reflector of the list) and nothing in it grows with the number of
// probes, answers or losses.
type Pool struct {
	cfg       PoolConfig
	newTarget TargetFactory
	clock     Clock
	log       *zap.Logger
	onForget  func(name string)
	// slot is the time between two probes of the pool, interval the time
	// between two probes to one reflector.
	slot, interval time.Duration
	// notify wakes Run after SetIdle.
	notify chan struct{}
	// targets counts the target goroutines.
	targets sync.WaitGroup

	mu      sync.Mutex
	running bool
	runCtx  context.Context
	out     chan<- estimator.Sample
	// idle is what SetIdle asked for; probing is whether Run has targets
	// started or scheduled.
	idle, probing bool
	// epoch is when probing last (re)started: reflector i's turns come at
	// epoch + i×slot + k×interval.
	epoch time.Time
	// probeFrom is when probing last (re)started, as SetIdle or Run saw
	// it; lastAnswer is the send time of the newest answered probe.
	probeFrom, lastAnswer time.Time
	lastRotation          time.Time
	gen                   uint64 // numbers target runs; 0 is none
	slots                 []poolSlot
	spares                []poolSpare
	replaced              Replacements
	dropped               uint64
	// forget is the name of the reflector that left the active set at the
	// last check; onForget gets it at the next one, when the samples it
	// left in the channel have been taken.
	forget  string
	scratch []time.Duration // for the median baseline
}

// A poolSlot is one active reflector and the run of its Target.
type poolSlot struct {
	addr  netip.Addr
	name  string // addr.String(), set on every sample
	since time.Time

	gen     uint64 // of the current run, 0 when none
	running bool
	cancel  context.CancelFunc
	startAt time.Time // when its Target is due to start, zero if not
	failed  error     // why its Target could not be made or ended

	answered, lost, inconsistent uint64
	misses                       int
	// garbled counts the inconsistent answers in a row.
	garbled    int
	lastResult time.Time // newest send time of a result, or start
	baseline   estimator.Baseline
	method     Method
	keptLogged bool // "no spare" was logged for it
}

// A poolSpare is a reflector waiting for its turn.
type poolSpare struct {
	addr netip.Addr
	from time.Time // cooling down until then
}

// NewPool returns a Pool for cfg, whose zero fields take their defaults, or
// an error when cfg does not validate. newTarget makes the Targets; clock
// (nil: RealClock) schedules the starts and checks and must be the clock
// of the Targets' Result.Sent times; log (nil: no logging) gets one INFO
// line per replacement. onForget (may be nil) gets the name of each
// reflector that left the active set, one check after it left (so that its
// samples still in the channel are taken first). onForget runs on Run's
// goroutine and must not block or drop: the daemon adds the name to a set
// that its loop hands to Estimator.ForgetReflector at the next tick.
func NewPool(cfg PoolConfig, newTarget TargetFactory, clock Clock, log *zap.Logger, onForget func(name string)) (*Pool, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if newTarget == nil {
		return nil, errors.New("estimator: NewPool needs a TargetFactory")
	}
	cfg = cfg.withDefaults()
	if clock == nil {
		clock = RealClock{}
	}
	if log == nil {
		log = zap.NewNop()
	}
	p := &Pool{
		cfg:       cfg,
		newTarget: newTarget,
		clock:     clock,
		log:       log,
		onForget:  onForget,
		notify:    make(chan struct{}, 1),
		slots:     make([]poolSlot, cfg.Active),
		spares:    make([]poolSpare, 0, len(cfg.Reflectors)-cfg.Active),
		scratch:   make([]time.Duration, 0, cfg.Active),
	}
	p.slot, p.interval = cfg.spacing()
	for i, a := range cfg.Reflectors[:cfg.Active] {
		p.slots[i] = poolSlot{addr: a, name: a.String(), method: cfg.Method}
	}
	for _, a := range cfg.Reflectors[cfg.Active:] {
		p.spares = append(p.spares, poolSpare{addr: a})
	}
	return p, nil
}

// Config returns the configuration in effect, defaults applied.
func (p *Pool) Config() PoolConfig {
	c := p.cfg
	c.Reflectors = slices.Clone(c.Reflectors)
	return c
}

// Run probes until ctx ends, then stops every Target, waits for them and
// returns nil. It sends every sample of every answer to out, with the
// sample's Reflector set to the reflector's address as text (the name
// onForget gets).
//
// Samples are never waited for: when out is full, a sample is dropped and
// counted (PoolStats.Dropped). A Target's answers must not wait on the
// consumer: a paced Target (see Pacer) delivers them on the goroutine that
// paces it, which is often the consumer's own; a dropped sample is only a
// missing one. Give out room for a few
// control ticks' worth (Rate × tick × 2 samples for timestamps). Nothing
// is sent on out after Run returns, and out is not closed.
//
// Run returns an error at once when the pool is already running or out is
// nil.
func (p *Pool) Run(ctx context.Context, out chan<- estimator.Sample) error {
	if out == nil {
		return errors.New("estimator: pool needs a sample channel")
	}
	p.mu.Lock()
	if p.running {
		p.mu.Unlock()
		return errors.New("estimator: pool is already running")
	}
	now := p.clock.Now()
	p.running, p.runCtx, p.out = true, ctx, out
	p.probeFrom, p.lastRotation = now, now
	active := make([]netip.Addr, len(p.slots))
	for i := range p.slots {
		active[i] = p.slots[i].addr
	}
	spares := len(p.spares)
	p.mu.Unlock()
	p.log.Info("probing reflectors",
		zap.Stringers("reflectors", active),
		zap.Int("spares", spares),
		zap.Float64("interval_ms", poolMillis(p.interval)),
		zap.String("method", p.cfg.Method.String()))

	check, stopCheck := p.clock.NewTicker(p.cfg.CheckEvery)
	defer stopCheck()
	var wake poolWake
	defer wake.stop()
	defer p.shutdown()
	for {
		now := p.clock.Now()
		wake.arm(p.clock, now, p.reconcile(now))
		select {
		case <-ctx.Done():
			return nil
		case <-p.notify:
		case <-check:
			p.check(p.clock.Now())
		case <-wake.c:
			wake.stop()
		}
	}
}

// shutdown stops every Target and waits for them.
func (p *Pool) shutdown() {
	p.mu.Lock()
	for i := range p.slots {
		p.stopSlot(i)
	}
	p.running, p.probing, p.runCtx, p.out = false, false, nil, nil
	forget := p.forget
	p.forget = ""
	p.mu.Unlock()
	p.targets.Wait()
	if forget != "" && p.onForget != nil {
		p.onForget(forget)
	}
}

// reconcile stops or schedules the Targets after SetIdle and starts those
// that are due. It returns when the next one is due, zero if none is.
func (p *Pool) reconcile(now time.Time) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.idle && p.probing:
		for i := range p.slots {
			p.stopSlot(i)
		}
		p.probing = false
		p.log.Debug("probing paused")
	case !p.idle && !p.probing:
		p.probing, p.epoch = true, now
		for i := range p.slots {
			s := &p.slots[i]
			s.startAt = now.Add(time.Duration(i) * p.slot)
			s.misses, s.failed, s.keptLogged = 0, nil, false
		}
	}
	if !p.probing {
		return time.Time{}
	}
	var next time.Time
	for i := range p.slots {
		s := &p.slots[i]
		switch {
		case s.startAt.IsZero():
		case !s.startAt.After(now):
			p.startSlot(i, now)
		case next.IsZero() || s.startAt.Before(next):
			next = s.startAt
		}
	}
	return next
}

// startSlot makes and starts slot i's Target.
func (p *Pool) startSlot(i int, now time.Time) {
	s := &p.slots[i]
	s.startAt = time.Time{}
	t, err := p.newTarget(s.addr, p.cfg.Method, p.interval, p.cfg.Deadline)
	if err != nil {
		s.failed = fmt.Errorf("failed to make probe target for %s: %w", s.addr, err)
		p.log.Warn("cannot probe reflector", zap.String("reflector", s.name), zap.Error(err))
		return
	}
	p.gen++
	ctx, cancel := context.WithCancel(p.runCtx)
	s.gen, s.running, s.cancel, s.failed = p.gen, true, cancel, nil
	s.lastResult = now
	if s.since.IsZero() {
		s.since = now
	}
	p.targets.Add(1)
	go p.runTarget(ctx, i, s.gen, t)
}

// runTarget runs one Target and notes when it ends on its own.
func (p *Pool) runTarget(ctx context.Context, i int, gen uint64, t Target) {
	defer p.targets.Done()
	err := t.Run(ctx, func(r Result) { p.deliver(i, gen, r) })
	if ctx.Err() != nil {
		return // stopped by the pool
	}
	if err == nil {
		err = errors.New("probe target stopped")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	s := &p.slots[i]
	if s.gen != gen {
		return
	}
	p.stopSlot(i)
	s.failed = err
	p.log.Warn("probe target failed", zap.String("reflector", s.name), zap.Error(err))
}

// stopSlot stops slot i's Target, if any, and cancels a scheduled start.
// Results of the stopped run are ignored from now on.
func (p *Pool) stopSlot(i int) {
	s := &p.slots[i]
	if s.cancel != nil {
		s.cancel()
	}
	s.gen, s.running, s.cancel, s.startAt = 0, false, nil, time.Time{}
}

// deliver takes one Result of run gen of slot i.
func (p *Pool) deliver(i int, gen uint64, r Result) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := &p.slots[i]
	if gen == 0 || s.gen != gen {
		return // a run the pool has stopped
	}
	if r.Sent.After(s.lastResult) {
		s.lastResult = r.Sent
	}
	if r.Lost {
		s.lost++
		s.misses++
		return
	}
	if r.Inconsistent {
		// It answers, but what it says is of no use.
		s.answered++
		s.inconsistent++
		s.misses = 0
		s.garbled++
		return
	}
	n := min(max(r.N, 0), len(r.Samples))
	if n == 0 {
		return
	}
	s.answered++
	s.misses, s.garbled = 0, 0
	if r.Sent.After(p.lastAnswer) {
		p.lastAnswer = r.Sent
	}
	var rtt, oneWay time.Duration
	var rtts, ways int
	for _, smp := range r.Samples[:n] {
		switch smp.Kind {
		case estimator.RTT:
			rtt, rtts = smp.Delay, rtts+1
		case estimator.OWDUp, estimator.OWDDown:
			oneWay, ways = oneWay+smp.Delay, ways+1
		}
		smp.Reflector = s.name
		select {
		case p.out <- smp:
		default:
			p.dropped++
		}
	}
	// One-way delays carry the clocks' offset with opposite signs, so their
	// sum is a round trip (modulo a day, which the baseline folds).
	switch {
	case rtts == 1:
		s.method = Echo
		s.baseline.Update(rtt, r.Sent, poolRiseTau, poolFallWeight)
	case ways == 2:
		s.method = Timestamp
		s.baseline.Update(oneWay, r.Sent, poolRiseTau, poolFallWeight)
	}
}

// check runs the health check at now and hands the reflector that left at
// the previous check to onForget.
func (p *Pool) check(now time.Time) {
	p.mu.Lock()
	forget := p.forget
	p.forget = ""
	if p.probing {
		p.forget = p.checkLocked(now)
	}
	p.mu.Unlock()
	if forget != "" && p.onForget != nil {
		p.onForget(forget)
	}
}

// checkLocked replaces at most one reflector and returns the name of the
// one that left, "" if none did.
func (p *Pool) checkLocked(now time.Time) string {
	median, haveMedian := p.medianBaseline()
	// When no reflector answers, the link is down, not the reflectors:
	// replacing them would only churn through the spares. Likewise when
	// none answers consistently: then the fault is our clock.
	stalled := p.stateLocked() == PoolStalled
	worst, reason := -1, ReplaceFailed
	for i := range p.slots {
		s := &p.slots[i]
		r, bad := p.judge(s, now, median, haveMedian)
		if bad && (r == ReplaceLost || (r == ReplaceInconsistent && s.garbled > 0)) && stalled {
			bad = false
		}
		if !bad {
			s.keptLogged = false
			continue
		}
		if worst < 0 || r < reason || (r == reason && s.misses > p.slots[worst].misses) {
			worst, reason = i, r
		}
	}
	if worst < 0 && p.cfg.Rotate > 0 && now.Sub(p.lastRotation) >= p.cfg.Rotate {
		p.lastRotation = now
		for i := range p.slots {
			s := &p.slots[i]
			if s.since.IsZero() {
				continue
			}
			if worst < 0 || s.since.Before(p.slots[worst].since) {
				worst, reason = i, ReplaceRotate
			}
		}
	}
	if worst < 0 {
		return ""
	}
	s := &p.slots[worst]
	j := p.spareAt(now)
	if j < 0 {
		switch {
		case reason == ReplaceRotate:
			p.log.Debug("no spare reflector to rotate in", zap.String("reflector", s.name))
		case !s.keptLogged:
			s.keptLogged = true
			p.log.Warn("no spare reflector: keeping a bad one",
				zap.String("reflector", s.name),
				zap.String("reason", reason.String()),
				zap.Int("spares_cooling", len(p.spares)))
		}
		if reason == ReplaceFailed {
			// A dead Target helps no one: try it again.
			p.stopSlot(worst)
			s.failed, s.misses = nil, 0
			s.startAt = p.nextTurn(worst, now)
		}
		return ""
	}
	return p.replace(worst, j, reason, now, median)
}

// judge says whether s must be replaced, and why.
func (p *Pool) judge(s *poolSlot, now time.Time, median time.Duration, haveMedian bool) (ReplaceReason, bool) {
	base, hasBase := s.baseline.Value()
	switch {
	case s.failed != nil:
		return ReplaceFailed, true
	case !s.running:
		return 0, false // its start is due
	case s.misses >= p.cfg.MissLimit:
		return ReplaceLost, true
	case now.Sub(s.lastResult) > p.cfg.Deadline+time.Duration(p.cfg.MissLimit+1)*p.interval:
		return ReplaceLost, true // its Target reports nothing, not even losses
	case s.garbled >= p.cfg.MissLimit:
		return ReplaceInconsistent, true
	case hasBase && (base < -timestampSlack || base > p.cfg.Deadline+timestampSlack):
		// A round trip below zero, or longer than any answer may take:
		// one-way delays that add up to no round trip at all. (One far
		// below the others' is possible, from a closer reflector; one far
		// above is judged next.)
		return ReplaceInconsistent, true
	case haveMedian && hasBase && now.Sub(s.since) >= poolWarmup &&
		base > time.Duration(float64(median)*p.cfg.BaselineFactor)+p.cfg.BaselineMargin:
		return ReplaceBaseline, true
	}
	return 0, false
}

// medianBaseline returns the lower median of the active reflectors'
// baselines, and whether at least two have one: with the lower median, fewer
// than half of the reflectors reading high cannot move it.
func (p *Pool) medianBaseline() (time.Duration, bool) {
	p.scratch = p.scratch[:0]
	for i := range p.slots {
		if b, ok := p.slots[i].baseline.Value(); ok {
			p.scratch = append(p.scratch, b)
		}
	}
	if len(p.scratch) < 2 {
		return 0, false
	}
	slices.Sort(p.scratch)
	return p.scratch[(len(p.scratch)-1)/2], true
}

// spareAt returns the index of the first spare not cooling down at now, -1
// if there is none.
func (p *Pool) spareAt(now time.Time) int {
	for j, sp := range p.spares {
		if !sp.from.After(now) {
			return j
		}
	}
	return -1
}

// replace puts spare j in slot i's place, in slot i's turn, and sends slot
// i's reflector to the end of the spares. It returns the name of the
// reflector that left.
func (p *Pool) replace(i, j int, reason ReplaceReason, now time.Time, median time.Duration) string {
	s := &p.slots[i]
	in := p.spares[j].addr
	fields := []zap.Field{
		zap.String("reflector", s.name),
		zap.String("reason", reason.String()),
		zap.String("replacement", in.String()),
		zap.Int("misses", s.misses),
		zap.Uint64("answered", s.answered),
		zap.Uint64("lost", s.lost),
		zap.Uint64("inconsistent", s.inconsistent),
		zap.Float64("active_s", now.Sub(s.since).Seconds()),
	}
	if base, ok := s.baseline.Value(); ok {
		fields = append(fields, zap.Float64("baseline_ms", poolMillis(base)), zap.Float64("median_baseline_ms", poolMillis(median)))
	}
	if s.failed != nil {
		fields = append(fields, zap.Error(s.failed))
	}
	p.log.Info("replacing reflector", fields...)

	p.stopSlot(i)
	out := s.name
	p.spares = slices.Delete(p.spares, j, j+1)
	p.spares = append(p.spares, poolSpare{addr: s.addr, from: now.Add(p.cfg.Cooldown)})
	*s = poolSlot{addr: in, name: in.String(), method: p.cfg.Method, startAt: p.nextTurn(i, now)}
	switch reason {
	case ReplaceFailed:
		p.replaced.Failed++
	case ReplaceLost:
		p.replaced.Lost++
	case ReplaceInconsistent:
		p.replaced.Inconsistent++
	case ReplaceBaseline:
		p.replaced.Baseline++
	case ReplaceRotate:
		p.replaced.Rotate++
	}
	return out
}

// nextTurn returns slot i's first turn at or after now.
func (p *Pool) nextTurn(i int, now time.Time) time.Time {
	t := p.epoch.Add(time.Duration(i) * p.slot)
	if !t.Before(now) {
		return t
	}
	k := (now.Sub(t) + p.interval - 1) / p.interval
	return t.Add(k * p.interval)
}

// SetIdle pauses probing (idle) or resumes it; it implements
// controller.Prober. Pausing stops every Target (their contexts end);
// resuming starts the first at once and the others staggered within one
// probe interval. It never blocks on Run, and may be called before Run: a
// pool idle when Run starts starts no Target.
func (p *Pool) SetIdle(idle bool) {
	p.mu.Lock()
	if p.idle != idle {
		p.idle = idle
		if !idle {
			// Give the resumed probes StallAfter to be answered.
			p.probeFrom = p.clock.Now()
		}
	}
	p.mu.Unlock()
	select {
	case p.notify <- struct{}{}:
	default: // Run has a wake-up pending already
	}
}

// Stalled reports whether the pool runs, is not idle, and no reflector
// answered a probe sent within PoolConfig.StallAfter (counted from when
// probing last started, if later).
func (p *Pool) Stalled() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stateLocked() == PoolStalled
}

// State returns what the pool is doing.
func (p *Pool) State() PoolState {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stateLocked()
}

func (p *Pool) stateLocked() PoolState {
	switch {
	case !p.running:
		return PoolStopped
	case p.idle:
		return PoolIdle
	}
	last := p.lastAnswer
	if last.Before(p.probeFrom) {
		last = p.probeFrom
	}
	if p.clock.Now().Sub(last) > p.cfg.StallAfter {
		return PoolStalled
	}
	return PoolProbing
}

// Active returns the active reflectors, in the order of their turns.
func (p *Pool) Active() []netip.Addr {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]netip.Addr, len(p.slots))
	for i := range p.slots {
		out[i] = p.slots[i].addr
	}
	return out
}

// Stats returns the pool's state and counters.
func (p *Pool) Stats() PoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := PoolStats{
		State:        p.stateLocked(),
		Reflectors:   make([]ReflectorStats, len(p.slots)),
		Spares:       make([]netip.Addr, len(p.spares)),
		Replacements: p.replaced,
		Dropped:      p.dropped,
	}
	for i := range p.slots {
		s := &p.slots[i]
		base, _ := s.baseline.Value()
		st.Reflectors[i] = ReflectorStats{
			Addr:         s.addr,
			Since:        s.since,
			Answered:     s.answered,
			Lost:         s.lost,
			Misses:       s.misses,
			Inconsistent: s.inconsistent,
			Baseline:     base,
			Method:       s.method,
		}
	}
	for j, sp := range p.spares {
		st.Spares[j] = sp.addr
	}
	return st
}

// A poolWake is the one-shot timer of Run's next Target start, made of a
// ticker that is stopped when it fires (a Clock has only tickers).
type poolWake struct {
	c    <-chan time.Time
	halt func()
	at   time.Time
}

// arm sets the timer for at (zero: none), keeping it when it is set for at
// already.
func (w *poolWake) arm(clock Clock, now, at time.Time) {
	if at.Equal(w.at) && (w.c != nil) == !at.IsZero() {
		return
	}
	w.stop()
	if at.IsZero() {
		return
	}
	w.at = at
	w.c, w.halt = clock.NewTicker(max(at.Sub(now), time.Nanosecond))
}

// stop stops the timer.
func (w *poolWake) stop() {
	if w.halt != nil {
		w.halt()
	}
	w.c, w.halt, w.at = nil, nil, time.Time{}
}

// poolMillis returns d in milliseconds.
func poolMillis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
