package sim_test

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/autoshape/autoshape/controller"
	"github.com/autoshape/autoshape/sim"
)

func mustMahimahi(t *testing.T, text string) *sim.Trace {
	t.Helper()
	tr, err := sim.ParseMahimahi("test", strings.NewReader(text))
	if err != nil {
		t.Fatalf("ParseMahimahi(%q) failed: %v", text, err)
	}
	return tr
}

func mustSchedule(t testing.TB, s string) *sim.Trace {
	t.Helper()
	tr, err := sim.ParseSchedule(s)
	if err != nil {
		t.Fatalf("ParseSchedule(%q) failed: %v", s, err)
	}
	return tr
}

func TestParseMahimahi(t *testing.T) {
	// Opportunities at 1, 2, 2 and 4 ms: the period is 4 ms, and the one at
	// 4 ms falls on millisecond 0 of each period.
	tr := mustMahimahi(t, "# a comment\n1\n2\n\n2\n4\n")
	if got := tr.Period(); got != 4*time.Millisecond {
		t.Errorf("Period() = %v, want 4ms", got)
	}
	if tr.IsSchedule() || tr.Steps() != nil {
		t.Errorf("a recorded trace reports itself as a schedule")
	}
	if tr.Name != "test" {
		t.Errorf("Name = %q, want %q", tr.Name, "test")
	}
	var cum, at []int64
	for ms := int64(0); ms <= 9; ms++ {
		cum = append(cum, tr.Cum(ms))
		at = append(at, tr.At(ms))
	}
	// One period delivers 4 x 1500 bytes; the second repeats the first.
	wantCum := []int64{0, 1500, 3000, 6000, 6000, 7500, 9000, 12000, 12000, 13500}
	wantAt := []int64{1500, 1500, 3000, 0, 1500, 1500, 3000, 0, 1500, 1500}
	if diff := cmp.Diff(wantCum, cum); diff != "" {
		t.Errorf("Cum(0..9) mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantAt, at); diff != "" {
		t.Errorf("At(0..9) mismatch (-want +got):\n%s", diff)
	}
	if got, want := tr.Cum(8), 2*tr.Cum(4); got != want {
		t.Errorf("Cum over two periods = %d, want twice one period's %d", got, want)
	}
	if got, want := tr.Cum(4000), 1000*tr.Cum(4); got != want {
		t.Errorf("Cum over 1000 periods = %d, want %d", got, want)
	}
}

func TestParseMahimahiErrors(t *testing.T) {
	tests := []struct {
		name, text string
		want       string
	}{
		{name: "empty", text: "", want: "trace bad: no delivery opportunities"},
		{name: "only comments", text: "# nothing\n\n", want: "no delivery opportunities"},
		{name: "not a number", text: "1\n2\nthree\n", want: `line 3: "three" is not a whole number`},
		{name: "fraction", text: "1.5\n", want: "line 1:"},
		{name: "decreasing", text: "1\n5\n3\n", want: "line 3: timestamp 3 is before the previous one (5)"},
		{name: "decreasing after a comment", text: "# c\n5\n\n3\n", want: "line 4:"},
		{name: "negative", text: "-1\n", want: "line 1: negative timestamp"},
		{name: "all zeros", text: "0\n0\n0\n", want: "all opportunities at 0 ms"},
		{name: "longer than a day", text: "1\n86400001\n", want: "line 2:"},
		{name: "longer than an hour", text: "1\n3600001\n", want: "line 2: timestamp 3600001 ms is beyond 3600000 ms"},
		// 1.5 M opportunities in one millisecond: 18 Tbit/s, and more
		// bytes than an int32 holds.
		{name: "above 10 Tbit/s in one ms", text: strings.Repeat("1\n", 1_500_000) + "2\n", want: "line 833334: more than 833333 opportunities in millisecond 1: above 10 Tbit/s"},
		// Those at the end of the period fall on millisecond 0.
		{name: "above 10 Tbit/s in ms 0 after the wrap", text: strings.Repeat("0\n", 833_333) + strings.Repeat("1\n", 833_333), want: "millisecond 0 with those at 1 ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := sim.ParseMahimahi("bad", strings.NewReader(tt.text))
			if err == nil {
				t.Fatalf("ParseMahimahi(%q) succeeded, want an error containing %q", tt.text, tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "bad") {
				t.Errorf("ParseMahimahi(%q) error = %q, want it to name the trace and contain %q", tt.text, err, tt.want)
			}
		})
	}
}

// TestParseMahimahiBounded: the memory a trace takes is bounded by its
// period, at most an hour, whatever the input: a 13-byte file that claims
// a day is refused without allocating for it, and an hour's trace takes
// one int64 per millisecond (and the slack of growing it).
func TestParseMahimahiBounded(t *testing.T) {
	alloc := func(text string) (uint64, error) {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, err := sim.ParseMahimahi("big", strings.NewReader(text))
		runtime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc, err
	}
	if n, err := alloc("1\n86400000\n"); err == nil || n > 1<<20 {
		t.Errorf("a 13-byte trace of a day: allocated %d bytes, error %v; want an error and under 1 MiB", n, err)
	}
	limit := uint64(3 * 8 * sim.MaxPeriod.Milliseconds())
	if n, err := alloc(fmt.Sprintf("1\n%d\n", sim.MaxPeriod.Milliseconds())); err != nil || n > limit {
		t.Errorf("a trace of %v: allocated %d bytes, error %v; want no error and at most %d bytes", sim.MaxPeriod, n, err, limit)
	}
}

// TestTraceFigures: what the longest, fastest traces taken deliver over
// the simulator's longest run (48 h) is positive and at most 10 Tbit/s:
// no figure overflows.
func TestTraceFigures(t *testing.T) {
	fast := strings.Repeat("1\n", 833_333) + "2\n"
	for _, tr := range []*sim.Trace{
		mustSchedule(t, "10000gbit"),
		mustSchedule(t, "1kbit@0s,10000gbit@24h"),
		mustMahimahi(t, fast),
		mustMahimahi(t, fmt.Sprintf("1\n%d\n", sim.MaxPeriod.Milliseconds())),
	} {
		for _, d := range []time.Duration{time.Second, sim.MaxPeriod, 48 * time.Hour} {
			if m := tr.MeanRate(d); !(m > 0 && m <= controller.MaxRate) {
				t.Errorf("%.20s: mean over %v = %v bit/s, want in (0, %v]", tr.Name, d, m, controller.MaxRate)
			}
		}
	}
}

func TestParseSchedule(t *testing.T) {
	tests := []struct {
		in   string
		want []sim.Step
	}{
		{in: "20mbit", want: []sim.Step{{At: 0, Rate: 20e6}}},
		{in: "850kbit@0s", want: []sim.Step{{At: 0, Rate: 850e3}}},
		{in: "40mbit@0s,10mbit@30s,40mbit@60s", want: []sim.Step{
			{At: 0, Rate: 40e6}, {At: 30 * time.Second, Rate: 10e6}, {At: time.Minute, Rate: 40e6}}},
		{in: " 0mbit@0s , 5mbit@1.5s ", want: []sim.Step{
			{At: 0, Rate: 0}, {At: 1500 * time.Millisecond, Rate: 5e6}}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			tr := mustSchedule(t, tt.in)
			if diff := cmp.Diff(tt.want, tr.Steps()); diff != "" {
				t.Errorf("Steps() mismatch (-want +got):\n%s", diff)
			}
			if !tr.IsSchedule() || tr.Name != tt.in || tr.Period() != 0 {
				t.Errorf("IsSchedule %v, Name %q, Period %v; want true, %q, 0", tr.IsSchedule(), tr.Name, tr.Period(), tt.in)
			}
		})
	}
}

