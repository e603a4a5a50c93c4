package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/autoshape/autoshape/sim"
)

func oracleAt(fraction float64, lagMs int) sim.Oracle {
	return sim.Oracle{Fraction: fraction, Window: 50 * time.Millisecond, Lag: time.Duration(lagMs) * time.Millisecond}
}

var inf = math.Inf(1)

// approx compares floats to 1e-9, NaN equal to NaN.
var approx = cmp.Comparer(func(a, b float64) bool {
	return a == b || math.IsNaN(a) && math.IsNaN(b) || math.Abs(a-b) < 1e-9
})

func TestP95AtUtil(t *testing.T) {
	rising := []point{{0.4, 50}, {0.6, 100}, {0.8, 300}}
	for _, tt := range []struct {
		name  string
		curve []point
		u     float64
		want  float64
	}{
		{"at a point", rising, 0.6, 100},
		{"between points", rising, 0.7, 200},
		{"below every point: the cheapest point", rising, 0.3, 50},
		{"above every point", rising, 0.81, inf},
		{"empty curve", nil, 0.5, inf},
		// A budget that buys delay and no throughput: the lower crossing.
		{"folded curve", []point{{0.4, 50}, {0.7, 80}, {0.5, 200}, {0.9, 400}}, 0.6, 70},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := p95AtUtil(tt.curve, tt.u); !cmp.Equal(got, tt.want, approx) {
				t.Errorf("p95AtUtil(%v, %v) = %v, want %v", tt.curve, tt.u, got, tt.want)
			}
		})
	}
}

func TestUtilAtP95(t *testing.T) {
	rising := []point{{0.4, 50}, {0.6, 100}, {0.8, 300}}
	for _, tt := range []struct {
		name  string
		curve []point
		d     float64
		want  float64
	}{
		{"at a point", rising, 100, 0.6},
		{"between points", rising, 200, 0.7},
		{"beyond every point", rising, 1000, 0.8},
		{"below every point", rising, 40, math.Inf(-1)},
		{"a later point does better", []point{{0.5, 90}, {0.4, 120}, {0.7, 60}}, 100, 0.7},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := utilAtP95(tt.curve, tt.d); !cmp.Equal(got, tt.want, approx) {
				t.Errorf("utilAtP95(%v, %v) = %v, want %v", tt.curve, tt.d, got, tt.want)
			}
		})
	}
}

func TestOracleGap(t *testing.T) {
	oracles := []point{{0.5, 40}, {0.7, 100}, {0.6, 150}}
	for _, tt := range []struct {
		name  string
		curve []point
		want  float64
	}{
		// 0.7-0.6 at p95 100, and 0.7-0.8 at 200: the oracle at 150 gets
		// less than the one at 100.
		{"both sides", []point{{0.6, 100}, {0.8, 200}}, 0},
		{"short of the oracle", []point{{0.4, 50}, {0.5, 120}}, 0.15},
		{"below every oracle's p95: left out", []point{{0.3, 20}, {0.6, 100}}, 0.1},
		{"no point matched", []point{{0.3, 20}}, math.NaN()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := oracleGap(tt.curve, oracles); !cmp.Equal(got, tt.want, approx) {
				t.Errorf("oracleGap(%v) = %v, want %v", tt.curve, got, tt.want)
			}
		})
	}
}

// lowestP95 takes a set of oracles as points, not a curve: no
// interpolation between them.
func TestLowestP95(t *testing.T) {
	oracles := []point{{0.5, 40}, {0.7, 100}, {0.8, 90}}
	for _, tt := range []struct {
		u, want float64
	}{
		{0.5, 40},
		{0.6, 90}, // not between 40 and 100
		{0.75, 90},
		{0.9, inf},
	} {
		if got := lowestP95(oracles, tt.u); got != tt.want {
			t.Errorf("lowestP95(%v) = %v, want %v", tt.u, got, tt.want)
		}
	}
}

func TestOverShares(t *testing.T) {
	auto := []float64{5, 20, 30, 40, 10}
	ref := []float64{5, 25, 10, 10, 30}
	over, avoidable := overShares(auto, ref, 15)
	if diff := cmp.Diff([]float64{0.6, 0.4}, []float64{over, avoidable}, approx); diff != "" {
		t.Errorf("overShares() mismatch (-want +got):\n%s", diff)
	}
	if over, av := overShares(nil, ref, 15); !math.IsNaN(over) || !math.IsNaN(av) {
		t.Errorf("overShares(nil) = %v, %v, want NaN, NaN", over, av)
	}
}

