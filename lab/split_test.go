package lab

import (
	"testing"
	"time"

	"github.com/autoshape/autoshape/estimator"
)

// TestStepSeriesAt: a value holds from its time to the next; 0 before the
// first.
func TestStepSeriesAt(t *testing.T) {
	s := stepSeries{T: []time.Duration{100 * time.Millisecond, 200 * time.Millisecond}, V: []float64{5, 7}}
	for _, c := range []struct {
		at   time.Duration
		want float64
	}{
		{0, 0}, {99 * time.Millisecond, 0}, {100 * time.Millisecond, 5}, {199 * time.Millisecond, 5},
		{200 * time.Millisecond, 7}, {time.Hour, 7},
	} {
		if got := s.at(c.at); got != c.want {
			t.Errorf("at(%v) = %v, want %v", c.at, got, c.want)
		}
	}
	if got := (stepSeries{}).at(time.Second); got != 0 {
		t.Errorf("empty series at 1s = %v, want 0", got)
	}
}

// TestGuestSchemeRates: the rates the router half hands back, one every
// RateStep from the start, read back at any time of the run; before the
// start the first, after the end the last.
func TestGuestSchemeRates(t *testing.T) {
	g := &guestRouter{out: routerOutcome{RateStep: 10 * time.Millisecond, Changes: [2]int{estimator.Down: 2}}}
	g.out.Rates[estimator.Down] = []float64{1e6, 2e6, 3e6}
	s := guestScheme{g}
	r := s.rates(time.Time{})
	for _, c := range []struct {
		at   time.Duration
		want float64
	}{
		{-time.Second, 1e6}, {0, 1e6}, {9 * time.Millisecond, 1e6}, {10 * time.Millisecond, 2e6},
		{25 * time.Millisecond, 3e6}, {time.Minute, 3e6},
	} {
		if got := r[estimator.Down](c.at); got != c.want {
			t.Errorf("download rate at %v = %v, want %v", c.at, got, c.want)
		}
	}
	if got := r[estimator.Up](time.Second); got != 0 {
		t.Errorf("upload rate with none handed back = %v, want 0", got)
	}
	if s.changes(estimator.Down) != 2 || s.changes(estimator.Up) != 0 {
		t.Errorf("changes %d/%d, want 2/0", s.changes(estimator.Down), s.changes(estimator.Up))
	}
}

// TestParseCPULine: idle and iowait are idle, every other field busy; a
// line that is not the CPUs' total is refused.
func TestParseCPULine(t *testing.T) {
	busy, idle, err := parseCPULine("cpu  10 1 20 300 5 2 3 4 0 0")
	if err != nil || busy != 40 || idle != 305 {
		t.Errorf("parseCPULine = %d, %d, %v; want 40, 305, nil", busy, idle, err)
	}
	for _, bad := range []string{"", "cpu0 1 2 3 4 5", "cpu 1 2 x 4 5 6", "intr 1 2 3 4 5"} {
		if _, _, err := parseCPULine(bad); err == nil {
			t.Errorf("parseCPULine(%q): no error", bad)
		}
	}
}

// TestBaselines: the least delay each way of the answered probes; none
// answered is no baseline (0 would count the path's whole delay as added).
func TestBaselines(t *testing.T) {
	ms := time.Millisecond
	if b, ok := baselines(nil); ok || b != ([2]time.Duration{}) {
		t.Errorf("no samples: %v, %v; want none", b, ok)
	}
	if _, ok := baselines([]ProbeSample{{Lost: true}, {Lost: true}}); ok {
		t.Error("only lost probes gave a baseline")
	}
	b, ok := baselines([]ProbeSample{{Down: 27 * ms, Up: 26 * ms}, {Lost: true}, {Down: 25 * ms, Up: 28 * ms}})
	if want := ([2]time.Duration{25 * ms, 26 * ms}); !ok || b != want {
		t.Errorf("baselines = %v, %v; want %v", b, ok, want)
	}
}
