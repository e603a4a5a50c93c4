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
	cuts   [2]int       // rate changes down that were events
}

func newSummary() *summary { return &summary{} }

func (s *summary) add(o estimator.Observation) {
	if len(s.delays[o.Direction]) < 1200 {
		s.delays[o.Direction] = append(s.delays[o.Direction], float64(o.Delta)/float64(time.Millisecond))
	}
}

// decision counts d when it is a cut.
func (s *summary) decision(d controller.Decision) {
	if !d.Gradual() && d.To < d.From {
		s.cuts[d.Direction]++
	}
}

func (s *summary) due(now time.Time) bool {
	if s.next.IsZero() {
		s.next = now.Add(time.Minute)
	}
	return !now.Before(s.next)
}

// log writes the minute's summary and starts the next minute: whole kbit/s,
// delays to 0.1 ms, CAKE's estimate only where there is one, and the cuts
// of the minute, most of which a busy link logs at DEBUG.
func (s *summary) log(log *zap.Logger, now time.Time, c *controller.Controller, reflectors int) {
	fields := make([]zap.Field, 0, 12)
	fields = append(fields, zap.String("state", c.State().String()), zap.Int("reflectors", reflectors))
	for _, d := range estimator.Directions {
		o := c.Observation(d)
		dir := d.String()
		fields = append(fields,
			zap.Int64(dir+"_rate_kbit", kbit(c.Rate(d))),
			zap.Int64(dir+"_achieved_kbit", kbit(o.Achieved)))
		if o.CapacityEstimate > 0 {
			fields = append(fields, zap.Int64(dir+"_capacity_estimate_kbit", kbit(o.CapacityEstimate)))
		}
		fields = append(fields,
			zap.Float64(dir+"_delay_p50_ms", tenths(percentile(s.delays[d], 0.5))),
			zap.Float64(dir+"_delay_p95_ms", tenths(percentile(s.delays[d], 0.95))),
			zap.Int(dir+"_cuts", s.cuts[d]))
		s.delays[d], s.cuts[d] = s.delays[d][:0], 0
	}
	log.Info("summary", fields...)
	s.next = now.Add(time.Minute)
}

func kbit(bps float64) int64 { return int64(math.Round(bps / 1000)) }

func tenths(v float64) float64 { return math.Round(v*10) / 10 }

func percentile(v []float64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[max(int(math.Ceil(p*float64(len(s))))-1, 0)]
}