// The reference oracle gets at least autoshape's utilisation with the least
// time over the budget, or is the one that gets the most.
func TestRefOracle(t *testing.T) {
	oracles := []runPoint{
		{util: 0.5, delays: []float64{1, 1, 1, 1}},
		{util: 0.7, delays: []float64{30, 1, 1, 1}},
		{util: 0.8, delays: []float64{30, 30, 1, 1}},
	}
	for _, tt := range []struct {
		util float64
		want float64
	}{{0.4, 0.5}, {0.6, 0.7}, {0.75, 0.8}, {0.9, 0.8}} {
		if got := refOracle(oracles, tt.util, 15).util; got != tt.want {
			t.Errorf("refOracle(util %v) picked the oracle at %v, want %v", tt.util, got, tt.want)
		}
	}
}

func TestMedian(t *testing.T) {
	for _, tt := range []struct {
		v    []float64
		want float64
	}{
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{1, math.NaN(), 3}, 2},
		{[]float64{math.NaN()}, math.NaN()},
		{[]float64{1, 2, inf, inf}, inf},
		{[]float64{1, 2, 3, inf}, 2.5},
	} {
		if got := median(tt.v); !cmp.Equal(got, tt.want, approx) {
			t.Errorf("median(%v) = %v, want %v", tt.v, got, tt.want)
		}
	}
}

// figuresFor on a hand-made sweep: autoshape at 5, 15 and 60 ms, classic's
// default, two late oracles at the reference lag and one 20 ms late, which
// the figures leave out.
func TestFiguresFor(t *testing.T) {
	f := frontierFlags{budgets: []time.Duration{5 * time.Millisecond, 15 * time.Millisecond, 60 * time.Millisecond},
		thresholds: []time.Duration{30 * time.Millisecond}, fractions: []float64{0.9}, refLag: 50 * time.Millisecond}
	f.oracles = append(f.oracles, oracleAt(0.8, 50), oracleAt(0.95, 50), oracleAt(0.9, 20))
	ks, err := knobs(f)
	if err != nil {
		t.Fatal(err)
	}
	pts := []runPoint{
		{util: 0.50, p95: 100, delays: []float64{1, 1, 1, 1}},    // autoshape 5ms
		{util: 0.60, p95: 150, delays: []float64{20, 20, 1, 1}},  // 15ms
		{util: 0.70, p95: 300, delays: []float64{99, 99, 99, 1}}, // 60ms
		{util: 0.65, p95: 250},                                   // classic 30ms
		{util: 0.55, p95: 500},                                   // static 0.9
		{util: 0.60, p50: 20, p95: 120, delays: []float64{20, 1, 1, 1}},
		{util: 0.75, p50: 80, p95: 400, delays: []float64{20, 20, 20, 20}},
		{util: 0.90, p50: 1, p95: 10, delays: []float64{1, 1, 1, 1}}, // 20 ms late: not the reference
	}
	got := figuresFor(ks, pts)
	want := seedFigures{classicUtil: 0.65, classicP95: 250,
		ratio:       225.0 / 250,              // halfway from 150 to 300 ms
		oracleRatio: 400.0 / 250,              // only the 0.75 oracle gets 0.65
		gain:        0.6 + 0.1*100/150 - 0.65, // two thirds of the way from 150 to 300 ms
		gap:         (0 - 0.1) / 2,            // at 150 and 300 ms: the oracle at 120; none by 100 ms
		reach:       60, low: 0.50, high: 0.70,
		room: 0.60 - 0.50, // the oracle with p50 ≤ 60 ms
		over: 0.5, avoidable: 0.25,
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(seedFigures{}), approx); diff != "" {
		t.Errorf("figuresFor() mismatch (-want +got):\n%s", diff)
	}
}

