package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"go.uber.org/zap"

	"github.com/autoshape/autoshape/actuator"
	"github.com/autoshape/autoshape/config"
	"github.com/autoshape/autoshape/controller"
	"github.com/autoshape/autoshape/estimator"
	"github.com/autoshape/autoshape/probe"
	"github.com/autoshape/autoshape/sim"
)

// unshapedFactor is how far above the line rate the shaper is set for the
// sweep's unshaped step: far enough that the line's own queue is the one
// that fills.
const unshapedFactor = 10

// sweepCmd is `autoshape sweep`: the manual calibration sweep, automated.
// A step whose load fails is run again once; a direction whose step fails
// again is not completed. The steps that finished and the recommendation of
// each completed direction are printed all the same, the directions not
// completed named with the reason (in --json, "incomplete"), and the exit
// status is 1 only then.
func sweepCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sweep", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("c", "", "configuration file: the link's interfaces, backend, mode, reflectors and budget")
	linkName := fs.String("link", "", "the link to sweep (default: the configuration's only link)")
	direction := fs.String("direction", "both", "down, up or both")
	lineDown := fs.String("line-rate-down", "", "the line's download rate (e.g. 17613kbit); required to sweep down")
	lineUp := fs.String("line-rate-up", "", "the line's upload rate; required to sweep up")
	from := fs.Float64("from", 0.70, "lowest fraction of the line rate")
	to := fs.Float64("to", 1.00, "highest fraction of the line rate")
	step := fs.Float64("step", 0.025, "fraction step")
	hold := fs.Duration("hold", 20*time.Second, "how long each step runs under load")
	loadSpec := fs.String("load", "", "the load: an http(s) URL of a large file that also accepts POSTs, or exec:COMMAND run for each step")
	streams := fs.Int("streams", 4, "parallel transfers of an http load")
	asJSON := fs.Bool("json", false, "print the JSON report instead of the table")
	plotOut := fs.String("plot", "", "also draw the sweep figure to this .png or .svg file")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: autoshape sweep -c FILE [--link NAME] --direction down|up|both --line-rate-down RATE --line-rate-up RATE --load URL|exec:COMMAND [--from F --to F --step F --hold D] [--json] [--plot FILE]\n\n")
		fs.PrintDefaults()
	}
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
	link, err := pickLink(cfg, *linkName)
	if err != nil {
		return usageError{err}
	}
	// Attach mode may find sqm-scripts' HTB, whatever the backend key says.
	minRate := link.Backend.MinRate()
	if link.Attach {
		minRate = actuator.HTB.MinRate()
	}
	plan, err := newSweepPlan(*direction, *lineDown, *lineUp, *from, *to, *step, *hold, link.Budget, minRate)
	if err != nil {
		return usageError{err}
	}
	load, err := parseLoad(*loadSpec, *streams)
	if err != nil {
		return usageError{err}
	}
	if ext := strings.ToLower(filepath.Ext(*plotOut)); *plotOut != "" && ext != ".png" && ext != ".svg" {
		return usagef("--plot must name a .png or .svg file")
	}

	log := newLogger(cfg.LogLevel, stderr)
	defer log.Sync()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	rep, err := sweepLink(ctx, link, plan, load, log)
	if len(rep.Steps) == 0 {
		return err
	}
	// What the sweep finished is printed even when it could not go on.
	out := sweepOutput{sweepReport: rep}
	var inc *sweepIncomplete
	if errors.As(err, &inc) {
		out.Incomplete = inc.Failed
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return err
		}
	} else {
		writeSweepTable(stdout, out, plan)
	}
	if *plotOut != "" {
		panels, err := sweepFigure([]plotInput{{name: "sweep of " + link.Name, sweep: &rep}})
		if err != nil {
			return err
		}
		if err := writeFigure(panels, *plotOut, strings.ToLower(filepath.Ext(*plotOut))); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "wrote %s\n", *plotOut)
	}
	return err
}

