package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/autoshape/autoshape/actuator"
	"github.com/autoshape/autoshape/config"
	"github.com/autoshape/autoshape/controller"
	"github.com/autoshape/autoshape/estimator"
	"github.com/autoshape/autoshape/policies"
	"github.com/autoshape/autoshape/probe"
)

// A linkRunner runs one link: its shapers, probes, estimator and controller.
type linkRunner struct {
	cfg     config.Link
	opts    Options
	log     *zap.Logger
	metrics *Metrics
	dec     *RecordFile // shared by every link

	cancel context.CancelFunc
	done   chan struct{}
	failed chan<- error

	mu      sync.Mutex
	rates   [2]float64 // last written, for the state file
	shaping Shaping    // nil in a dry run and until it is set up
	pool    *probe.Pool
}

func (d *Daemon) newLinkRunner(l config.Link) *linkRunner {
	return &linkRunner{cfg: l, opts: d.opts, log: d.log.With(zap.String("link", l.Name)),
		metrics: d.metrics, dec: d.decisions, failed: d.failed}
}

// start runs the link in the background, from the saved rates if any.
func (r *linkRunner) start(parent context.Context, saved linkState) {
	ctx, cancel := context.WithCancel(parent)
	r.cancel = cancel
	r.done = make(chan struct{})
	// Until its first tick the link is where it starts from: a stop before
	// then (a SIGTERM while a reloaded link still sets its shaping up)
	// keeps the saved rates in the state file, not zeros.
	r.mu.Lock()
	r.rates[estimator.Down], r.rates[estimator.Up] = saved.DownKbit*1000, saved.UpKbit*1000
	r.mu.Unlock()
	r.metrics.AddLink(r.cfg.Name)
	go func() {
		defer close(r.done)
		if err := r.run(ctx, saved); err != nil {
			r.log.Error("link stopped", zap.Error(err))
			select {
			case r.failed <- fmt.Errorf("link %s: %w", r.cfg.Name, err):
			default:
			}
		}
	}()
}

// stop ends the link and leaves its shapers at base (or removes them) and
// returns what the state file keeps of it.
func (r *linkRunner) stop(remove bool) linkState {
	r.cancel()
	<-r.done
	st := r.snapshot()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.shaping == nil {
		return st
	}
	if remove {
		if err := r.shaping.Remove(); err != nil {
			r.log.Error("failed to remove the shaping", zap.Error(err))
		} else {
			r.log.Info("removed the shaping")
		}
	} else {
		shapers := r.shaping.Shapers()
		for _, d := range estimator.Directions {
			base := r.cfg.Directions[d].Bounds.Base
			if _, err := shapers[d].SetRate(context.Background(), uint64(base)); err != nil {
				r.log.Error("failed to leave the shaper at its base rate", zap.String("dir", d.String()), zap.Error(err))
			} else {
				r.log.Info("left the shaper at its base rate", zap.String("dir", d.String()), zap.Int64("rate_kbit", kbit(base)))
			}
		}
		r.shaping.Close()
	}
	r.shaping = nil
	return st
}

func (r *linkRunner) snapshot() linkState {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := linkState{DownKbit: r.rates[estimator.Down] / 1000, UpKbit: r.rates[estimator.Up] / 1000}
	if r.pool != nil {
		for _, a := range r.pool.Active() {
			st.Reflectors = append(st.Reflectors, a.String())
		}
	}
	return st
}

