package daemon

import (
	"math"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/autoshape/autoshape/controller"
	"github.com/autoshape/autoshape/estimator"
)

// summary gathers a minute of observations for one INFO line.
type summary struct {
	next   time.Time
	delays [2][]float64 // ms, bounded: 1200 ticks a minute
}

func newSummary() *summary { return &summary{} }

func (s *summary) add(o estimator.Observation) {
	if len(s.delays[o.Direction]) < 1200 {
		s.delays[o.Direction] = append(s.delays[o.Direction], float64(o.Delta)/float64(time.Millisecond))
	}
}

func (s *summary) due(now time.Time) bool {
	if s.next.IsZero() {
		s.next = now.Add(time.Minute)
	}
	return !now.Before(s.next)
}

// log writes the minute's summary and starts the next minute.
func (s *summary) log(log *zap.Logger, now time.Time, c *controller.Controller, reflectors int) {
	fields := []zap.Field{zap.String("state", c.State().String()), zap.Int("active_reflectors", reflectors)}
	for _, d := range estimator.Directions {
		o := c.Observation(d)
		p50, p95 := percentile(s.delays[d], 0.5), percentile(s.delays[d], 0.95)
		fields = append(fields,
			zap.Float64(d.String()+"_rate_kbit", c.Rate(d)/1000),
			zap.Float64(d.String()+"_achieved_kbit", o.Achieved/1000),
			zap.Float64(d.String()+"_capacity_estimate_kbit", o.CapacityEstimate/1000),
			zap.Float64(d.String()+"_delay_p50_ms", p50),
			zap.Float64(d.String()+"_delay_p95_ms", p95))
		s.delays[d] = s.delays[d][:0]
	}
	log.Info("summary", fields...)
	s.next = now.Add(time.Minute)
}

func percentile(v []float64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[max(int(math.Ceil(p*float64(len(s))))-1, 0)]
}
