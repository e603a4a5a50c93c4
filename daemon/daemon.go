// Package daemon is autoshape's daemon: per link a loop that feeds probe
// samples and shaper counters to a controller at its tick, and the
// lifecycle around the links (reload, state file, re-attach after the
// shaping changed, a safe exit), with its metrics and decision file.
package daemon

import (
	"context"
	"os"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/autoshape/autoshape/config"
	"github.com/autoshape/autoshape/controller"
	"github.com/autoshape/autoshape/probe"
)

// Options configure a Daemon. Nil dependencies mean the real ones.
type Options struct {
	// ConfigPath is the file a reload reads again.
	ConfigPath string
	// DryRun computes and logs every decision without touching any qdisc.
	DryRun bool
	// Logger is the daemon's log (nil: none); Level is its level, which a
	// reload changes.
	Logger *zap.Logger
	Level  zap.AtomicLevel
	// Version names the build in the log and the metrics.
	Version string

	// Tick is the control interval; 0 means controller.DefaultTick.
	Tick time.Duration
	// Clock schedules everything: the ticks, the shaping checks, the state
	// saves, the setup retries and the probes.
	Clock probe.Clock
	// Kernel sets the shaping up (not used in a dry run).
	Kernel Kernel
	// Targets makes the probe targets; nil means probe.NewTargetFactory,
	// logging to the link's log.
	Targets probe.TargetFactory
}

// A Daemon runs every configured link until it is told to stop.
type Daemon struct {
	opts Options
	log  *zap.Logger

	// metrics are fed whether or not they are served: a reload may start
	// or move the server.
	metrics *Metrics
	server  *metricsServer
	// decisions is the one decision file every link writes to.
	decisions *RecordFile

	mu     sync.Mutex
	links  map[string]*linkRunner // by interface
	state  stateFile
	failed chan error // a link that cannot go on
}

// New returns a Daemon with opts, the defaults filled in.
func New(opts Options) *Daemon {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Level == (zap.AtomicLevel{}) {
		opts.Level = zap.NewAtomicLevel()
	}
	if opts.Tick == 0 {
		opts.Tick = controller.DefaultTick
	}
	if opts.Clock == nil {
		opts.Clock = probe.RealClock{}
	}
	if opts.Kernel == nil {
		opts.Kernel = netlinkKernel{}
	}
	return &Daemon{opts: opts, log: opts.Logger}
}

// Run starts the links of cfg, reloads the configuration file at each
// signal on reload, and on cancellation leaves the shapers at a safe rate
// (or removes what it set up), saves the state and returns nil. A link
// that cannot be shaped ends it with an error.
func (d *Daemon) Run(ctx context.Context, cfg config.Config, reload <-chan os.Signal) error {
	d.links = map[string]*linkRunner{}
	d.failed = make(chan error, 1)
	d.state = loadState(cfg.StateFile, d.log)
	d.log.Info("starting", zap.String("version", d.opts.Version), zap.Int("links", len(cfg.Links)), zap.Bool("dry_run", d.opts.DryRun))
	d.metrics = NewMetrics(d.opts.Version)
	d.server = &metricsServer{metrics: d.metrics, log: d.log}
	if err := d.server.serve(ctx, cfg.MetricsListen); err != nil {
		return err
	}
	defer d.server.stop()
	d.decisions = NewRecordFile(RecordFileConfig{
		Path: cfg.Decisions, MaxBytes: int64(cfg.DecisionsMaxMB) << 20, Logger: d.log, Now: d.opts.Clock.Now,
	})
	d.apply(ctx, cfg)

	save, stopSave := d.opts.Clock.NewTicker(time.Minute)
	defer stopSave()
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
		case <-reload:
			next, err := config.Load(d.opts.ConfigPath)
			if err != nil {
				d.log.Error("reload refused: keeping the running configuration", zap.Error(err))
				continue
			}
			d.log.Info("reloading", zap.String("config", d.opts.ConfigPath))
			d.reconfigure(ctx, cfg, next)
			d.apply(ctx, next)
			cfg = next
		case <-save:
			d.saveState(cfg.StateFile)
		}
	}
}

// reconfigure applies what a reload changed of the settings that are not a
// link's: the log level, the metrics server's address and the decision
// file. Every link, changed or not, writes its next decision to the new
// file.
func (d *Daemon) reconfigure(ctx context.Context, cur, next config.Config) {
	if next.LogLevel != cur.LogLevel {
		if err := d.opts.Level.UnmarshalText([]byte(next.LogLevel)); err != nil {
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
func (d *Daemon) apply(ctx context.Context, cfg config.Config) {
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
		r := d.newLinkRunner(l)
		r.start(ctx, d.state.Links[l.Name])
		d.links[l.Interface] = r
	}
}

// linkEqual reports whether a link runs on unchanged through a reload from
// b to a.
func linkEqual(a, b config.Link) bool {
	return a.Name == b.Name && a.Interface == b.Interface && a.IFB == b.IFB && a.Backend == b.Backend &&
		a.Attach == b.Attach && a.Replace == b.Replace && a.Budget == b.Budget && a.Policy == b.Policy && a.Framing == b.Framing && a.Directions == b.Directions && a.Fixed == b.Fixed &&
		a.Method == b.Method && slices.Equal(a.Reflectors, b.Reflectors) &&
		a.ActiveReflectors == b.ActiveReflectors && a.ProbeRate == b.ProbeRate
}

// shutdown stops every link as configured and saves the state.
func (d *Daemon) shutdown(cfg config.Config) {
	d.mu.Lock()
	for name, r := range d.links {
		d.state.Links[r.cfg.Name] = r.stop(cfg.RemoveOnExit && !r.cfg.Attach)
		delete(d.links, name)
	}
	d.mu.Unlock()
	d.saveState(cfg.StateFile)
	d.log.Info("stopped")
}

func (d *Daemon) saveState(path string) {
	d.mu.Lock()
	for _, r := range d.links {
		d.state.Links[r.cfg.Name] = r.snapshot()
	}
	st := d.state
	d.mu.Unlock()
	if err := st.save(path, d.opts.Clock.Now()); err != nil {
		d.log.Error("failed to save the state", zap.String("path", path), zap.Error(err))
	}
}
