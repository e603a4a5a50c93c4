package sweep

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// A Report is the JSON shape of `autoshape sweep --json`: the steps that
// finished and the recommendation.
type Report struct {
	Steps          []Step         `json:"steps"`
	Recommendation Recommendation `json:"recommendation"`
}

// A Step is one step of a calibration sweep: the shaper at a fraction of the
// line rate (RateKbit 0: unshaped), what got through and the added delay
// under load.
type Step struct {
	Direction   string  `json:"direction"`
	Fraction    float64 `json:"fraction"`
	RateKbit    float64 `json:"rate_kbit"`
	GoodputKbit float64 `json:"goodput_kbit"`
	Delay       Delay   `json:"delay_ms"`
	Drops       uint64  `json:"drops"`
}

// A Delay is a step's added delay under load at three percentiles, in ms.
type Delay struct {
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
	P99 float64 `json:"p99"`
}

// A Recommendation is a sweep's verdict: the highest rates whose p95 added
// delay stays within the budget (0: none did).
type Recommendation struct {
	DownKbit float64 `json:"down_kbit"`
	UpKbit   float64 `json:"up_kbit"`
	BudgetMs float64 `json:"budget_ms"`
}

// An Output is what `autoshape sweep --json` prints: the report, and the
// directions the sweep could not complete, with the reason.
type Output struct {
	Report
	Incomplete []Failure `json:"incomplete,omitempty"`
}

// A Failure is a direction that was not swept to its end.
type Failure struct {
	Direction string `json:"direction"`
	Error     string `json:"error"`
}

// An IncompleteError ends a sweep that could not complete every direction;
// the report beside it holds the steps that finished and the recommendation
// of each direction that completed.
type IncompleteError struct {
	Failed []Failure
}

func (e *IncompleteError) Error() string {
	var parts []string
	for _, f := range e.Failed {
		parts = append(parts, fmt.Sprintf("the %s sweep was not completed: %s", f.Direction, f.Error))
	}
	return strings.Join(parts, "; ")
}

// recommend picks per direction the highest shaped rate whose p95 added
// delay is within the budget (0 when none is).
func recommend(steps []Step, budget time.Duration) Recommendation {
	r := Recommendation{BudgetMs: ms(budget)}
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

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
