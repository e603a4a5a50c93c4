package sim_test

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/autoshape/autoshape/sim"
)

// lte is a busy generated link used by the tests below; each test changes
// the part it is about.
func lte() sim.Cellular {
	return sim.Cellular{Mean: 10e6, Duration: 60 * time.Second,
		DriftSigma: 0.5, DriftTime: 5 * time.Second, FastSigma: 0.6, FastTime: 40 * time.Millisecond,
		FadesPerMinute: 4, FadeDepth: 0.8, FadeTime: time.Second,
		OutagesPerMinute: 4, OutageTime: 300 * time.Millisecond, Burst: 2}
}

func generate(t *testing.T, c sim.Cellular, seed uint64) *sim.Trace {
	t.Helper()
	tr, err := c.Generate("test", seed)
	if err != nil {
		t.Fatalf("Generate(%+v, %d) failed: %v", c, seed, err)
	}
	return tr
}

// perMs returns the bytes of each millisecond of one period.
func perMs(tr *sim.Trace) []int64 {
	out := make([]int64, tr.Period().Milliseconds())
	for i := range out {
		out[i] = tr.At(int64(i))
	}
	return out
}

func TestGenerateIsDeterministicPerSeed(t *testing.T) {
	a, b, c := generate(t, lte(), 7), generate(t, lte(), 7), generate(t, lte(), 8)
	if diff := cmp.Diff(perMs(a), perMs(b)); diff != "" {
		t.Errorf("the same seed gave different traces (-first +second):\n%s", diff)
	}
	if cmp.Equal(perMs(a), perMs(c)) {
		t.Errorf("seeds 7 and 8 gave the same trace")
	}
	if got := a.Period(); got != time.Minute {
		t.Errorf("Period() = %v, want the asked 1m0s", got)
	}
}

// The mean is the asked one, whatever else varies, within the noise of
// drawing the opportunities.
func TestGenerateKeepsTheMean(t *testing.T) {
	for _, tt := range []struct {
		name string
		edit func(*sim.Cellular)
	}{
		{"lte", func(*sim.Cellular) {}},
		{"poisson", func(c *sim.Cellular) { *c = sim.Cellular{Mean: 3e6, Duration: time.Minute} }},
		{"many outages", func(c *sim.Cellular) { c.OutagesPerMinute = 30 }},
		{"deep drift", func(c *sim.Cellular) { c.DriftSigma = 1.5 }},
		{"big bursts", func(c *sim.Cellular) { c.Burst = 20 }},
		{"slow link", func(c *sim.Cellular) { c.Mean = 200e3; c.Duration = 5 * time.Minute }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := lte()
			tt.edit(&c)
			for seed := uint64(1); seed <= 3; seed++ {
				got := sim.MeasureTrace(generate(t, c, seed)).MeanMbps * 1e6
				if math.Abs(got/c.Mean-1) > 0.05 {
					t.Errorf("seed %d: mean %.0f bit/s, want within 5 %% of %.0f", seed, got, c.Mean)
				}
			}
		})
	}
}

// Each part moves the statistic it is about, in the direction it should.
func TestGenerateParameterEffects(t *testing.T) {
	stat := func(c sim.Cellular) sim.TraceStats {
		var sum sim.TraceStats
		for seed := uint64(1); seed <= 3; seed++ {
			s := sim.MeasureTrace(generate(t, c, seed))
			sum.CV1s += s.CV1s / 3
			sum.OutageShare += s.OutageShare / 3
		}
		return sum
	}
	busyMs := func(c sim.Cellular) int {
		n := 0
		for _, b := range perMs(generate(t, c, 1)) {
			if b > 0 {
				n++
			}
		}
		return n
	}
	with := func(edit func(*sim.Cellular)) sim.Cellular { c := lte(); edit(&c); return c }

	none, some, many := with(func(c *sim.Cellular) { c.OutagesPerMinute = 0 }), lte(), with(func(c *sim.Cellular) { c.OutagesPerMinute = 20 })
	if a, b, c := stat(none).OutageShare, stat(some).OutageShare, stat(many).OutageShare; !(a < b && b < c) {
		t.Errorf("outage share with 0, 4, 20 outages a minute = %.3f, %.3f, %.3f, want increasing", a, b, c)
	}
	if got := stat(sim.Cellular{Mean: 10e6, Duration: time.Minute}).OutageShare; got != 0 {
		t.Errorf("a 10 Mbit/s Poisson link has empty 100 ms windows: share %.3f", got)
	}
	calm := with(func(c *sim.Cellular) { c.DriftSigma, c.FadesPerMinute = 0.1, 0 })
	if a, b := stat(calm).CV1s, stat(lte()).CV1s; !(a < b) {
		t.Errorf("CV at 1 s: calm %.2f, with drift and fades %.2f, want the first lower", a, b)
	}
	if a, b := busyMs(with(func(c *sim.Cellular) { c.Burst = 1 })), busyMs(with(func(c *sim.Cellular) { c.Burst = 10 })); !(b < a/2) {
		t.Errorf("milliseconds with an opportunity: burst 1 %d, burst 10 %d, want far fewer with bursts", a, b)
	}
}

