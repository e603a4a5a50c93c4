package sweep

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/autoshape/autoshape/actuator"
	"github.com/autoshape/autoshape/config"
	"github.com/autoshape/autoshape/estimator"
	"github.com/autoshape/autoshape/probe"
)

// Link sets the link's shaping up (or attaches to it), starts the probes,
// runs the plan and then puts things back: what setup made is removed;
// attached shapers get their rates back. A foreign root qdisc that the
// configuration does not allow to be replaced is an error wrapping
// actuator.ErrForeignQdisc.
func Link(ctx context.Context, l config.Link, p Plan, load LoadSource, log *zap.Logger) (Report, error) {
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
		return Report{}, fmt.Errorf("%w; autoshape left it as it is: set replace = true in the [[link]] to replace it", err)
	}
	if err != nil {
		return Report{}, err
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
	}, probe.NewTargetFactory(probe.TargetOptions{Logger: log, Device: l.Interface}), probe.RealClock{}, log, nil)
	if err != nil {
		return Report{}, err
	}
	pctx, cancel := context.WithCancel(ctx)
	samples := make(chan estimator.Sample, 1024)
	poolDone := make(chan error, 1)
	go func() { poolDone <- pool.Run(pctx, samples) }()
	defer func() { cancel(); <-poolDone }()

	s := &Sweeper{Shapers: shapers, Samples: samples, Load: load, Log: log, Now: time.Now}
	log.Info("sweep starting", zap.String("link", l.Name), zap.Int("steps", len(p.Directions)*(len(p.Fractions)+1)),
		zap.Duration("hold", p.Hold), zap.Float64("budget_ms", ms(p.Budget)))
	return s.Run(ctx, p)
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