func TestParseScheduleErrors(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{in: "", want: "schedule step 1"},
		{in: "abc", want: `schedule step 1 ("abc"): invalid rate "abc"`},
		{in: "abc@", want: `invalid rate "abc"`},
		{in: "-5mbit", want: "negative"},
		{in: "20mbit@5s", want: "the first step must start at 0s"},
		{in: "20mbit@0s,10mbit@0s", want: "schedule step 2 (\"10mbit@0s\"): time 0s is not after the previous step's 0s"},
		{in: "20mbit@0s,10mbit@30s,5mbit@20s", want: "schedule step 3"},
		{in: "20mbit@0s,10mbit", want: `schedule step 2 ("10mbit"): missing @TIME`},
		{in: "20mbit,10mbit@5s", want: `schedule step 1 ("20mbit"): missing @TIME`},
		{in: "20mbit@soon", want: `invalid time "soon"`},
		{in: "20mbit@0s,xyz@5s", want: "schedule step 2"},
		{in: "0mbit", want: "the last rate must be positive"},
		{in: "20mbit@0s,0mbit@5s", want: "the last rate must be positive"},
		// Rates whose bytes overflow an int64 within a minute, and steps
		// the simulator can never reach.
		{in: "2000000000000000000", want: `invalid rate "2000000000000000000": above 10 Tbit/s`},
		{in: "1e300gbit", want: "above 10 Tbit/s"},
		{in: ".000001", want: `schedule step 1 (".000001"): rate 1e-06 bit/s is under 1kbit`},
		{in: "40mbit@0s,999@10s", want: `schedule step 2 ("999@10s"): rate 999 bit/s is under 1kbit`},
		{in: "40mbit@0s,1e300gbit@10s", want: `schedule step 2 ("1e300gbit@10s"): invalid rate "1e300gbit": above 10 Tbit/s`},
		{in: "40mbit@0s,10mbit@2000000000s", want: "schedule step 2 (\"10mbit@2000000000s\"): time 555555h33m20s is beyond 24h0m0s"},
		{in: "40mbit@0s,10mbit@2562047h", want: "beyond 24h0m0s"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			_, err := sim.ParseSchedule(tt.in)
			if err == nil {
				t.Fatalf("ParseSchedule(%q) succeeded, want an error containing %q", tt.in, tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ParseSchedule(%q) error = %q, want it to contain %q", tt.in, err, tt.want)
			}
		})
	}
}