// sweepOutput is what `autoshape sweep --json` prints: the report, and the
// directions the sweep could not complete, with the reason.
type sweepOutput struct {
	sweepReport
	Incomplete []sweepFailure `json:"incomplete,omitempty"`
}

// A sweepFailure is a direction that was not swept to its end.
type sweepFailure struct {
	Direction string `json:"direction"`
	Error     string `json:"error"`
}

// A sweepIncomplete ends a sweep that could not complete every direction;
// the report beside it holds the steps that finished and the
// recommendation of each direction that completed.
type sweepIncomplete struct {
	Failed []sweepFailure
}

func (e *sweepIncomplete) Error() string {
	var parts []string
	for _, f := range e.Failed {
		parts = append(parts, fmt.Sprintf("the %s sweep was not completed: %s", f.Direction, f.Error))
	}
	return strings.Join(parts, "; ")
}

// A loadError is a step's load failing (a connection lost, a command
// exiting with an error): the sweep retries that step once.
type loadError struct {
	dir estimator.Direction
	err error
}

func (e *loadError) Error() string { return fmt.Sprintf("the %s load failed: %v", e.dir, e.err) }
func (e *loadError) Unwrap() error { return e.err }

// pickLink finds the named link, or the only one.
func pickLink(cfg config.Config, name string) (config.Link, error) {
	if name == "" {
		if len(cfg.Links) != 1 {
			return config.Link{}, fmt.Errorf("the configuration has %d links: name one with --link", len(cfg.Links))
		}
		return cfg.Links[0], nil
	}
	for _, l := range cfg.Links {
		if l.Name == name {
			return l, nil
		}
	}
	return config.Link{}, fmt.Errorf("--link %q: no such link in the configuration", name)
}

// A sweepPlan is what one sweep does: per direction, the shaper at each
// fraction of the line rate and then unshaped, each step under load for Hold
// after an unloaded pause of Pause.
type sweepPlan struct {
	Directions []estimator.Direction
	LineRate   [2]float64 // bit/s, by direction
	Fractions  []float64
	Hold       time.Duration
	// Settle is the start of each loaded step left out of the measurement,
	// while the load ramps up.
	Settle time.Duration
	// Pause is the unloaded time before each step: the queues drain and the
	// per-reflector baselines are measured.
	Pause  time.Duration
	Budget time.Duration
}

// newSweepPlan checks the sweep's flags: minRate is the lowest rate, in
// bit/s, that the link's shaper takes.
func newSweepPlan(direction, lineDown, lineUp string, from, to, step float64, hold, budget time.Duration, minRate float64) (sweepPlan, error) {
	p := sweepPlan{Hold: hold, Budget: budget}
	switch direction {
	case "down":
		p.Directions = []estimator.Direction{estimator.Down}
	case "up":
		p.Directions = []estimator.Direction{estimator.Up}
	case "both":
		p.Directions = []estimator.Direction{estimator.Down, estimator.Up}
	default:
		return p, fmt.Errorf("--direction %q: want down, up or both", direction)
	}
	for _, d := range p.Directions {
		flagName, s := "--line-rate-down", lineDown
		if d == estimator.Up {
			flagName, s = "--line-rate-up", lineUp
		}
		if s == "" {
			return p, fmt.Errorf("%s is required to sweep %s", flagName, d)
		}
		r, err := controller.ParseRate(s)
		if err != nil {
			return p, fmt.Errorf("%s: %w", flagName, err)
		}
		if r <= 0 {
			return p, fmt.Errorf("%s %s: the rate must be positive", flagName, s)
		}
		p.LineRate[d] = r
	}
	var err error
	if p.Fractions, err = sweepFractions(from, to, step); err != nil {
		return p, err
	}
	for _, d := range p.Directions {
		flagName := "--line-rate-down"
		if d == estimator.Up {
			flagName = "--line-rate-up"
		}
		if low := math.Round(p.LineRate[d] * p.Fractions[0]); low < minRate {
			return p, fmt.Errorf("--from %v of %s %s is %s: below %s, the lowest rate the link's shaper takes", from, flagName, controller.FormatRate(p.LineRate[d]), controller.FormatRate(low), controller.FormatRate(minRate))
		}
	}
	if hold < time.Second {
		return p, fmt.Errorf("--hold %v: want at least 1s", hold)
	}
	p.Settle = min(hold/4, 5*time.Second)
	p.Pause = min(max(hold/5, time.Second), 3*time.Second)
	return p, nil
}

