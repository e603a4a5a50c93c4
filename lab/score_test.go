package lab

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/autoshape/autoshape/estimator"
	"github.com/autoshape/autoshape/sim"
)

// The lab scores added delay as the simulator does: beyond the baseline and
// beyond what an empty queue would wait for the capacity at that instant.
// A probe in a silent stretch of the capacity is not blamed for the silence,
// and a lost probe keeps its slot without counting in the percentiles.
func TestScoreCountsAddedDelayAsTheSimulator(t *testing.T) {
	// 1 Mbit/s, silent from 1 s to 1.5 s (a Mahimahi-like trace written as
	// a schedule cannot be silent, so write the opportunities out).
	var lines strings.Builder
	for ms := 1; ms <= 3000; ms += 12 { // one 1500-byte packet per 12 ms
		if ms > 1000 && ms <= 1500 {
			continue
		}
		fmt.Fprintln(&lines, ms)
	}
	tr, err := sim.ParseMahimahi("t", strings.NewReader(lines.String()))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	base := [2]time.Duration{estimator.Down: 10 * time.Millisecond, estimator.Up: 10 * time.Millisecond}
	var probes []ProbeSample
	for i := range 60 { // 20 Hz for 3 s
		sent := start.Add(time.Duration(i) * 50 * time.Millisecond)
		p := ProbeSample{Sent: sent, Up: 10 * time.Millisecond, Down: 15 * time.Millisecond}
		switch {
		case i == 22: // sent at 1.1 s, into the silence: waits until 1.5 s
			p.Down = 10*time.Millisecond + 400*time.Millisecond
		case i == 40:
			p.Lost = true
		}
		probes = append(probes, p)
	}
	var series [2]sim.Series
	for i := range 30 {
		series[estimator.Down].T = append(series[estimator.Down].T, float64(i+1)/10)
		series[estimator.Down].Capacity = append(series[estimator.Down].Capacity, 1)
		series[estimator.Down].Goodput = append(series[estimator.Down].Goodput, 1)
	}
	cfg := RunConfig{Capacity: [2]*sim.Trace{estimator.Down: tr}, Budget: 15 * time.Millisecond}
	rs := score(cfg, Scheme{Name: "unshaped"}, fixedScheme{}, start, series, [2]int64{}, probes, base, [2]*sim.Delivery{})
	if len(rs) != 1 {
		t.Fatalf("got %d results, want 1", len(rs))
	}
	d := rs[0].Delay
	// Every answered probe waited 5 ms over the baseline; the one in the
	// silence waited 400 ms, 390 ms of which an empty queue would have too.
	if d.P50 < 4 || d.P50 > 6 || d.P99 > 15 {
		t.Errorf("delays %+v: want about 5 ms throughout (the silence is not counted)", d)
	}
	if rs[0].OverBudget != 0 {
		t.Errorf("over budget %v, want 0", rs[0].OverBudget)
	}
}