func TestDrain(t *testing.T) {
	// 12 Mbit/s is exactly 1500 bytes per millisecond.
	constant := mustSchedule(t, "12mbit")
	// One opportunity each at 0 (from the 10 ms stamp), 1 and 2 ms, then
	// nothing until the next period starts at 10 ms.
	gap := mustMahimahi(t, "1\n2\n10\n")
	// A single opportunity per 100 s: longer than Drain looks.
	sparse := mustMahimahi(t, "1\n100000\n")
	tests := []struct {
		name  string
		tr    *sim.Trace
		ms, q int64
		want  float64
	}{
		{name: "one ms", tr: constant, ms: 0, q: 1500, want: 1},
		{name: "two ms", tr: constant, ms: 0, q: 3000, want: 2},
		{name: "half a ms", tr: constant, ms: 0, q: 750, want: 0.5},
		{name: "later start", tr: constant, ms: 1234, q: 4500, want: 3},
		{name: "a second's worth", tr: constant, ms: 7, q: 1_500_000, want: 1000},
		{name: "within the burst", tr: gap, ms: 0, q: 3000, want: 2},
		{name: "across the gap", tr: gap, ms: 3, q: 1500, want: 8},
		{name: "half across the gap", tr: gap, ms: 3, q: 750, want: 7.5},
		{name: "into the next period", tr: gap, ms: 3, q: 4500, want: 10},
		{name: "gives up after a minute", tr: sparse, ms: 2, q: 1500, want: 60_000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.tr.Drain(tt.ms, tt.q); got != tt.want {
				t.Errorf("Drain(%d, %d) = %v, want %v", tt.ms, tt.q, got, tt.want)
			}
		})
	}
}