// sweepFractions lists from, from+step, ... up to to (included when the steps
// land on it, to within rounding).
func sweepFractions(from, to, step float64) ([]float64, error) {
	switch {
	case !(from > 0) || from > 2:
		return nil, fmt.Errorf("--from %v: want a fraction above 0 (at most 2)", from)
	case !(to >= from) || to > 2:
		return nil, fmt.Errorf("--to %v: want a fraction from --from (%v) to 2", to, from)
	case !(step > 0) || step > 2:
		return nil, fmt.Errorf("--step %v: want a positive fraction (at most 2)", step)
	}
	// Counted in floating point: a tiny step makes more steps than an int
	// holds.
	nf := math.Floor((to-from)/step+1e-9) + 1
	if !(nf <= 200) {
		return nil, fmt.Errorf("--from %v --to %v --step %v makes %.3g steps: at most 200", from, to, step, nf)
	}
	out := make([]float64, int(nf))
	for i := range out {
		out[i] = math.Round((from+float64(i)*step)*1e6) / 1e6
	}
	return out, nil
}

// A loadSource loads one direction of the link until ctx ends. It returns
// early only on an error (or when an external command finishes by itself).
type loadSource interface {
	Load(ctx context.Context, d estimator.Direction, rateKbit float64, hold time.Duration) error
}

// A sweeper runs a plan on a link's shapers with the probes' samples.
type sweeper struct {
	shapers [2]actuator.Shaper
	samples <-chan estimator.Sample
	load    loadSource
	log     *zap.Logger
	now     func() time.Time

	// baseline is the lowest unloaded delay seen per reflector and kind.
	baseline map[sampleKey]time.Duration
}

type sampleKey struct {
	reflector string
	kind      estimator.Kind
}

// run sweeps each direction of the plan and returns the report: the steps
// that finished, and the recommendation of each direction whose steps all
// finished. A step whose load fails is retried once; a direction whose
// step fails again is given up and the next direction swept (a load that
// failed one way says nothing about the other). Any other error ends the
// sweep. Either way the error is a *sweepIncomplete naming each direction
// not completed. It leaves the shapers at whatever the last step set; the
// caller restores them.
func (s *sweeper) run(ctx context.Context, p sweepPlan) (sweepReport, error) {
	s.baseline = map[sampleKey]time.Duration{}
	rep := sweepReport{Steps: []sweepStep{}, Recommendation: sweepRecommendation{BudgetMs: ms(p.Budget)}}
	var completed []sweepStep
	var failed []sweepFailure
	for i, d := range p.Directions {
		first := len(rep.Steps)
		err := s.direction(ctx, p, d, &rep)
		if err == nil {
			completed = append(completed, rep.Steps[first:]...)
			continue
		}
		failed = append(failed, sweepFailure{Direction: d.String(), Error: err.Error()})
		s.log.Error("sweep direction not completed", zap.String("dir", d.String()),
			zap.Int("steps_finished", len(rep.Steps)-first), zap.Error(err))
		var le *loadError
		if errors.As(err, &le) && ctx.Err() == nil {
			continue
		}
		for _, rest := range p.Directions[i+1:] {
			failed = append(failed, sweepFailure{Direction: rest.String(), Error: "not swept: the sweep ended in the " + d.String() + " direction"})
		}
		break
	}
	rep.Recommendation = recommend(completed, p.Budget)
	if len(failed) > 0 {
		return rep, &sweepIncomplete{Failed: failed}
	}
	return rep, nil
}

