// Package sweep is the calibration sweep: it shapes a link at stepped
// fractions of its line rate under load, measures the added delay and the
// goodput of each step, and recommends the highest rate within the budget.
package sweep

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/autoshape/autoshape/actuator"
	"github.com/autoshape/autoshape/controller"
	"github.com/autoshape/autoshape/estimator"
	"github.com/autoshape/autoshape/probe"
)

// unshapedFactor is how far above the line rate the shaper is set for the
// sweep's unshaped step: far enough that the line's own queue is the one
// that fills.
const unshapedFactor = 10

// A loadError is a step's load failing (a connection lost, a command
// exiting with an error): the sweep retries that step once.
type loadError struct {
	dir estimator.Direction
	err error
}

func (e *loadError) Error() string { return fmt.Sprintf("the %s load failed: %v", e.dir, e.err) }
func (e *loadError) Unwrap() error { return e.err }

// A Sweeper runs a plan on a link's shapers with the probes' samples.
type Sweeper struct {
	Shapers [2]actuator.Shaper // by direction
	Samples <-chan estimator.Sample
	Load    LoadSource
	Log     *zap.Logger
	Now     func() time.Time

	// baseline is the lowest unloaded delay seen per reflector and kind.
	baseline map[sampleKey]time.Duration
}

type sampleKey struct {
	reflector string
	kind      estimator.Kind
}

// Run sweeps each direction of the plan and returns the report: the steps
// that finished, and the recommendation of each direction whose steps all
// finished. A step whose load fails is retried once; a direction whose
// step fails again is given up and the next direction swept (a load that
// failed one way says nothing about the other). Any other error ends the
// sweep. Either way the error is an *IncompleteError naming each direction
// not completed. It leaves the shapers at whatever the last step set; the
// caller restores them.
func (s *Sweeper) Run(ctx context.Context, p Plan) (Report, error) {
	s.baseline = map[sampleKey]time.Duration{}
	rep := Report{Steps: []Step{}, Recommendation: Recommendation{BudgetMs: ms(p.Budget)}}
	var completed []Step
	var failed []Failure
	for i, d := range p.Directions {
		first := len(rep.Steps)
		err := s.direction(ctx, p, d, &rep)
		if err == nil {
			completed = append(completed, rep.Steps[first:]...)
			continue
		}
		failed = append(failed, Failure{Direction: d.String(), Error: err.Error()})
		s.Log.Error("sweep direction not completed", zap.String("dir", d.String()),
			zap.Int("steps_finished", len(rep.Steps)-first), zap.Error(err))
		var le *loadError
		if errors.As(err, &le) && ctx.Err() == nil {
			continue
		}
		for _, rest := range p.Directions[i+1:] {
			failed = append(failed, Failure{Direction: rest.String(), Error: "not swept: the sweep ended in the " + d.String() + " direction"})
		}
		break
	}
	rep.Recommendation = recommend(completed, p.Budget)
	if len(failed) > 0 {
		return rep, &IncompleteError{Failed: failed}
	}
	return rep, nil
}