func TestRates(t *testing.T) {
	steps := mustSchedule(t, "40mbit@0s,10mbit@30s,40mbit@60s")
	gap := mustMahimahi(t, "1\n2\n10\n")
	tests := []struct {
		name string
		got  float64
		want float64
	}{
		{name: "constant mean", got: mustSchedule(t, "12mbit").MeanRate(10 * time.Second), want: 12e6},
		{name: "steps mean over the first minute", got: steps.MeanRate(time.Minute), want: 25e6},
		{name: "steps mean over the first 30s", got: steps.MeanRate(30 * time.Second), want: 40e6},
		{name: "mahimahi mean: 3 packets per 10ms", got: gap.MeanRate(time.Second), want: 3.6e6},
		{name: "zero duration", got: steps.MeanRate(0), want: 0},
		{name: "rate in the dip", got: steps.RateAt(40_000, 1000), want: 10e6},
		{name: "peak", got: steps.PeakRate(90 * time.Second), want: 40e6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %v, want %v", tt.got, tt.want)
			}
		})
	}
}

func TestDropsAndDefaultDuration(t *testing.T) {
	tests := []struct {
		in       string
		wantDrop []time.Duration
		wantDur  time.Duration
	}{
		{in: "40mbit@0s,10mbit@30s,40mbit@60s", wantDrop: []time.Duration{30 * time.Second}, wantDur: 90 * time.Second},
		{in: "40mbit@0s,10mbit@30s,5mbit@40s", wantDrop: []time.Duration{30 * time.Second, 40 * time.Second}, wantDur: 70 * time.Second},
		{in: "10mbit@0s,40mbit@30s", wantDur: time.Minute},
		{in: "20mbit", wantDur: time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			tr := mustSchedule(t, tt.in)
			if diff := cmp.Diff(tt.wantDrop, tr.Drops()); diff != "" {
				t.Errorf("Drops() mismatch (-want +got):\n%s", diff)
			}
			if got := tr.DefaultDuration(); got != tt.wantDur {
				t.Errorf("DefaultDuration() = %v, want %v", got, tt.wantDur)
			}
		})
	}
	if got := mustMahimahi(t, "1\n2\n10\n").DefaultDuration(); got != 10*time.Millisecond {
		t.Errorf("a recorded trace's DefaultDuration() = %v, want its period 10ms", got)
	}
}