// direction sweeps one direction, appending each step as it finishes.
func (s *sweeper) direction(ctx context.Context, p sweepPlan, d estimator.Direction, rep *sweepReport) error {
	for i := 0; i <= len(p.Fractions); i++ {
		st := sweepStep{Direction: d.String()}
		rate := p.LineRate[d] * unshapedFactor
		if i < len(p.Fractions) {
			st.Fraction = p.Fractions[i]
			rate = math.Round(p.LineRate[d] * st.Fraction)
			st.RateKbit = math.Round(rate) / 1000
		}
		try := st
		err := s.step(ctx, p, d, uint64(rate), &try)
		var le *loadError
		if errors.As(err, &le) && ctx.Err() == nil {
			// A new load (new connections) after the step's unloaded
			// pause, in which the queues the failed one left drain.
			s.log.Warn("sweep step's load failed: retrying the step once", zap.String("dir", st.Direction),
				zap.Float64("fraction", st.Fraction), zap.Float64("rate_kbit", st.RateKbit), zap.Error(err))
			try = st
			if err = s.step(ctx, p, d, uint64(rate), &try); err != nil {
				err = fmt.Errorf("%w (the step at %s was retried once)", err, controller.FormatRate(rate))
			}
		}
		if err != nil {
			return err
		}
		st = try
		rep.Steps = append(rep.Steps, st)
		s.log.Info("sweep step", zap.String("dir", st.Direction), zap.Float64("fraction", st.Fraction),
			zap.Float64("rate_kbit", st.RateKbit), zap.Float64("goodput_kbit", st.GoodputKbit),
			zap.Float64("delay_p50_ms", st.Delay.P50), zap.Float64("delay_p95_ms", st.Delay.P95),
			zap.Float64("delay_p99_ms", st.Delay.P99), zap.Uint64("drops", st.Drops))
	}
	return nil
}

// step runs one step: the rate set, an unloaded pause measuring baselines,
// then the load for Hold, measured after Settle.
func (s *sweeper) step(ctx context.Context, p sweepPlan, d estimator.Direction, bps uint64, st *sweepStep) error {
	if _, err := s.shapers[d].SetRate(ctx, bps); err != nil {
		return fmt.Errorf("set the %s shaper to %s: %w", d, controller.FormatRate(float64(bps)), err)
	}
	unloaded := 0
	if err := s.collect(ctx, p.Pause, func(x estimator.Sample) {
		unloaded++
		k := sampleKey{x.Reflector, x.Kind}
		if b, ok := s.baseline[k]; !ok || x.Delay < b {
			s.baseline[k] = x.Delay
		}
	}); err != nil {
		return err
	}

	lctx, cancel := context.WithCancel(ctx)
	loadDone := make(chan error, 1)
	go func() { loadDone <- s.load.Load(lctx, d, st.RateKbit, p.Hold) }()
	stopLoad := func() error {
		cancel()
		err := <-loadDone
		if errors.Is(err, context.Canceled) && ctx.Err() == nil {
			err = nil
		}
		return err
	}
	early := func() error {
		select {
		case err := <-loadDone:
			loadDone <- err // for stopLoad
			if err != nil && !errors.Is(err, context.Canceled) {
				return &loadError{dir: d, err: err}
			}
		default:
		}
		return nil
	}

	if err := s.collect(ctx, p.Settle, nil); err != nil {
		stopLoad()
		return err
	}
	if err := early(); err != nil {
		stopLoad()
		return err
	}
	before, err := s.shapers[d].Stats(ctx)
	if err != nil {
		stopLoad()
		return fmt.Errorf("read the %s shaper's statistics: %w", d, err)
	}
	start := s.now()
	var delays []float64
	err = s.collect(ctx, p.Hold-p.Settle, func(x estimator.Sample) {
		if !sampleFor(x.Kind, d) {
			return
		}
		if b, ok := s.baseline[sampleKey{x.Reflector, x.Kind}]; ok {
			delays = append(delays, ms(max(x.Delay-b, 0)))
		}
	})
	if err == nil {
		err = early()
	}
	after, serr := s.shapers[d].Stats(ctx)
	elapsed := s.now().Sub(start)
	if lerr := stopLoad(); err == nil && lerr != nil {
		err = &loadError{dir: d, err: lerr}
	}
	if err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("read the %s shaper's statistics: %w", d, serr)
	}
	lost := len(delays) == 0
	if lost && unloaded == 0 {
		return fmt.Errorf("no probe answers during the %s step at %s: check the reflectors", d, controller.FormatRate(float64(bps)))
	}
	if lost {
		// Answered unloaded, never under load: every probe was lost or
		// late, so the step's delay is at least the probes' deadline.
		lostMs := ms(probe.DefaultPoolDeadline)
		delays = []float64{lostMs}
		s.log.Warn("every probe lost under load", zap.String("dir", d.String()),
			zap.Float64("rate_kbit", float64(bps)/1000), zap.Float64("counted_as_ms", lostMs))
	}
	if elapsed > 0 && after.Bytes >= before.Bytes {
		st.GoodputKbit = math.Round(float64(after.Bytes-before.Bytes)*8/elapsed.Seconds()) / 1000
	}
	if after.Drops >= before.Drops {
		st.Drops = after.Drops - before.Drops
	}
	st.Delay = sim.Delay{P50: round1(percentile(delays, 0.50)), P95: round1(percentile(delays, 0.95)), P99: round1(percentile(delays, 0.99))}
	return nil
}