func TestSummarizeSetChecks(t *testing.T) {
	run := func(name string, lte bool, ratio, reach, rise, room float64) dirRun {
		return dirRun{Set: "s", Case: name, Dir: "down", LTE: lte, Summary: runSummary{
			Ratio: figure(ratio), ReachMs: figure(reach), Rise: figure(rise), Room: figure(room)}}
	}
	pass := func(ss setSummary) []bool {
		var out []bool
		for _, c := range ss.Checks {
			out = append(out, c.Pass)
		}
		return out
	}
	for _, tt := range []struct {
		name string
		runs []dirRun
		want []bool // median, worst run, reach, rise
	}{
		{"all pass", []dirRun{run("a", true, 0.5, 15, 0.2, 0.3), run("b", false, 0.7, 60, 0, 0.5)}, []bool{true, true, true, true}},
		{"median over", []dirRun{run("a", true, 0.7, 15, 0.2, 0.3), run("b", true, 0.9, 15, 0.2, 0.3)}, []bool{false, true, true, true}},
		{"unreachable run", []dirRun{run("a", true, 0.5, 15, 0.2, 0.3), run("b", true, 0.5, 15, 0.2, 0.3), run("c", true, inf, inf, 0.2, 0.3)},
			[]bool{true, false, false, true}},
		{"flat where there is room", []dirRun{run("a", true, 0.5, 15, 0.05, 0.3)}, []bool{true, true, true, false}},
		{"flat without room", []dirRun{run("a", true, 0.5, 15, 0.05, 0.05), run("b", true, 0.5, 15, 0.05, math.NaN())}, []bool{true, true, true, true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ss := summarizeSet("s", tt.runs, 50*time.Millisecond)
			if diff := cmp.Diff(tt.want, pass(ss)); diff != "" {
				t.Errorf("checks mismatch (-want +got):\n%s\n%+v", diff, ss.Checks)
			}
		})
	}
}

// The check on runs over 1.0 also counts the reference oracle's: a bar that
// perfect knowledge, late, does not meet either.
func TestSummarizeSetOracleOver(t *testing.T) {
	run := func(name string, ratio, oracle float64) dirRun {
		return dirRun{Set: "s", Case: name, Dir: "up", Summary: runSummary{Ratio: figure(ratio), OracleRatio: figure(oracle)}}
	}
	for _, tt := range []struct {
		name string
		runs []dirRun
		want string
	}{
		{"none over", []dirRun{run("a", 0.5, 0.4)}, "the 20ms-late oracle: 0 over"},
		{"one each", []dirRun{run("a", 1.2, 0.8), run("b", 0.9, inf)}, "the 20ms-late oracle: 1 over; a up 1.20 (oracle 0.80)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ss := summarizeSet("s", tt.runs, 20*time.Millisecond)
			if got := ss.Checks[1].Detail; got != tt.want {
				t.Errorf("detail %q, want %q", got, tt.want)
			}
			if !strings.Contains(ss.Checks[0].Detail, "the 20ms-late oracle's median") {
				t.Errorf("median check's detail %q does not name the 20ms-late oracle", ss.Checks[0].Detail)
			}
		})
	}
}

func TestParetoPoints(t *testing.T) {
	pts := []curvePoint{{Knob: "a", Util: 0.5, P95: 100}, {Knob: "b", Util: 0.4, P95: 120}, {Knob: "c", Util: 0.7, P95: 90},
		{Knob: "d", Util: 0.8, P95: 200}, {Knob: "e", Util: 0.8, P95: 200}}
	var got []string
	for _, p := range paretoPoints(pts) {
		got = append(got, p.Knob)
	}
	if diff := cmp.Diff([]string{"c", "d"}, got); diff != "" {
		t.Errorf("paretoPoints() mismatch (-want +got):\n%s", diff)
	}
}

func TestFigureJSON(t *testing.T) {
	b, err := json.Marshal([]figure{0.12345, figure(math.NaN()), figure(inf), figure(math.Inf(-1))})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), `[0.123,null,"unreachable","unreachable"]`; got != want {
		t.Errorf("JSON = %s, want %s", got, want)
	}
}

