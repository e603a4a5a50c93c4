package sim_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

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
	errTests := []struct {
		name, in string
		want     []string
	}{
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