// sampleFor says whether a sample of kind k measures direction d: round
// trips measure both.
func sampleFor(k estimator.Kind, d estimator.Direction) bool {
	return k == estimator.RTT || (k == estimator.OWDDown && d == estimator.Down) || (k == estimator.OWDUp && d == estimator.Up)
}

// collect passes every sample arriving within d to fn (which may be nil).
func (s *sweeper) collect(ctx context.Context, d time.Duration, fn func(estimator.Sample)) error {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return nil
		case x, ok := <-s.samples:
			if !ok {
				return errors.New("the probes stopped")
			}
			if fn != nil {
				fn(x)
			}
		}
	}
}

// recommend picks per direction the highest shaped rate whose p95 added
// delay is within the budget (0 when none is).
func recommend(steps []sweepStep, budget time.Duration) sweepRecommendation {
	r := sweepRecommendation{BudgetMs: ms(budget)}
	for _, st := range steps {
		if st.RateKbit <= 0 || st.Delay.P95 > ms(budget) {
			continue
		}
		switch st.Direction {
		case "down":
			r.DownKbit = math.Max(r.DownKbit, st.RateKbit)
		case "up":
			r.UpKbit = math.Max(r.UpKbit, st.RateKbit)
		}
	}
	return r
}

// writeSweepTable prints the steps and the recommendation with the
// configuration lines that use it, and names the directions not completed.
func writeSweepTable(w io.Writer, out sweepOutput, p sweepPlan) {
	rep := out.sweepReport
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "dir\tfraction\trate kbit/s\tgoodput kbit/s\tp50 ms\tp95 ms\tp99 ms\tdrops\t")
	for _, st := range rep.Steps {
		frac, rate := fmt.Sprintf("%.3f", st.Fraction), fmt.Sprintf("%.0f", st.RateKbit)
		if st.RateKbit == 0 {
			frac, rate = "unshaped", "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.0f\t%.1f\t%.1f\t%.1f\t%d\t\n", st.Direction, frac, rate,
			st.GoodputKbit, st.Delay.P50, st.Delay.P95, st.Delay.P99, st.Drops)
	}
	tw.Flush()
	fmt.Fprintf(w, "\nrecommendation: the highest rate whose p95 added delay is within %.0f ms\n", rep.Recommendation.BudgetMs)