func TestFrontierUsageErrors(t *testing.T) {
	empty := t.TempDir()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"-seeds", "0"}, `-seeds "0"`},
		{[]string{"-seeds", "5-4"}, `-seeds "5-4": want N (seeds 1 to N) or A-B`},
		{[]string{"-j", "0"}, "-j 0"},
		{[]string{"-duration", "-1s"}, "-duration -1s"},
		{[]string{"-duration", "10ms"}, "-duration 10ms"},
		{[]string{"-budgets", "5ms,soon"}, `-budgets: "soon"`},
		{[]string{"-budgets", "0s"}, "-budgets: 0s must be positive"},
		{[]string{"-budgets", "5ms,5ms"}, "-budgets: 5ms is listed twice"},
		{[]string{"-budgets", ""}, "-budgets: no value"},
		{[]string{"-thresholds", "-5ms"}, "-thresholds"},
		{[]string{"-fractions", "1.5"}, `-fractions: "1.5"`},
		{[]string{"-oracle-fractions", "x"}, "-oracle-fractions"},
		{[]string{"-oracle-drains", "-1s"}, "-oracle-drains"},
		{[]string{"-reference-lag", "30ms"}, "-reference-lag 30ms is not one of -oracle-lags [20ms 50ms]"},
		{[]string{"-oracle-lags", "20ms"}, "-reference-lag 50ms is not one of -oracle-lags [20ms]"},
		{[]string{"-generated", "lte-moon"}, `unknown profile "lte-moon"`},
		{[]string{"-traces", "/nonexistent", "-generated", "none"}, "-traces"},
		{[]string{"-traces", empty, "-generated", "none"}, "no NAME.down"},
		{[]string{"-traces", "", "-generated", "none"}, "no traces"},
		{[]string{"-png"}, "-png needs -plot"},
		{[]string{"-load", "sideways"}, `-load "sideways" is not "both", "down" or "up"`},
		{[]string{"-nosuch"}, "-nosuch"},
		{[]string{"stray"}, `unexpected argument "stray"`},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, _, stderr := runCmd(append([]string{"frontier"}, tt.args...)...)
			if code != 2 || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, stderr, tt.want)
			}
		})
	}
	// A pair missing its upload trace names the file.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "x.down"), []byte("1\n2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runCmd("frontier", "-traces", dir, "-generated", "none")
	if code != 2 || !strings.Contains(stderr, "x.up") {
		t.Errorf("missing x.up: exit %d, stderr %q; want 2 naming x.up", code, stderr)
	}
}

// small are the flags of a frontier run of a few seconds.
var small = []string{"-seeds", "1", "-duration", "5s", "-budgets", "5ms,60ms", "-thresholds", "30ms",
	"-fractions", "0.9", "-oracle-fractions", "0.8,0.95", "-oracle-windows", "50ms", "-oracle-drains", "0s", "-j", "2"}