func TestRises(t *testing.T) {
	tests := []struct {
		in   string
		want []time.Duration
	}{
		{in: "40mbit@0s,10mbit@30s,40mbit@60s", want: []time.Duration{60 * time.Second}},
		{in: "10mbit@0s,15mbit@10s,20mbit@20s", want: []time.Duration{10 * time.Second}},
		{in: "10mbit@0s,14mbit@10s", want: nil}, // under RiseFactor
		{in: "20mbit", want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, mustSchedule(t, tt.in).Rises()); diff != "" {
				t.Errorf("Rises() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLoadTrace(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.trace")
	if err := os.WriteFile(good, []byte("1\n2\n10\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.trace")
	if err := os.WriteFile(bad, []byte("5\n3\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	t.Run("file", func(t *testing.T) {
		tr, err := sim.LoadTrace(good)
		if err != nil {
			t.Fatalf("LoadTrace(%q) failed: %v", good, err)
		}
		if tr.IsSchedule() || tr.Period() != 10*time.Millisecond || tr.Name != good {
			t.Errorf("LoadTrace(file): schedule %v, period %v, name %q; want false, 10ms, %q", tr.IsSchedule(), tr.Period(), tr.Name, good)
		}
	})
	t.Run("schedule", func(t *testing.T) {
		tr, err := sim.LoadTrace("40mbit@0s,10mbit@30s")
		if err != nil {
			t.Fatalf("LoadTrace(schedule) failed: %v", err)
		}
		want := []sim.Step{{At: 0, Rate: 40e6}, {At: 30 * time.Second, Rate: 10e6}}
		if diff := cmp.Diff(want, tr.Steps()); diff != "" {
			t.Errorf("Steps() mismatch (-want +got):\n%s", diff)
		}
	})
	t.Run("long schedule", func(t *testing.T) {
		// Longer than a file name may be (255 bytes): still a schedule.
		var steps []string
		var want []sim.Step
		for i := range 30 {
			steps = append(steps, fmt.Sprintf("%dmbit@%ds", 10+i%2, 5*i))
			want = append(want, sim.Step{At: time.Duration(5*i) * time.Second, Rate: float64(10+i%2) * 1e6})
		}
		s := strings.Join(steps, ",")
		tr, err := sim.LoadTrace(s)
		if err != nil {
			t.Fatalf("LoadTrace(%d-byte schedule) failed: %v", len(s), err)
		}
		if diff := cmp.Diff(want, tr.Steps()); diff != "" {
			t.Errorf("Steps() mismatch (-want +got):\n%s", diff)
		}
	})
	t.Run("generated", func(t *testing.T) {
		// A generated trace's name draws it again: the trace frontier
		// runs for that profile, direction and seed.
		for _, p := range sim.Profiles() {
			down, up, err := p.Traces(3)
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []*sim.Trace{down, up} {
				got, err := sim.LoadTrace(want.Name)
				if err != nil {
					t.Fatalf("LoadTrace(%q) failed: %v", want.Name, err)
				}
				if got.Name != want.Name || got.Period() != want.Period() || got.Cum(want.Period().Milliseconds()) != want.Cum(want.Period().Milliseconds()) ||
					got.Bytes(1234, 5000) != want.Bytes(1234, 5000) {
					t.Errorf("LoadTrace(%q): name %q, period %v, not the trace Traces(3) draws", want.Name, got.Name, got.Period())
				}
			}
		}
	})
	errTests := []struct {
		name, in string
		want     []string
	}{
		{name: "generated: no such profile", in: "gen:poison.up#1", want: []string{`no profile "poison"`, "poisson"}},
		{name: "generated: no such direction", in: "gen:poisson.in#1", want: []string{`direction "in"`}},
		{name: "generated: a bad seed", in: "gen:poisson.up#-1", want: []string{`seed "-1"`}},
		{name: "generated: no seed", in: "gen:poisson.up", want: []string{"gen:NAME.DIR#SEED"}},
		// Neither a file nor a schedule: the message says why it is neither.
		{name: "garbage", in: "nonsense", want: []string{`"nonsense" is neither a trace file`, "no such file", `invalid rate "nonsense"`}},
		{name: "missing file", in: filepath.Join(dir, "missing.trace"), want: []string{"missing.trace", "no such file", "nor a schedule"}},
		{name: "bad file", in: bad, want: []string{bad, "line 2"}},
	}
	for _, tt := range errTests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := sim.LoadTrace(tt.in)
			if err == nil {
				t.Fatalf("LoadTrace(%q) succeeded, want an error", tt.in)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("LoadTrace(%q) error = %q, want it to contain %q", tt.in, err, w)
				}
			}
		})
	}
}

func TestEmbeddedTraces(t *testing.T) {
	down, up := sim.EmbeddedTraces()
	if down.Name != sim.EmbeddedDownName || up.Name != sim.EmbeddedUpName {
		t.Errorf("names %q, %q; want %q, %q", down.Name, up.Name, sim.EmbeddedDownName, sim.EmbeddedUpName)
	}
	for _, tr := range []*sim.Trace{down, up} {
		if tr.IsSchedule() || tr.Period() <= 0 || tr.MeanRate(tr.Period()) <= 0 {
			t.Errorf("%s: schedule %v, period %v, mean %v", tr.Name, tr.IsSchedule(), tr.Period(), tr.MeanRate(tr.Period()))
		}
	}
}