directions:
	for _, d := range p.Directions {
		for _, f := range out.Incomplete {
			if f.Direction == d.String() {
				fmt.Fprintf(w, "%s: not completed, no recommendation: %s\n", d, f.Error)
				continue directions
			}
		}
		rec, section := rep.Recommendation.DownKbit, "[link.download]"
		if d == estimator.Up {
			rec, section = rep.Recommendation.UpKbit, "[link.upload]"
		}
		if rec == 0 {
			fmt.Fprintf(w, "%s: no step was within the budget; sweep lower fractions (--from)\n", d)
			continue
		}
		fmt.Fprintf(w, "%s\nbase = %q\nmax = %q   # the line rate\n", section, fmt.Sprintf("%.0fkbit", rec), fmt.Sprintf("%.0fkbit", p.LineRate[d]/1000))
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// sweepLink sets the link's shaping up (or attaches to it), starts the
// probes, runs the plan and then puts things back: what setup made is
// removed; attached shapers get their rates back.
func sweepLink(ctx context.Context, l config.Link, p sweepPlan, load loadSource, log *zap.Logger) (sweepReport, error) {
	var link *actuator.Link
	var err error
	if l.Attach {
		link, err = actuator.Attach(l.Interface, l.IFB, 0)
	} else {
		link, err = actuator.Setup(actuator.SetupConfig{
			Iface: l.Interface, IFB: l.IFB, Backend: l.Backend, Framing: l.Framing, Replace: l.Replace,
			Up: uint64(l.Directions[estimator.Up].Bounds.Base), Down: uint64(l.Directions[estimator.Down].Bounds.Base),
			// The sweep holds each step's rate.
			Cake: actuator.CakeOptions{AutorateIngress: new(false)},
		})
	}
	if errors.Is(err, actuator.ErrForeignQdisc) {
		return sweepReport{}, usagef("%v; autoshape left it as it is: set replace = true in the [[link]] to replace it", err)
	}
	if err != nil {
		return sweepReport{}, err
	}
	shapers := [2]actuator.Shaper{estimator.Down: link.Down(), estimator.Up: link.Up()}
	restore := [2]*recordingShaper{}
	for _, d := range estimator.Directions {
		restore[d] = &recordingShaper{Shaper: shapers[d]}
		shapers[d] = restore[d]
	}
	defer func() {
		if !l.Attach {
			if err := link.Remove(); err != nil {
				log.Error("failed to remove the sweep's shaping", zap.Error(err))
			}
			return
		}
		for _, d := range estimator.Directions {
			if r := restore[d]; r.set {
				if _, err := r.Shaper.SetRate(context.Background(), r.first); err != nil {
					log.Error("failed to restore the shaper's rate", zap.String("dir", d.String()), zap.Error(err))
				}
			}
		}
		link.Close()
	}()

	reflectors := l.Reflectors
	if len(reflectors) == 0 {
		reflectors = probe.DefaultReflectors
	}
	pool, err := probe.NewPool(probe.PoolConfig{
		Reflectors: reflectors, Active: l.ActiveReflectors, Rate: l.ProbeRate, Method: l.Method,
	}, probe.NewTargetFactory(probe.TargetOptions{Logger: log}), probe.RealClock{}, log, nil)
	if err != nil {
		return sweepReport{}, err
	}
	pctx, cancel := context.WithCancel(ctx)
	samples := make(chan estimator.Sample, 1024)
	poolDone := make(chan error, 1)
	go func() { poolDone <- pool.Run(pctx, samples) }()
	defer func() { cancel(); <-poolDone }()

	s := &sweeper{shapers: shapers, samples: samples, load: load, log: log, now: time.Now}
	log.Info("sweep starting", zap.String("link", l.Name), zap.Int("steps", len(p.Directions)*(len(p.Fractions)+1)),
		zap.Duration("hold", p.Hold), zap.Float64("budget_ms", ms(p.Budget)))
	return s.run(ctx, p)
}

// recordingShaper remembers the rate a shaper had before its first change.
type recordingShaper struct {
	actuator.Shaper
	first uint64
	set   bool
}

func (r *recordingShaper) SetRate(ctx context.Context, bps uint64) (actuator.Change, error) {
	ch, err := r.Shaper.SetRate(ctx, bps)
	if err == nil && !r.set {
		r.first, r.set = ch.From, true
	}
	return ch, err
}