func TestGenerateRejectsBadParameters(t *testing.T) {
	for _, tt := range []struct {
		edit func(*sim.Cellular)
		want string
	}{
		{func(c *sim.Cellular) { c.Mean = 0 }, "Mean"},
		{func(c *sim.Cellular) { c.Mean = math.NaN() }, "Mean"},
		{func(c *sim.Cellular) { c.Mean = 20e9 }, "Mean"},
		{func(c *sim.Cellular) { c.Duration = 500 * time.Millisecond }, "Duration"},
		{func(c *sim.Cellular) { c.Duration = 2 * time.Hour }, "Duration"},
		{func(c *sim.Cellular) { c.Duration = time.Second + time.Microsecond }, "whole milliseconds"},
		{func(c *sim.Cellular) { c.DriftSigma = -1 }, "DriftSigma"},
		{func(c *sim.Cellular) { c.DriftTime = 0 }, "DriftTime"},
		{func(c *sim.Cellular) { c.FastSigma = 4 }, "FastSigma"},
		{func(c *sim.Cellular) { c.FastTime = 0 }, "FastTime"},
		{func(c *sim.Cellular) { c.FadesPerMinute = -1 }, "FadesPerMinute"},
		{func(c *sim.Cellular) { c.FadeDepth = 1.5 }, "FadeDepth"},
		{func(c *sim.Cellular) { c.FadeTime = 0 }, "FadeTime"},
		{func(c *sim.Cellular) { c.OutagesPerMinute = math.Inf(1) }, "OutagesPerMinute"},
		{func(c *sim.Cellular) { c.OutageTime = 0 }, "OutageTime"},
		{func(c *sim.Cellular) { c.Burst = 0.5 }, "Burst"},
	} {
		t.Run(tt.want, func(t *testing.T) {
			c := lte()
			tt.edit(&c)
			_, err := c.Generate("bad", 1)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "bad") {
				t.Errorf("Generate() error = %v, want one naming %q and the trace", err, tt.want)
			}
		})
	}
}

// The default profiles generate in both directions, with the means they
// ask, and the directions differ.
func TestProfiles(t *testing.T) {
	seen := map[string]bool{}
	for _, p := range sim.Profiles() {
		if seen[p.Name] {
			t.Errorf("profile %q listed twice", p.Name)
		}
		seen[p.Name] = true
		down, up, err := p.Traces(1)
		if err != nil {
			t.Fatalf("%s: Traces(1) failed: %v", p.Name, err)
		}
		if want := "gen:" + p.Name + ".down#1"; down.Name != want {
			t.Errorf("down trace named %q, want %q", down.Name, want)
		}
		for _, d := range []struct {
			tr *sim.Trace
			c  sim.Cellular
		}{{down, p.Down}, {up, p.Up}} {
			if got := sim.MeasureTrace(d.tr).MeanMbps * 1e6; math.Abs(got/d.c.Mean-1) > 0.05 {
				t.Errorf("%s: mean %.0f bit/s, want within 5 %% of %.0f", d.tr.Name, got, d.c.Mean)
			}
		}
	}
	if len(seen) < 4 {
		t.Errorf("%d profiles, want at least 4", len(seen))
	}
}

func TestMeasureTrace(t *testing.T) {
	// 2 s: one opportunity per ms in the first second, none in the second
	// but for the opportunity at its end, which falls on millisecond 0.
	var b strings.Builder
	for ms := 1; ms < 1000; ms++ {
		b.WriteString(strconv.Itoa(ms) + "\n")
	}
	b.WriteString("2000\n")
	gap := mustMahimahi(t, b.String())
	for _, tt := range []struct {
		name string
		tr   *sim.Trace
		want sim.TraceStats
	}{
		{"constant", mustSchedule(t, "12mbit"), sim.TraceStats{MeanMbps: 12}},
		{"half empty", gap, sim.TraceStats{MeanMbps: 6, CV1s: 1, OutageShare: 0.5}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := sim.MeasureTrace(tt.tr)
			if diff := cmp.Diff(tt.want, got, cmp.Comparer(func(a, b float64) bool { return math.Abs(a-b) < 1e-9 })); diff != "" {
				t.Errorf("MeasureTrace() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}