// checkTrace asserts what holds for every trace taken: a positive period (a
// recorded trace) of at most MaxPeriod, or steps from 0s to MaxScheduleTime
// (a schedule); capacity that never runs backwards; and a mean rate over
// any run from 1 ms to 48 h that is finite, positive and at most
// controller.MaxRate.
func checkTrace(t *testing.T, tr *sim.Trace) {
	t.Helper()
	if tr.IsSchedule() {
		steps := tr.Steps()
		for i, s := range steps {
			if math.IsNaN(s.Rate) || s.Rate < 0 || s.Rate > controller.MaxRate || s.At < 0 || s.At > sim.MaxScheduleTime || (i > 0 && s.At <= steps[i-1].At) || (i == 0 && s.At != 0) {
				t.Fatalf("step %d of %v is out of bounds or order", i, steps)
			}
		}
		if steps[len(steps)-1].Rate <= 0 {
			t.Fatalf("the last step of %v has no capacity", steps)
		}
	} else if p := tr.Period(); p <= 0 || p > sim.MaxPeriod {
		t.Fatalf("period %v: want in (0, %v]", p, sim.MaxPeriod)
	}
	if d := tr.DefaultDuration(); d <= 0 || d > 48*time.Hour {
		t.Fatalf("default duration %v: want in (0, 48h]", d)
	}
	last := int64(0)
	for _, ms := range []int64{0, 1, 2, 999, 1000, 59_999, 3_600_000, 86_400_000, 172_800_000} {
		c := tr.Cum(ms)
		if c < last || tr.At(ms) < 0 {
			t.Fatalf("Cum(%d) = %d after %d, At(%d) = %d: capacity ran backwards", ms, c, last, ms, tr.At(ms))
		}
		last = c
		if ms == 0 {
			continue
		}
		m := tr.MeanRate(time.Duration(ms) * time.Millisecond)
		if math.IsNaN(m) || m < 0 || m > controller.MaxRate*(1+1e-9) {
			t.Fatalf("mean over %d ms = %v bit/s: want in [0, %v]", ms, m, controller.MaxRate)
		}
	}
	if m := tr.MeanRate(48 * time.Hour); !(m > 0) {
		t.Fatalf("mean over 48h = %v bit/s: want positive", m)
	}
	if w := tr.Drain(0, sim.PacketBytes); math.IsNaN(w) || w < 0 || w > 60_000 {
		t.Fatalf("Drain(0, one packet) = %v ms: want in [0, 60000]", w)
	}
}

// FuzzParseMahimahi: any input is refused or read as a trace within the
// bounds, in memory bounded by MaxPeriod.
func FuzzParseMahimahi(f *testing.F) {
	for _, s := range []string{"1\n2\n10\n", "# c\n1\n2\n\n2\n4\n", "0\n0\n", "1\n86400000\n", "5\n3\n", "-1\n", "1\n3600000\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		tr, err := sim.ParseMahimahi("fuzz", bytes.NewReader(b))
		if err != nil {
			return
		}
		checkTrace(t, tr)
	})
}

// FuzzParseSchedule: any string is refused or read as a schedule within the
// bounds.
func FuzzParseSchedule(f *testing.F) {
	for _, s := range []string{"20mbit", "40mbit@0s,10mbit@30s,40mbit@60s", " 0mbit@0s , 5mbit@1.5s ", "2000000000000000000", "40mbit@0s,1e300gbit@10s", "40mbit@0s,10mbit@2562047h", "1kbit@0s,10000gbit@24h", "1mbit@0s,2mbit@1.1ms,3mbit@1.2ms"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tr, err := sim.ParseSchedule(s)
		if err != nil {
			return
		}
		checkTrace(t, tr)
	})
}
