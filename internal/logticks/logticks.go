// Package logticks marks the log-scale axes of the tools' plots.
package logticks

import (
	"math"
	"strconv"

	"gonum.org/v1/plot"
)

// Ticks125 marks a log axis at 1, 2 and 5 times each power of ten, so that
// a range within one decade (78 to 231 ms) still gets labels.
type Ticks125 struct{}

// Ticks returns the marks within [lo, hi].
func (Ticks125) Ticks(lo, hi float64) []plot.Tick {
	var out []plot.Tick
	for d := math.Pow(10, math.Floor(math.Log10(lo))); d <= hi; d *= 10 {
		for _, m := range []float64{1, 2, 5} {
			if v := m * d; v >= lo && v <= hi {
				out = append(out, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'g', -1, 64)})
			}
		}
	}
	return out
}
