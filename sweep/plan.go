package sweep

import (
	"fmt"
	"math"
	"time"

	"github.com/autoshape/autoshape/controller"
	"github.com/autoshape/autoshape/estimator"
)

// A Plan is what one sweep does: per direction, the shaper at each fraction
// of the line rate and then unshaped, each step under load for Hold after an
// unloaded pause of Pause.
type Plan struct {
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

// NewPlan checks the sweep's flags and makes its plan: minRate is the
// lowest rate, in bit/s, that the link's shaper takes. Its errors name the
// flag at fault.
func NewPlan(direction, lineDown, lineUp string, from, to, step float64, hold, budget time.Duration, minRate float64) (Plan, error) {
	p := Plan{Hold: hold, Budget: budget}
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
	if p.Fractions, err = fractions(from, to, step); err != nil {
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

// fractions lists from, from+step, ... up to to (included when the steps
// land on it, to within rounding).
func fractions(from, to, step float64) ([]float64, error) {
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
