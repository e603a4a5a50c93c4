package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sys/unix"

	"github.com/autoshape/autoshape/actuator"
	"github.com/autoshape/autoshape/config"
	"github.com/autoshape/autoshape/controller"
	"github.com/autoshape/autoshape/estimator"
	"github.com/autoshape/autoshape/policies"
	"github.com/autoshape/autoshape/probe"
)

// runCmd is `autoshape run -c FILE [--dry-run]`: the daemon.
func runDaemon(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("c", "", "configuration file (see `autoshape config default`)")
	dry := fs.Bool("dry-run", false, "compute and log every decision without touching any qdisc")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *path == "" {
		return usagef("-c FILE is required")
	}
	cfg, err := config.Load(*path)
	if err != nil {
		return usageError{err}
	}
	log, level := newLevelLogger(cfg.LogLevel, stderr)
	defer log.Sync()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	d := &daemon{path: *path, dryRun: *dry, log: log, level: level, version: version}
	return d.run(ctx, cfg, hup)
}

// newLogger logs to w: console lines on a terminal, JSON otherwise (for
// journald and syslog).
func newLogger(level string, w io.Writer) *zap.Logger {
	log, _ := newLevelLogger(level, w)
	return log
}

// newLevelLogger is newLogger with a level that a reload can change.
func newLevelLogger(level string, w io.Writer) (*zap.Logger, zap.AtomicLevel) {
	lvl := zap.NewAtomicLevel()
	_ = lvl.UnmarshalText([]byte(level))
	encCfg := zap.NewProductionEncoderConfig()
	encCfg.TimeKey = "time"
	encCfg.EncodeTime = zapcore.ISO8601TimeEncoder
	var enc zapcore.Encoder = zapcore.NewJSONEncoder(encCfg)
	if f, ok := w.(*os.File); ok && isTerminal(f) {
		encCfg.EncodeLevel = zapcore.CapitalLevelEncoder
		enc = zapcore.NewConsoleEncoder(encCfg)
	}
	return zap.New(zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(w)), lvl)), lvl
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// A daemon runs every configured link until it is told to stop.
type daemon struct {
	path    string
	dryRun  bool
	log     *zap.Logger
	level   zap.AtomicLevel // the log's: a reload changes it
	version string

	// metrics are fed whether or not they are served: a reload may start
	// or move the server.
	metrics *Metrics
	server  *metricsServer
	// decisions is the one decision file every link writes to.
	decisions *controller.RecordFile

	mu     sync.Mutex
	links  map[string]*linkRunner // by interface
	state  stateFile
	failed chan error // a link that cannot go on
}

// run starts the links, reloads on SIGHUP, and on cancellation leaves the
// shapers at a safe rate (or removes what it set up) and saves the state.
func (d *daemon) run(ctx context.Context, cfg config.Config, hup <-chan os.Signal) error {
	d.links = map[string]*linkRunner{}
	d.failed = make(chan error, 1)
	d.state = loadState(cfg.StateFile, d.log)
	d.log.Info("starting", zap.String("version", d.version), zap.Int("links", len(cfg.Links)), zap.Bool("dry_run", d.dryRun))
	reg := prometheus.NewRegistry()
	d.metrics = NewMetrics(reg, d.version)
	d.server = &metricsServer{reg: reg, log: d.log}
	if err := d.server.serve(ctx, cfg.MetricsListen); err != nil {
		return err
	}
	defer d.server.stop()
	d.decisions = controller.NewRecordFile(controller.RecordFileConfig{
		Path: cfg.Decisions, MaxBytes: int64(cfg.DecisionsMaxMB) << 20, Logger: d.log,
	})
	d.apply(ctx, cfg)

	save := time.NewTicker(time.Minute)
	defer save.Stop()
	for {
		select {
		case <-ctx.Done():
			d.shutdown(cfg)
			return nil
		case err := <-d.failed:
			// A link that cannot be shaped (no CAKE in the kernel, no
			// privileges) ends the daemon with an error, so that the
			// service manager sees it, rather than idling for ever.
			d.shutdown(cfg)
			return err
		case <-hup:
			next, err := config.Load(d.path)
			if err != nil {
				d.log.Error("reload refused: keeping the running configuration", zap.Error(err))
				continue
			}
			d.log.Info("reloading", zap.String("config", d.path))
			d.reconfigure(ctx, cfg, next)
			d.apply(ctx, next)
			cfg = next
		case <-save.C:
			d.saveState(cfg.StateFile)
		}
	}
}