// shapers sets the link's shaping up (or finds it, in attach mode), waiting
// with a capped backoff while the interface or the qdiscs are missing. A
// root qdisc that autoshape did not create, in setup mode without replace,
// ends the link: waiting will not remove it.
func (r *linkRunner) shapers(ctx context.Context) ([2]controller.Shaper, error) {
	if r.opts.DryRun {
		return [2]controller.Shaper{
			estimator.Down: &dryShaper{iface: r.cfg.Interface, rx: true},
			estimator.Up:   &dryShaper{iface: r.cfg.Interface},
		}, nil
	}
	backoff := 500 * time.Millisecond
	for {
		var s Shaping
		var err error
		if r.cfg.Attach {
			s, err = r.opts.Kernel.Attach(r.cfg.Interface, r.cfg.IFB)
		} else {
			// Setup replaces what a crash or a vanished interface left
			// of autoshape's own shaping.
			s, err = r.opts.Kernel.Setup(actuator.SetupConfig{
				Iface: r.cfg.Interface, IFB: r.cfg.IFB, Backend: r.cfg.Backend,
				Up: uint64(r.cfg.Directions[estimator.Up].Bounds.Base), Down: uint64(r.cfg.Directions[estimator.Down].Bounds.Base),
				Framing: r.cfg.Framing, Replace: r.cfg.Replace,
			})
		}
		if err == nil {
			r.mu.Lock()
			r.shaping = s
			r.mu.Unlock()
			return s.Shapers(), nil
		}
		if errors.Is(err, actuator.ErrForeignQdisc) {
			return [2]controller.Shaper{}, fmt.Errorf("%w; autoshape left it as it is: set replace = true in this [[link]] to replace it", err)
		}
		if actuator.IsPermission(err) || errors.Is(err, actuator.ErrNotSupported) {
			return [2]controller.Shaper{}, err // waiting will not help
		}
		r.log.Warn("shaping not ready, retrying", zap.Error(err), zap.Duration("retry_in", backoff))
		if err := sleep(ctx, r.opts.Clock, backoff); err != nil {
			return [2]controller.Shaper{}, err
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

// sleep waits d on clock, or until ctx ends.
func sleep(ctx context.Context, clock probe.Clock, d time.Duration) error {
	c, stop := clock.NewTicker(d)
	defer stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-c:
		return nil
	}
}

// run sets the link up and runs its loop until ctx ends.
func (r *linkRunner) run(ctx context.Context, saved linkState) error {
	shapers, err := r.shapers(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	l, err := r.newLoop(shapers, saved)
	if err != nil {
		return err
	}
	return l.run(ctx)
}

// A linkLoop is one run of a link's loop: samples into the estimator, a
// controller tick at the configured tick, decisions logged, recovery when
// the interface or its qdiscs go away. The runner's shaping and pool are
// set before it starts and cleared only after it ended.
type linkLoop struct {
	*linkRunner
	pacer   *probe.Pacer
	shapers [2]controller.Shaper
	est     *estimator.Estimator
	ctrl    *controller.Controller
	forgets forgets

	watch          *shapingWatch
	checkEvery     time.Duration
	nextCheck      time.Time
	sum            *summary
	events         eventLog
	failing        bool // the last tick failed to apply a rate
	nextReflectors time.Time
	state          controller.State // as of the last tick
	stateFrom      time.Time        // when the link entered state
}

// newLoop builds the link's estimator, probe pool and controller, starting
// from the saved rates and reflectors.
func (r *linkRunner) newLoop(shapers [2]controller.Shaper, saved linkState) (*linkLoop, error) {
	est, err := estimator.New(estimator.Config{Budget: r.cfg.Budget})
	if err != nil {
		return nil, err
	}
	l := &linkLoop{linkRunner: r, shapers: shapers, est: est,
		watch: &shapingWatch{log: r.log}, checkEvery: time.Second, sum: newSummary()}
	// Reflectors the last run had active go first.
	reflectors := r.cfg.Reflectors
	if len(reflectors) == 0 {
		reflectors = probe.DefaultReflectors
	}
	reflectors = preferSaved(reflectors, saved.Reflectors)
	// The link's targets are paced from its loop, just before each
	// control step (see probe.Pacer).
	l.pacer = probe.NewPacer(r.opts.Tick)
	targets := r.opts.Targets
	if targets == nil {
		targets = probe.NewTargetFactory(probe.TargetOptions{Logger: r.log, Device: r.cfg.Interface, Pacer: l.pacer})
	}
	pool, err := probe.NewPool(probe.PoolConfig{
		Reflectors: reflectors, Active: r.cfg.ActiveReflectors, Rate: r.cfg.ProbeRate, Method: r.cfg.Method,
	}, targets, r.opts.Clock, r.log, l.forgets.add)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.pool = pool
	r.mu.Unlock()

	var pols [2]policies.Policy
	ccfg := controller.Config{Link: r.cfg.Name, Tick: r.opts.Tick, Now: r.opts.Clock.Now}
	for _, d := range estimator.Directions {
		ccfg.Directions[d] = r.cfg.Directions[d]
		if pols[d], err = config.NewPolicy(r.cfg, d); err != nil {
			return nil, err
		}
	}
	r.log.Info("controlling the link", zap.String("policy", pols[estimator.Down].Name()),
		zap.Float64("budget_ms", float64(r.cfg.Budget)/float64(time.Millisecond)))
	if l.ctrl, err = controller.New(ccfg, est, shapers, pols, pool); err != nil {
		return nil, err
	}
	l.ctrl.Restore([2]float64{estimator.Down: saved.DownKbit * 1000, estimator.Up: saved.UpKbit * 1000})
	return l, nil
}

// run probes, ticks and checks until ctx ends or the probes stop.
func (l *linkLoop) run(ctx context.Context) error {
	samples := make(chan estimator.Sample, 256)
	poolDone := make(chan error, 1)
	go func() { poolDone <- l.pool.Run(ctx, samples) }()
	period := l.opts.Tick
	tick, stopTick := l.opts.Clock.NewTicker(period)
	defer func() { stopTick() }()
	for {
		select {
		case <-ctx.Done():
			<-poolDone
			return nil
		case err := <-poolDone:
			if ctx.Err() != nil {
				// Stopped (a reload or the end), the pool returned before
				// the loop saw ctx end: not a failure.
				return nil
			}
			return fmt.Errorf("probes stopped: %w", err)
		case s := <-samples:
			l.ctrl.AddSample(s)
		case now := <-tick:
			// The answers that came since the last tick, first.
			l.pacer.Pace()
			takeSamples(samples, l.ctrl.AddSample)
			// Every second or so, on a tick, the shaping is compared with
			// what the kernel holds: what someone deleted of autoshape's
			// is made again (and this tick writes its rate), what someone
			// put in its place is left alone, and each is logged once.
			if l.shaping != nil {
				l.onCheck(now)
			}
			l.onTick(ctx, now)
			// An idle link ticks slowly: its probes are paused and only
			// load coming back needs noticing.
			if p := l.tickPeriod(); p != period {
				stopTick()
				period = p
				tick, stopTick = l.opts.Clock.NewTicker(p)
			}
		}
	}
}

// takeSamples hands add the samples waiting in c.
func takeSamples(c <-chan estimator.Sample, add func(estimator.Sample)) {
	for {
		select {
		case s := <-c:
			add(s)
		default:
			return
		}
	}
}

// idleCheckEvery and activeCheckEvery are how often the shaping of an
// idle and of an active link are compared with the kernel's; otherwise
// (starting, stalled) it is every second.
const (
	idleCheckEvery   = 5 * time.Second
	activeCheckEvery = 3 * time.Second
)

// tickPeriod is the control interval for the controller's state.
func (l *linkLoop) tickPeriod() time.Duration {
	if l.ctrl.State() == controller.Idle {
		return max(controller.IdleTick, l.opts.Tick)
	}
	return l.opts.Tick
}

// onCheck compares the shaping with the kernel's, at most every
// checkEvery, and makes the tick that follows write the rates again when
// the check made or attached to a root.
func (l *linkLoop) onCheck(now time.Time) {
	if now.Before(l.nextCheck) {
		return
	}
	drifts, err := l.shaping.Check()
	if l.watch.report(drifts, err) {
		// A root made again or another attached to holds some rate: the
		// next tick writes the controller's.
		l.ctrl.Reattach(l.shapers)
	}
	// While the interface is away, look less often; while the link is
	// idle too, as a shaping rebuilt then has nothing to shape yet. While
	// it is active, every tick reads both roots' counters with a request
	// that fails when the root is no longer autoshape's (or the IFB is
	// gone), and a failing tick brings the check forward (onTick): the
	// check has only what those reads do not see to find, a class, the
	// ingress qdisc or the redirect gone.
	switch {
	case err != nil:
		l.checkEvery = min(2*l.checkEvery, 10*time.Second)
	case l.ctrl.State() == controller.Idle:
		l.checkEvery = idleCheckEvery
	case l.ctrl.State() == controller.Active:
		l.checkEvery = activeCheckEvery
	default:
		l.checkEvery = time.Second
	}
	l.nextCheck = now.Add(l.checkEvery)
}

// onTick runs one control step and reports it: decisions, rates for the
// state file, metrics, the minute's summary and failures to apply.
func (l *linkLoop) onTick(ctx context.Context, now time.Time) {
	l.forgets.drain(l.est.ForgetReflector)
	decs, err := l.ctrl.Tick(ctx, now)
	for _, dec := range decs {
		l.record(dec, l.events.info(dec))
		l.sum.decision(dec)
	}
	l.mu.Lock()
	for _, d := range estimator.Directions {
		l.rates[d] = l.ctrl.Rate(d)
	}
	l.mu.Unlock()
	for _, d := range estimator.Directions {
		l.metrics.Observe(l.cfg.Name, l.ctrl.Observation(d), l.ctrl.Rate(d))
		l.sum.add(l.ctrl.Observation(d))
	}
	l.metrics.SetState(l.cfg.Name, l.ctrl.State())
	l.logState(now)
	if now.After(l.nextReflectors) {
		l.metrics.Reflectors(l.cfg.Name, l.pool.Stats())
		l.nextReflectors = now.Add(5 * time.Second)
	}
	if l.sum.due(now) {
		l.sum.log(l.log, now, l.ctrl, len(l.pool.Active()))
	}
	// One line per stretch of failures: the check says why, and what it
	// did.
	if err != nil && !l.failing {
		l.log.Warn("failed to apply a rate", zap.Error(err))
		// The check, at the next tick, says why and mends what is
		// autoshape's.
		l.nextCheck = now
	}
	l.failing = err != nil
}

// logState writes one line when the link enters or leaves idle or stall,
// with how long it was in the state it left.
func (l *linkLoop) logState(now time.Time) {
	if l.stateFrom.IsZero() {
		l.stateFrom = now
	}
	st := l.ctrl.State()
	if st == l.state {
		return
	}
	l.log.Info("state changed", zap.String("state", st.String()), zap.String("from", l.state.String()),
		zap.Float64("from_s", tenths(now.Sub(l.stateFrom).Seconds())))
	l.state, l.stateFrom = st, now
}

// eventEvery is how often, per direction, a rate change that is an event
// (a cut, a drop, a stall, a start) may be logged at INFO; those in between
// go to DEBUG, and the minute's summary counts the cuts. A link whose
// capacity keeps moving cuts several times a second: logged at INFO, its
// cuts would flush a router's 64 KiB log ring within minutes.
const eventEvery = 10 * time.Second

// An eventLog says which of a link's decisions are logged at INFO: no
// gradual step, and an event only when none was, in its direction, for
// eventEvery.
type eventLog struct {
	last [2]time.Time
}

// info reports whether d is logged at INFO, and if so notes it.
func (e *eventLog) info(d controller.Decision) bool {
	if d.Gradual() {
		return false
	}
	if last := e.last[d.Direction]; !last.IsZero() && d.Time.Sub(last) < eventEvery {
		return false
	}
	e.last[d.Direction] = d.Time
	return true
}

// record logs a decision, one line with its reasons, at INFO or DEBUG (see
// eventLog), counts it and appends it to the decision file, which says
// itself (at most once a minute) when it cannot. Every decision is in the
// decision file and the metrics.
func (r *linkRunner) record(d controller.Decision, info bool) {
	if info {
		r.log.Info("rate change", zap.Inline(d))
	} else {
		r.log.Debug("rate change", zap.Inline(d))
	}
	r.metrics.Decision(d)
	if r.dec != nil {
		_ = r.dec.Write(d)
	}
}

// forgets holds the reflectors that the pool let go until the loop tells
// the estimator, on its own goroutine. It is a set: it loses none, and
// holds at most one entry per reflector.
type forgets struct {
	mu    sync.Mutex
	names map[string]bool
}

// add notes that the estimator may forget name. The pool calls it.
func (f *forgets) add(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.names == nil {
		f.names = map[string]bool{}
	}
	f.names[name] = true
}

// drain hands every name noted since the last drain to forget.
func (f *forgets) drain(forget func(name string)) {
	f.mu.Lock()
	names := f.names
	f.names = nil
	f.mu.Unlock()
	for name := range names {
		forget(name)
	}
}

// preferSaved moves the saved active reflectors to the front, in order.
func preferSaved(all []netip.Addr, saved []string) []netip.Addr {
	if len(saved) == 0 {
		return all
	}
	var first, rest []netip.Addr
	for _, a := range all {
		if slices.Contains(saved, a.String()) {
			first = append(first, a)
		} else {
			rest = append(rest, a)
		}
	}
	return append(first, rest...)
}