// direction sweeps one direction, appending each step as it finishes.
func (s *Sweeper) direction(ctx context.Context, p Plan, d estimator.Direction, rep *Report) error {
	for i := 0; i <= len(p.Fractions); i++ {
		st := Step{Direction: d.String()}
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
			s.Log.Warn("sweep step's load failed: retrying the step once", zap.String("dir", st.Direction),
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
		s.Log.Info("sweep step", zap.String("dir", st.Direction), zap.Float64("fraction", st.Fraction),
			zap.Float64("rate_kbit", st.RateKbit), zap.Float64("goodput_kbit", st.GoodputKbit),
			zap.Float64("delay_p50_ms", st.Delay.P50), zap.Float64("delay_p95_ms", st.Delay.P95),
			zap.Float64("delay_p99_ms", st.Delay.P99), zap.Uint64("drops", st.Drops))
	}
	return nil
}

// step runs one step: the rate set, an unloaded pause measuring baselines,
// then the load for Hold, measured after Settle.
func (s *Sweeper) step(ctx context.Context, p Plan, d estimator.Direction, bps uint64, st *Step) error {
	if _, err := s.Shapers[d].SetRate(ctx, bps); err != nil {
		return fmt.Errorf("set the %s shaper to %s: %w", d, controller.FormatRate(float64(bps)), err)
	}
	unloaded, err := s.pause(ctx, p.Pause)
	if err != nil {
		return err
	}
	w, err := s.loaded(ctx, p, d, st.RateKbit)
	if err != nil {
		return err
	}
	return s.score(d, bps, unloaded, w, st)
}

// pause measures the baselines unloaded for d and returns how many samples
// arrived.
func (s *Sweeper) pause(ctx context.Context, d time.Duration) (int, error) {
	n := 0
	err := s.collect(ctx, d, func(x estimator.Sample) {
		n++
		k := sampleKey{x.Reflector, x.Kind}
		if b, ok := s.baseline[k]; !ok || x.Delay < b {
			s.baseline[k] = x.Delay
		}
	})
	return n, err
}

// A window is what one step measured under load.
type window struct {
	delays        []float64 // the added delay of each sample, ms
	before, after actuator.Stats
	elapsed       time.Duration
}

// loaded runs the step's load for Hold and measures the window after
// Settle; the load is stopped whatever happens.
func (s *Sweeper) loaded(ctx context.Context, p Plan, d estimator.Direction, rateKbit float64) (window, error) {
	var w window
	load := s.startLoad(ctx, d, rateKbit, p.Hold)
	if err := s.collect(ctx, p.Settle, nil); err != nil {
		load.stop()
		return w, err
	}
	if err := load.failed(); err != nil {
		load.stop()
		return w, err
	}
	var err error
	if w.before, err = s.Shapers[d].Stats(ctx); err != nil {
		load.stop()
		return w, fmt.Errorf("read the %s shaper's statistics: %w", d, err)
	}
	start := s.Now()
	err = s.collect(ctx, p.Hold-p.Settle, func(x estimator.Sample) {
		if !sampleFor(x.Kind, d) {
			return
		}
		if b, ok := s.baseline[sampleKey{x.Reflector, x.Kind}]; ok {
			w.delays = append(w.delays, ms(max(x.Delay-b, 0)))
		}
	})
	if err == nil {
		err = load.failed()
	}
	after, serr := s.Shapers[d].Stats(ctx)
	w.after, w.elapsed = after, s.Now().Sub(start)
	if lerr := load.stop(); err == nil && lerr != nil {
		err = &loadError{dir: d, err: lerr}
	}
	if err != nil {
		return w, err
	}
	if serr != nil {
		return w, fmt.Errorf("read the %s shaper's statistics: %w", d, serr)
	}
	return w, nil
}

// score fills the step in from its window. A step answered unloaded but
// never under load counts at the probes' deadline; one never answered is
// an error.
func (s *Sweeper) score(d estimator.Direction, bps uint64, unloaded int, w window, st *Step) error {
	delays := w.delays
	lost := len(delays) == 0
	if lost && unloaded == 0 {
		return fmt.Errorf("no probe answers during the %s step at %s: check the reflectors", d, controller.FormatRate(float64(bps)))
	}
	if lost {
		// Every probe was lost or late, so the step's delay is at least
		// the probes' deadline.
		lostMs := ms(probe.DefaultPoolDeadline)
		delays = []float64{lostMs}
		s.Log.Warn("every probe lost under load", zap.String("dir", d.String()),
			zap.Float64("rate_kbit", float64(bps)/1000), zap.Float64("counted_as_ms", lostMs))
	}
	if w.elapsed > 0 && w.after.Bytes >= w.before.Bytes {
		st.GoodputKbit = math.Round(float64(w.after.Bytes-w.before.Bytes)*8/w.elapsed.Seconds()) / 1000
	}
	if w.after.Drops >= w.before.Drops {
		st.Drops = w.after.Drops - w.before.Drops
	}
	st.Delay = Delay{P50: round1(percentile(delays, 0.50)), P95: round1(percentile(delays, 0.95)), P99: round1(percentile(delays, 0.99))}
	return nil
}

// A runningLoad is one step's load, running in the background.
type runningLoad struct {
	dir    estimator.Direction
	ctx    context.Context // the step's, not the load's own
	cancel context.CancelFunc
	done   chan error
}

func (s *Sweeper) startLoad(ctx context.Context, d estimator.Direction, rateKbit float64, hold time.Duration) *runningLoad {
	lctx, cancel := context.WithCancel(ctx)
	l := &runningLoad{dir: d, ctx: ctx, cancel: cancel, done: make(chan error, 1)}
	go func() { l.done <- s.Load.Load(lctx, d, rateKbit, hold) }()
	return l
}

// stop ends the load and returns its error; being stopped is none.
func (l *runningLoad) stop() error {
	l.cancel()
	err := <-l.done
	if errors.Is(err, context.Canceled) && l.ctx.Err() == nil {
		err = nil
	}
	return err
}

// failed returns a *loadError if the load has already ended with an error.
func (l *runningLoad) failed() error {
	select {
	case err := <-l.done:
		l.done <- err // for stop
		if err != nil && !errors.Is(err, context.Canceled) {
			return &loadError{dir: l.dir, err: err}
		}
	default:
	}
	return nil
}

// sampleFor says whether a sample of kind k measures direction d: round
// trips measure both.
func sampleFor(k estimator.Kind, d estimator.Direction) bool {
	return k == estimator.RTT || (k == estimator.OWDDown && d == estimator.Down) || (k == estimator.OWDUp && d == estimator.Up)
}

// collect passes every sample arriving within d to fn (which may be nil).
func (s *Sweeper) collect(ctx context.Context, d time.Duration, fn func(estimator.Sample)) error {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return nil
		case x, ok := <-s.Samples:
			if !ok {
				return errors.New("the probes stopped")
			}
			if fn != nil {
				fn(x)
			}
		}
	}
}

// percentile is the nearest-rank percentile p of v (0 for none).
func percentile(v []float64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[max(int(math.Ceil(p*float64(len(s))))-1, 0)]
}

func round1(v float64) float64 { return math.Round(v*10) / 10 }