func TestFrontierEndToEnd(t *testing.T) {
	// A recorded pair: 4 s of 6 and 3 Mbit/s.
	dir := t.TempDir()
	for _, f := range []struct {
		name string
		per  int // opportunities per 2 ms
	}{{"link.down", 1}, {"link.up", 0}} {
		var b strings.Builder
		for ms := 1; ms <= 4000; ms++ {
			if f.per == 1 || ms%2 == 0 {
				b.WriteString(strconv.Itoa(ms) + "\n")
			}
		}
		if err := os.WriteFile(filepath.Join(dir, f.name), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	plots := filepath.Join(t.TempDir(), "plots")
	args := append([]string{"frontier", "-traces", dir, "-generated", "poisson", "-plot", plots}, small...)
	code, stdout, stderr := runCmd(args...)
	if code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	for _, want := range []string{"| shared | link.down | 12.00 |", "| generated | poisson.up |",
		"shared, medians over 2 direction-runs", "generated, medians over 2 direction-runs",
		"shared: median p95 ratio", "generated: utilisation rises", "oracle-50ms"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	if n := strings.Count(stdout, "PASS ") + strings.Count(stdout, "FAIL "); n != 8 {
		t.Errorf("%d PASS/FAIL lines, want 4 per set:\n%s", n, stdout)
	}
	files, _ := filepath.Glob(filepath.Join(plots, "*.svg"))
	if len(files) != 4 {
		t.Errorf("plots %v, want one per direction-run (4)", files)
	}

	code, out, stderr := runCmd(append([]string{"frontier", "-traces", "", "-generated", "poisson", "-json"}, small...)...)
	if code != 0 {
		t.Fatalf("-json: exit %d, stderr:\n%s", code, stderr)
	}
	var rep struct {
		Simulations int
		Runs        []struct {
			Case, Dir string
			Curves    map[string][]curvePoint
		}
		Sets []struct {
			Set    string
			Checks []check
		}
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("-json output does not decode: %v\n%s", err, out)
	}
	// 2 budgets, 1 threshold, 1 fraction, 2 oracles at 2 lags.
	if rep.Simulations != 8 || len(rep.Runs) != 2 || len(rep.Sets) != 1 || len(rep.Sets[0].Checks) != 4 {
		t.Errorf("JSON: %d simulations, %d runs, sets %+v; want 8, 2 and one set of 4 checks", rep.Simulations, len(rep.Runs), rep.Sets)
	}
	for _, r := range rep.Runs {
		if got := len(r.Curves["autoshape"]); got != 2 {
			t.Errorf("%s %s: %d autoshape points, want 2", r.Case, r.Dir, got)
		}
	}

	// -load up: the upload alone, whose ACKs no longer wait in the
	// download's queue, so its curve moves; no download runs.
	code, upOnly, stderr := runCmd(append([]string{"frontier", "-traces", "", "-generated", "poisson", "-json", "-load", "up"}, small...)...)
	if code != 0 {
		t.Fatalf("-load up: exit %d, stderr:\n%s", code, stderr)
	}
	var rep3 struct {
		Load string
		Runs []struct {
			Dir    string
			Curves map[string][]curvePoint
		}
	}
	if err := json.Unmarshal([]byte(upOnly), &rep3); err != nil {
		t.Fatalf("-load up: %v\n%s", err, upOnly)
	}
	if rep3.Load != "up" || len(rep3.Runs) != 1 || rep3.Runs[0].Dir != "up" {
		t.Fatalf("-load up: load %q, runs %+v; want one upload run", rep3.Load, rep3.Runs)
	}
	for _, r := range rep.Runs {
		if r.Dir == "up" && cmp.Equal(r.Curves["autoshape"], rep3.Runs[0].Curves["autoshape"]) {
			t.Errorf("-load up: the upload's curve is the same as with the download loaded: %+v", r.Curves["autoshape"])
		}
	}

	// The same seed gives the same report, whatever the parallelism.
	_, again, _ := runCmd(append(append([]string{"frontier", "-traces", "", "-generated", "poisson", "-json"}, small...), "-j", "1")...)
	if diff := cmp.Diff(out, again); diff != "" {
		t.Errorf("a second run differs (-first +second):\n%s", diff)
	}

	// -reference-lag 20ms: the summary compares with the 20 ms-late oracle.
	_, ref20, stderr := runCmd(append(append([]string{"frontier", "-traces", "", "-generated", "poisson"}, small...), "-reference-lag", "20ms")...)
	if !strings.Contains(ref20, "the 20ms-late oracle's median") || strings.Contains(ref20, "50ms-late") {
		t.Errorf("-reference-lag 20ms: the summary does not compare with the 20 ms-late oracle alone:\n%s%s", ref20, stderr)
	}

	// -seeds 2-2 runs seed 2 alone: other draws, other figures, and the
	// report says which seeds.
	_, two, stderr := runCmd(append(append([]string{"frontier", "-traces", "", "-generated", "poisson", "-json"}, small...), "-seeds", "2-2")...)
	var rep2 struct {
		FirstSeed int `json:"first_seed"`
	}
	if err := json.Unmarshal([]byte(two), &rep2); err != nil {
		t.Fatalf("-seeds 2-2: %v\n%s", err, stderr)
	}
	if rep2.FirstSeed != 2 || two == out {
		t.Errorf("-seeds 2-2: first seed %d (want 2), same report as seed 1: %v", rep2.FirstSeed, two == out)
	}
}

func TestParseSeeds(t *testing.T) {
	for _, tt := range []struct {
		in        string
		first, n  int
		wantError bool
	}{
		{"4", 1, 4, false},
		{"1", 1, 1, false},
		{"5-8", 5, 4, false},
		{"3-3", 3, 1, false},
		{"1-100", 1, 100, false},
		{"0", 0, 0, true},
		{"-3", 0, 0, true},
		{"0-2", 0, 0, true},
		{"5-4", 0, 0, true},
		{"1-101", 0, 0, true},
		{"101", 0, 0, true},
		{"a-b", 0, 0, true},
		{"4-", 0, 0, true},
		{"", 0, 0, true},
	} {
		first, n, err := parseSeeds(tt.in)
		if (err != nil) != tt.wantError || first != tt.first || n != tt.n {
			t.Errorf("parseSeeds(%q) = %d, %d, %v; want %d, %d, error %v", tt.in, first, n, err, tt.first, tt.n, tt.wantError)
		}
	}
}