// reconfigure applies what a reload changed of the settings that are not a
// link's: the log level, the metrics server's address and the decision
// file. Every link, changed or not, writes its next decision to the new
// file.
func (d *daemon) reconfigure(ctx context.Context, cur, next config.Config) {
	if next.LogLevel != cur.LogLevel {
		if err := d.level.UnmarshalText([]byte(next.LogLevel)); err != nil {
			d.log.Error("failed to change the log level", zap.String("level", next.LogLevel), zap.Error(err))
		}
		d.log.Info("log level changed", zap.String("from", cur.LogLevel), zap.String("to", next.LogLevel))
	}
	// Against what is served, so that a move that failed is tried again.
	if next.MetricsListen != d.server.addr {
		if err := d.server.serve(ctx, next.MetricsListen); err != nil {
			d.log.Error("failed to move the metrics server", zap.String("listen", next.MetricsListen),
				zap.String("still_listening", d.server.addr), zap.Error(err))
		} else {
			d.log.Info("metrics server moved", zap.String("to", next.MetricsListen))
		}
	}
	if next.Decisions != cur.Decisions || next.DecisionsMaxMB != cur.DecisionsMaxMB {
		d.decisions.Configure(next.Decisions, int64(next.DecisionsMaxMB)<<20)
		d.log.Info("decision file changed", zap.String("path", next.Decisions), zap.Int("max_mb", next.DecisionsMaxMB))
	}
}

// apply makes the running links match cfg: new links start, removed ones
// stop as on exit, changed ones restart from the rates they had reached.
func (d *daemon) apply(ctx context.Context, cfg config.Config) {
	d.mu.Lock()
	defer d.mu.Unlock()
	want := map[string]config.Link{}
	for _, l := range cfg.Links {
		want[l.Interface] = l
	}
	for name, r := range d.links {
		if l, ok := want[name]; ok && linkEqual(l, r.cfg) {
			continue
		}
		d.state.Links[r.cfg.Name] = r.stop(cfg.RemoveOnExit && !r.cfg.Attach)
		delete(d.links, name)
	}
	for _, l := range cfg.Links {
		if _, ok := d.links[l.Interface]; ok {
			continue
		}
		r := newLinkRunner(l, d.dryRun, d.log.With(zap.String("link", l.Name)), d.metrics, d.decisions)
		r.failed = d.failed
		r.start(ctx, d.state.Links[l.Name])
		d.links[l.Interface] = r
	}
}

func linkEqual(a, b config.Link) bool {
	return a.Name == b.Name && a.Interface == b.Interface && a.IFB == b.IFB && a.Backend == b.Backend &&
		a.Attach == b.Attach && a.Replace == b.Replace && a.Budget == b.Budget && a.Policy == b.Policy && a.Framing == b.Framing && a.Directions == b.Directions &&
		a.Method == b.Method && slices.Equal(a.Reflectors, b.Reflectors) &&
		a.ActiveReflectors == b.ActiveReflectors && a.ProbeRate == b.ProbeRate
}

// shutdown stops every link as configured and saves the state.
func (d *daemon) shutdown(cfg config.Config) {
	d.mu.Lock()
	for name, r := range d.links {
		d.state.Links[r.cfg.Name] = r.stop(cfg.RemoveOnExit && !r.cfg.Attach)
		delete(d.links, name)
	}
	d.mu.Unlock()
	d.saveState(cfg.StateFile)
	d.log.Info("stopped")
}

func (d *daemon) saveState(path string) {
	d.mu.Lock()
	for _, r := range d.links {
		d.state.Links[r.cfg.Name] = r.snapshot()
	}
	st := d.state
	d.mu.Unlock()
	if err := st.save(path); err != nil {
		d.log.Error("failed to save the state", zap.String("path", path), zap.Error(err))
	}
}

// A linkRunner runs one link: its shapers, probes, estimator and controller.
type linkRunner struct {
	cfg     config.Link
	dryRun  bool
	log     *zap.Logger
	metrics *Metrics
	dec     *controller.RecordFile // shared by every link

	cancel context.CancelFunc
	done   chan struct{}
	failed chan<- error

	mu    sync.Mutex
	rates [2]float64 // last written, for the state file
	link  *actuator.Link
	pool  *probe.Pool
}

func newLinkRunner(l config.Link, dry bool, log *zap.Logger, m *Metrics, dec *controller.RecordFile) *linkRunner {
	return &linkRunner{cfg: l, dryRun: dry, log: log, metrics: m, dec: dec}
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
	if r.link == nil {
		return st
	}
	if remove {
		if err := r.link.Remove(); err != nil {
			r.log.Error("failed to remove the shaping", zap.Error(err))
		} else {
			r.log.Info("removed the shaping")
		}
	} else {
		ctx := context.Background()
		for _, d := range estimator.Directions {
			base := r.cfg.Directions[d].Bounds.Base
			s := r.link.Down()
			if d == estimator.Up {
				s = r.link.Up()
			}
			if _, err := s.SetRate(ctx, uint64(base)); err != nil {
				r.log.Error("failed to leave the shaper at its base rate", zap.String("dir", d.String()), zap.Error(err))
			} else {
				r.log.Info("left the shaper at its base rate", zap.String("dir", d.String()), zap.Float64("rate_kbit", base/1000))
			}
		}
		r.link.Close()
	}
	r.link = nil
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
	if r.dryRun {
		return [2]controller.Shaper{
			estimator.Down: &dryShaper{iface: r.cfg.Interface, rx: true},
			estimator.Up:   &dryShaper{iface: r.cfg.Interface},
		}, nil
	}
	backoff := 500 * time.Millisecond
	for {
		var l *actuator.Link
		var err error
		if r.cfg.Attach {
			l, err = actuator.Attach(r.cfg.Interface, r.cfg.IFB, 0)
		} else {
			// Setup replaces what a crash or a vanished interface left
			// of autoshape's own shaping.
			l, err = actuator.Setup(actuator.SetupConfig{
				Iface: r.cfg.Interface, IFB: r.cfg.IFB, Backend: r.cfg.Backend,
				Up: uint64(r.cfg.Directions[estimator.Up].Bounds.Base), Down: uint64(r.cfg.Directions[estimator.Down].Bounds.Base),
				Framing: r.cfg.Framing, Replace: r.cfg.Replace,
			})
		}
		if err == nil {
			r.mu.Lock()
			r.link = l
			r.mu.Unlock()
			return [2]controller.Shaper{estimator.Down: shaperOf{l.Down()}, estimator.Up: shaperOf{l.Up()}}, nil
		}
		if errors.Is(err, actuator.ErrForeignQdisc) {
			return [2]controller.Shaper{}, fmt.Errorf("%w; autoshape left it as it is: set replace = true in this [[link]] to replace it", err)
		}
		if actuator.IsPermission(err) || errors.Is(err, actuator.ErrNotSupported) {
			return [2]controller.Shaper{}, err // waiting will not help
		}
		r.log.Warn("shaping not ready, retrying", zap.Error(err), zap.Duration("retry_in", backoff))
		select {
		case <-ctx.Done():
			return [2]controller.Shaper{}, ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

// shaperOf adapts an actuator's Shaper to the controller's.
type shaperOf struct{ s actuator.Shaper }

func (a shaperOf) SetRate(ctx context.Context, bps uint64) (controller.Change, error) {
	ch, err := a.s.SetRate(ctx, bps)
	return controller.Change{Iface: ch.Iface, Kind: ch.Kind, Wrote: ch.Wrote}, err
}

func (a shaperOf) Stats(ctx context.Context) (controller.ShaperStats, error) {
	st, err := a.s.Stats(ctx)
	return controller.ShaperStats{Bytes: st.Bytes, Packets: st.Packets, WireBytes: st.WireBytes, Drops: st.Drops,
		Backlog: st.Backlog, CapacityEstimate: st.CapacityEstimate, AutorateIngress: st.AutorateIngress}, err
}

// run is the link's loop: samples into the estimator, a controller tick
// every 50 ms, decisions logged, recovery when the interface or its qdiscs
// go away.
func (r *linkRunner) run(ctx context.Context, saved linkState) error {
	shapers, err := r.shapers(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	est, err := estimator.New(estimator.Config{Budget: r.cfg.Budget})
	if err != nil {
		return err
	}
	// Reflectors the last run had active go first.
	reflectors := r.cfg.Reflectors
	if len(reflectors) == 0 {
		reflectors = probe.DefaultReflectors
	}
	reflectors = preferSaved(reflectors, saved.Reflectors)
	forget := make(chan string, 16)
	pool, err := probe.NewPool(probe.PoolConfig{
		Reflectors: reflectors, Active: r.cfg.ActiveReflectors, Rate: r.cfg.ProbeRate, Method: r.cfg.Method,
	}, probe.NewTargetFactory(probe.TargetOptions{Logger: r.log}), probe.RealClock{}, r.log,
		func(name string) {
			select {
			case forget <- name:
			default:
			}
		})
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.pool = pool
	r.mu.Unlock()

	var pols [2]policies.Policy
	var ccfg controller.Config
	ccfg.Link = r.cfg.Name
	for _, d := range estimator.Directions {
		ccfg.Directions[d] = r.cfg.Directions[d]
		if pols[d], err = config.NewPolicy(r.cfg); err != nil {
			return err
		}
	}
	r.log.Info("controlling the link", zap.String("policy", pols[estimator.Down].Name()),
		zap.Float64("budget_ms", float64(r.cfg.Budget)/float64(time.Millisecond)))
	ctrl, err := controller.New(ccfg, est, shapers, pols, pool)
	if err != nil {
		return err
	}
	ctrl.Restore([2]float64{estimator.Down: saved.DownKbit * 1000, estimator.Up: saved.UpKbit * 1000})

	samples := make(chan estimator.Sample, 256)
	poolDone := make(chan error, 1)
	go func() { poolDone <- pool.Run(ctx, samples) }()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	// Once a second the shaping is compared with what the kernel holds:
	// what someone deleted of autoshape's is made again, what someone put
	// in its place is left alone, and each is logged once.
	var checks <-chan time.Time
	if !r.dryRun {
		c := time.NewTicker(time.Second)
		defer c.Stop()
		checks = c.C
	}
	watch := &shapingWatch{log: r.log}
	checkEvery, nextCheck := time.Second, time.Time{}
	sum := newSummary()
	failing := false
	var nextReflectors time.Time
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
			ctrl.AddSample(s)
		case name := <-forget:
			est.ForgetReflector(name)
		case now := <-checks:
			if now.Before(nextCheck) {
				continue
			}
			r.mu.Lock()
			link := r.link
			r.mu.Unlock()
			drifts, err := link.Check()
			if watch.report(drifts, err) {
				// A root made again or another attached to holds some
				// rate: the next tick writes the controller's.
				ctrl.Reattach(shapers)
			}
			// While the interface is away, look less often.
			if err != nil {
				checkEvery = min(2*checkEvery, 10*time.Second)
			} else {
				checkEvery = time.Second
			}
			nextCheck = now.Add(checkEvery)
		case now := <-tick.C:
			decs, err := ctrl.Tick(ctx, now)
			for _, dec := range decs {
				r.record(dec)
			}
			r.mu.Lock()
			for _, d := range estimator.Directions {
				r.rates[d] = ctrl.Rate(d)
			}
			r.mu.Unlock()
			for _, d := range estimator.Directions {
				r.metrics.Observe(r.cfg.Name, ctrl.Observation(d), ctrl.Rate(d))
				sum.add(ctrl.Observation(d))
			}
			r.metrics.SetState(r.cfg.Name, ctrl.State())
			if now.After(nextReflectors) {
				r.metrics.Reflectors(r.cfg.Name, pool.Stats())
				nextReflectors = now.Add(5 * time.Second)
			}
			if sum.due(now) {
				sum.log(r.log, now, ctrl, len(pool.Active()))
			}
			// One line per stretch of failures: the check above says
			// why, and what it did.
			if err != nil && !failing {
				r.log.Warn("failed to apply a rate", zap.Error(err))
			}
			failing = err != nil
		}
	}
}

// record logs a decision (one INFO line with its reasons), counts it and
// appends it to the decision file, which says itself (at most once a
// minute) when it cannot.
func (r *linkRunner) record(d controller.Decision) {
	r.log.Info("rate change", zap.Object("decision", d))
	r.metrics.Decision(d)
	if r.dec != nil {
		_ = r.dec.Write(d)
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
