package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/autoshape/autoshape/estimator"
	"github.com/autoshape/autoshape/internal/cli"
	"github.com/autoshape/autoshape/internal/logticks"
	"github.com/autoshape/autoshape/policies"
	"github.com/autoshape/autoshape/sim"
)

// The figures of the summary that take one knob value of a sweep.
const (
	lowBudget     = 5 * time.Millisecond  // utilisation at the smallest budget…
	highBudget    = 60 * time.Millisecond // …and at the largest a user is expected to set
	reachBudget   = 60 * time.Millisecond // classic's utilisation must be reached within it
	roomNeeded    = 0.10                  // the utilisation rise asked from lowBudget to highBudget
	ratioMedian   = 0.75                  // the median p95 ratio asked
	ratioWorstRun = 1.0                   // no direction-run above it
)

// frontierFlags are the frontier command's settings.
type frontierFlags struct {
	traces     string
	generated  []sim.Profile
	firstSeed  int // the seeds are firstSeed .. firstSeed+seeds-1
	seeds      int
	duration   time.Duration
	budgets    []time.Duration
	thresholds []time.Duration
	fractions  []float64
	oracles    []sim.Oracle
	refLag     time.Duration // the late oracle autoshape is measured against
	jobs       int
	// load is -load (both, down or up); loaded says which directions it
	// loads (by estimator.Direction). An unloaded direction runs with no
	// trace, and has no runs.
	load   string
	loaded [2]bool
}

// frontier sweeps each scheme's knob over a set of traces and seeds and
// prints utilisation against added delay, the summary figures of issue #19
// and its acceptance checks. See docs/frontier.md.
func frontier(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("frontier", flag.ContinueOnError)
	fs.SetOutput(stderr)
	traces := fs.String("traces", "../shared/traces", `folder of recorded trace pairs (NAME.down and NAME.up); "" for none`)
	generated := fs.String("generated", "all", `generated profiles, comma-separated, "all" or "none" (`+strings.Join(profileNames(), ", ")+")")
	seeds := fs.String("seeds", "4", `N for seeds 1 to N, or A-B for seeds A to B; each generated profile draws its traces anew per seed`)
	duration := fs.Duration("duration", 0, "simulated time of every run (default: each trace's length)")
	budgets := fs.String("budgets", "5ms,10ms,15ms,20ms,30ms,45ms,60ms,90ms", "autoshape's latency budgets")
	thresholds := fs.String("thresholds", "10ms,15ms,20ms,30ms,45ms,60ms,90ms", "classic's delay thresholds (its default, 30ms, is always run)")
	fractions := fs.String("fractions", "0.6,0.7,0.8,0.9,0.95,0.99", "static's fractions of the trace's mean capacity")
	oFractions := fs.String("oracle-fractions", "0.6,0.7,0.8,0.9,0.95", "the late oracles' fractions of the capacity")
	oWindows := fs.String("oracle-windows", "50ms,500ms", "the late oracles' windows")
	oDrains := fs.String("oracle-drains", "0s,300ms", "the late oracles' drain times (0s: none)")
	oLags := fs.String("oracle-lags", "20ms,50ms", "the oracles' lags")
	refLag := fs.Duration("reference-lag", 50*time.Millisecond, "the lag of the late oracle the summary compares with (one of -oracle-lags)")
	jobs := fs.Int("j", runtime.GOMAXPROCS(0), "simulations run at once")
	load := fs.String("load", "both", `the directions that carry load: "both", "down" or "up" (the other then carries none, and no traffic crosses its queue)`)
	asJSON := fs.Bool("json", false, "print JSON instead of tables")
	plotDir := fs.String("plot", "", "folder to write one figure per direction-run into (SVG; PNG with -png)")
	png := fs.Bool("png", false, "with -plot: write PNG instead of SVG")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: autoshape-tools frontier [FLAGS]\n\nSweeps autoshape's budget, classic's delay threshold, static's fraction and late oracles over\nrecorded and generated traces; prints utilisation against added delay, the summary and the acceptance checks.\n\n")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *png && *plotDir == "" {
		return cli.Usagef("-png needs -plot")
	}
	f := frontierFlags{traces: *traces, duration: *duration, jobs: *jobs, refLag: *refLag, load: *load}
	switch *load {
	case "both":
		f.loaded = [2]bool{true, true}
	case "down", "up":
		f.loaded[estimator.Up] = *load == "up"
		f.loaded[estimator.Down] = *load == "down"
	default:
		return cli.Usagef(`-load %q is not "both", "down" or "up"`, *load)
	}
	var err error
	if f.firstSeed, f.seeds, err = parseSeeds(*seeds); err != nil {
		return err
	}
	if f.generated, err = parseProfiles(*generated); err != nil {
		return err
	}
	switch {
	case f.jobs < 1:
		return cli.Usagef("-j %d must be at least 1", f.jobs)
	case f.duration < 0:
		return cli.Usagef("-duration %v is negative", f.duration)
	case f.duration > 0 && f.duration < time.Second:
		return cli.Usagef("-duration %v is shorter than 1s", f.duration)
	}
	if f.budgets, err = parseDurations("-budgets", *budgets, false); err != nil {
		return err
	}
	if f.thresholds, err = parseDurations("-thresholds", *thresholds, false); err != nil {
		return err
	}
	if def := policies.DefaultClassicConfig().DelayThreshold; !slices.Contains(f.thresholds, def) {
		f.thresholds = append(f.thresholds, def)
		slices.Sort(f.thresholds)
	}
	if f.fractions, err = parseFractions("-fractions", *fractions); err != nil {
		return err
	}
	of, err := parseFractions("-oracle-fractions", *oFractions)
	if err != nil {
		return err
	}
	ow, err := parseDurations("-oracle-windows", *oWindows, false)
	if err != nil {
		return err
	}
	od, err := parseDurations("-oracle-drains", *oDrains, true)
	if err != nil {
		return err
	}
	ol, err := parseDurations("-oracle-lags", *oLags, false)
	if err != nil {
		return err
	}
	if !slices.Contains(ol, f.refLag) {
		return cli.Usagef("-reference-lag %v is not one of -oracle-lags %v", f.refLag, ol)
	}
	for _, l := range ol {
		for _, fr := range of {
			for _, w := range ow {
				for _, d := range od {
					f.oracles = append(f.oracles, sim.Oracle{Fraction: fr, Window: w, Lag: l, Drain: d})
				}
			}
		}
	}
	cases, err := frontierCases(f)
	if err != nil {
		return err
	}
	start := time.Now()
	rep, err := runFrontier(f, cases)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "frontier: %d simulations in %v\n", rep.Simulations, time.Since(start).Round(time.Second))
	if *plotDir != "" {
		ext := ".svg"
		if *png {
			ext = ".png"
		}
		if err := plotFrontier(rep, *plotDir, ext); err != nil {
			return err
		}
	}
	if *asJSON {
		return writeJSON(stdout, rep)
	}
	return printFrontier(stdout, rep)
}

func profileNames() []string {
	var out []string
	for _, p := range sim.Profiles() {
		out = append(out, p.Name)
	}
	return out
}

// parseProfiles resolves -generated.
func parseProfiles(s string) ([]sim.Profile, error) {
	switch strings.TrimSpace(s) {
	case "all":
		return sim.Profiles(), nil
	case "none", "":
		return nil, nil
	}
	var out []sim.Profile
	for _, name := range splitList(s) {
		i := slices.IndexFunc(sim.Profiles(), func(p sim.Profile) bool { return p.Name == name })
		if i < 0 {
			return nil, cli.Usagef("-generated: unknown profile %q (known: %s)", name, strings.Join(profileNames(), ", "))
		}
		out = append(out, sim.Profiles()[i])
	}
	return out, nil
}

// parseDurations parses a flag's comma-separated durations: positive (or,
// with zero, not negative), distinct, returned in ascending order.
func parseDurations(flagName, s string, zero bool) ([]time.Duration, error) {
	var out []time.Duration
	for _, p := range splitList(s) {
		d, err := time.ParseDuration(p)
		if err != nil {
			return nil, cli.Usagef("%s: %q is not a duration such as 15ms", flagName, p)
		}
		if d < 0 || d == 0 && !zero {
			return nil, cli.Usagef("%s: %v must be positive", flagName, d)
		}
		if slices.Contains(out, d) {
			return nil, cli.Usagef("%s: %v is listed twice", flagName, d)
		}
		out = append(out, d)
	}
	if len(out) == 0 {
		return nil, cli.Usagef("%s: no value", flagName)
	}
	slices.Sort(out)
	return out, nil
}

// parseFractions parses a flag's comma-separated fractions in (0, 1].
func parseFractions(flagName, s string) ([]float64, error) {
	var out []float64
	for _, p := range splitList(s) {
		v, err := strconv.ParseFloat(p, 64)
		if err != nil || !(v > 0 && v <= 1) {
			return nil, cli.Usagef("%s: %q is not a fraction in (0, 1]", flagName, p)
		}
		if slices.Contains(out, v) {
			return nil, cli.Usagef("%s: %v is listed twice", flagName, v)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, cli.Usagef("%s: no value", flagName)
	}
	slices.Sort(out)
	return out, nil
}

// A frontierCase is one link in both directions: a recorded pair, or a
// generated profile drawn anew for each seed.
type frontierCase struct {
	set, name string
	lte       bool
	traces    [][2]*sim.Trace // per seed (index seed-1): down, up
}

// frontierCases loads the recorded pairs of f.traces and draws each
// generated profile's traces for every seed.
func frontierCases(f frontierFlags) ([]frontierCase, error) {
	var out []frontierCase
	if f.traces != "" {
		if _, err := os.Stat(f.traces); err != nil {
			return nil, cli.Usagef("-traces: %v", err)
		}
		// Glob fails only on a malformed pattern: a folder name with [.
		downs, err := filepath.Glob(filepath.Join(f.traces, "*.down"))
		if err == nil && len(downs) == 0 {
			err = errors.New("no NAME.down trace in it")
		}
		if err != nil {
			return nil, cli.Usagef("-traces %s: %v", f.traces, err)
		}
		for _, d := range downs {
			name := strings.TrimSuffix(filepath.Base(d), ".down")
			var pair [2]*sim.Trace
			for i, p := range []string{d, strings.TrimSuffix(d, ".down") + ".up"} {
				tr, err := sim.LoadTrace(p)
				if err != nil {
					return nil, cli.Usagef("-traces %s: %v", f.traces, err)
				}
				pair[i] = tr
			}
			c := frontierCase{set: "shared", name: name, lte: strings.Contains(name, "LTE")}
			for range f.seeds {
				c.traces = append(c.traces, pair)
			}
			out = append(out, c)
		}
	}
	for _, p := range f.generated {
		c := frontierCase{set: "generated", name: p.Name, lte: p.LTE}
		for s := f.firstSeed; s < f.firstSeed+f.seeds; s++ {
			d, u, err := p.Traces(uint64(s))
			if err != nil {
				return nil, err
			}
			c.traces = append(c.traces, [2]*sim.Trace{d, u})
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, cli.Usagef("no traces: give -traces or -generated")
	}
	return out, nil
}

// maxSeeds is the most seeds one run takes.
const maxSeeds = 100

// parseSeeds reads -seeds: N (seeds 1 to N) or A-B (seeds A to B), and
// returns the first seed and the count.
func parseSeeds(v string) (first, n int, err error) {
	bad := func() (int, int, error) {
		return 0, 0, cli.Usagef("-seeds %q: want N (seeds 1 to N) or A-B, with 1 <= A <= B and at most %d seeds", v, maxSeeds)
	}
	a, b, isRange := strings.Cut(v, "-")
	lo, err := strconv.Atoi(a)
	if err != nil {
		return bad()
	}
	hi := lo
	if isRange {
		if hi, err = strconv.Atoi(b); err != nil {
			return bad()
		}
	} else {
		lo = 1
	}
	if lo < 1 || hi < lo || hi-lo+1 > maxSeeds {
		return bad()
	}
	return lo, hi - lo + 1, nil
}

// A knob is one point of one scheme's sweep.
type knob struct {
	scheme string  // autoshape, classic, static, oracle-20ms, …
	label  string  // the knob's value as printed
	value  float64 // budget or threshold in ms, fraction
	run    sim.Scheme
	budget time.Duration // the run's budget (autoshape's knob; else the default)
	series bool          // keep the added delay over time (avoidable share)
	ref    bool          // a point of the reference late oracle
}

// knobs lists every point of every sweep: autoshape's budgets first, then
// classic's thresholds, static's fractions and the oracles by lag.
func knobs(f frontierFlags) ([]knob, error) {
	var out []knob
	for _, b := range f.budgets {
		s, err := sim.Schemes([]string{"autoshape"}, policies.BudgetConfig{Budget: b}, policies.DefaultClassicConfig())
		if err != nil {
			return nil, cli.Usagef("-budgets %v: %v", b, err)
		}
		out = append(out, knob{scheme: "autoshape", label: b.String(), value: ms(b), run: s[0], budget: b, series: true})
	}
	for _, th := range f.thresholds {
		cc := policies.DefaultClassicConfig()
		cc.DelayThreshold = th
		s, err := sim.Schemes([]string{"classic"}, policies.BudgetConfig{}, cc)
		if err != nil {
			return nil, cli.Usagef("-thresholds %v: %v", th, err)
		}
		out = append(out, knob{scheme: "classic", label: th.String(), value: ms(th), run: s[0]})
	}
	for _, fr := range f.fractions {
		run := sim.Scheme{Name: "static", Policy: func(_ estimator.Direction, _ policies.Bounds, mean float64) (policies.Policy, error) {
			return policies.NewFixed(fr * mean), nil
		}}
		out = append(out, knob{scheme: "static", label: strconv.FormatFloat(fr, 'g', -1, 64), value: fr, run: run})
	}
	for i := range f.oracles {
		o := f.oracles[i]
		ref := o.Lag == f.refLag
		out = append(out, knob{scheme: oracleScheme(o.Lag), label: oracleLabel(o), value: o.Fraction,
			run: sim.Scheme{Name: "oracle", Oracle: &o}, series: ref, ref: ref})
	}
	for i := range out {
		if out[i].budget == 0 {
			out[i].budget = estimator.DefaultBudget
		}
	}
	return out, nil
}

func oracleScheme(lag time.Duration) string { return "oracle-" + lag.String() }

func oracleLabel(o sim.Oracle) string {
	return fmt.Sprintf("%g/%v/%v", o.Fraction, o.Window, o.Drain)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// A runPoint is one knob's result in one direction on one seed.
type runPoint struct {
	util, p50, p95 float64
	delays         []float64 // added delay per 100 ms, when the knob keeps it
}

// referenceLag is the lag of the late oracle the summary compares with.
func (r frontierReport) referenceLag() time.Duration {
	return time.Duration(r.ReferenceLagMs * float64(time.Millisecond))
}

// A frontierReport is the JSON of `autoshape-tools frontier -json`.
type frontierReport struct {
	FirstSeed           int          `json:"first_seed"`
	Seeds               int          `json:"seeds"`
	BudgetsMs           []float64    `json:"budgets_ms"`
	ClassicThresholdsMs []float64    `json:"classic_thresholds_ms"`
	StaticFractions     []float64    `json:"static_fractions"`
	Oracles             []string     `json:"oracles"` // lag: fraction/window/drain
	ReferenceLagMs      float64      `json:"reference_lag_ms"`
	Load                string       `json:"load"` // both, down or up: the directions that carry load
	Simulations         int          `json:"simulations"`
	Traces              []traceRow   `json:"traces"`
	Runs                []dirRun     `json:"runs"`
	Sets                []setSummary `json:"sets"`
}

// A traceRow gives a trace's statistics (a generated one's: medians over
// its seeds).
type traceRow struct {
	Set   string         `json:"set"`
	Trace string         `json:"trace"`
	Stats sim.TraceStats `json:"stats"`
}

// A dirRun is one case in one direction: the curves (medians over seeds per
// knob) and the summary figures (each a median over seeds).
type dirRun struct {
	Set     string                  `json:"set"`
	Case    string                  `json:"case"`
	Dir     string                  `json:"dir"`
	LTE     bool                    `json:"lte"`
	Curves  map[string][]curvePoint `json:"curves"`
	Summary runSummary              `json:"summary"`
}

// A curvePoint is one knob's medians over seeds.
type curvePoint struct {
	Knob  string  `json:"knob"`
	Value float64 `json:"value"`
	Util  float64 `json:"utilization"`
	P50   float64 `json:"p50_ms"`
	P95   float64 `json:"p95_ms"`
	// Over and Avoidable are autoshape's shares of time over its budget, in
	// all and less the time the reference late oracle was over it too.
	Over      *float64 `json:"over_budget,omitempty"`
	Avoidable *float64 `json:"avoidable_over_budget,omitempty"`
}

// A figure is a summary figure: NaN (not defined) encodes as null, ±Inf
// (unreachable) as "unreachable".
type figure float64

func (f figure) MarshalJSON() ([]byte, error) {
	v := float64(f)
	switch {
	case math.IsNaN(v):
		return []byte("null"), nil
	case math.IsInf(v, 0):
		return []byte(`"unreachable"`), nil
	}
	return []byte(strconv.FormatFloat(math.Round(v*1000)/1000, 'f', -1, 64)), nil
}

// A runSummary holds one direction-run's figures, medians over seeds.
type runSummary struct {
	ClassicUtil figure `json:"classic_utilization"`
	ClassicP95  figure `json:"classic_p95_ms"`
	// Ratio is autoshape's p95 at classic's utilisation over classic's p95.
	Ratio figure `json:"p95_ratio_at_classic_utilization"`
	// OracleRatio is the same ratio for the reference late oracle: the
	// lowest p95 of any of its points that gets classic's utilisation. Where
	// it is over a bar, the bar asks more than late perfect knowledge gets.
	OracleRatio figure `json:"oracle_p95_ratio_at_classic_utilization"`
	// Gain is the utilisation autoshape gains at classic's p95.
	Gain figure `json:"utilization_gain_at_classic_p95"`
	// OracleGap is the mean utilisation the reference late oracle gets over
	// autoshape at autoshape's p95.
	OracleGap figure `json:"oracle_gap"`
	// ReachMs is the smallest budget at which autoshape gets classic's
	// utilisation.
	ReachMs  figure `json:"budget_reaching_classic_ms"`
	UtilLow  figure `json:"utilization_low_budget"`
	UtilHigh figure `json:"utilization_high_budget"`
	Rise     figure `json:"rise"`
	// Room is the reference oracle's best utilisation with a p50 within the
	// high budget, less autoshape's utilisation at the low budget.
	Room figure `json:"oracle_room"`
	// Over and Avoidable are at the default budget.
	Over      figure `json:"over_budget"`
	Avoidable figure `json:"avoidable_over_budget"`
}

// A setSummary holds the medians over a set's direction-runs and its checks.
type setSummary struct {
	Set   string `json:"set"`
	Runs  int    `json:"runs"`
	Ratio figure `json:"median_p95_ratio"`
	// OracleRatio is the reference late oracle's median ratio.
	OracleRatio figure  `json:"median_oracle_p95_ratio"`
	Gain        figure  `json:"median_utilization_gain"`
	OracleGap   figure  `json:"median_oracle_gap"`
	Avoidable   figure  `json:"median_avoidable_over_budget"`
	UtilLow     figure  `json:"median_utilization_low_budget"`
	UtilHigh    figure  `json:"median_utilization_high_budget"`
	Checks      []check `json:"checks"`
}

// A check is one acceptance line of issue #19.
type check struct {
	Pass   bool   `json:"pass"`
	Text   string `json:"text"`
	Detail string `json:"detail,omitempty"`
}

// runFrontier runs every knob on every case and seed, f.jobs at a time, and
// summarises.
func runFrontier(f frontierFlags, cases []frontierCase) (frontierReport, error) {
	ks, err := knobs(f)
	if err != nil {
		return frontierReport{}, err
	}
	// pts[case][seed][knob][dir]
	pts := make([][][][2]runPoint, len(cases))
	for c := range cases {
		pts[c] = make([][][2]runPoint, f.seeds)
		for s := range f.seeds {
			pts[c][s] = make([][2]runPoint, len(ks))
		}
	}
	per := f.seeds * len(ks)
	err = each(len(cases)*per, f.jobs, func(i int) error {
		c, s, k := i/per, i%per/len(ks), i%len(ks)
		cs, kn := cases[c], ks[k]
		cfg := sim.Config{Seed: uint64(f.firstSeed + s), Budget: kn.budget, Duration: f.duration, Series: kn.series}
		if f.loaded[estimator.Down] {
			cfg.Down = cs.traces[s][estimator.Down]
		}
		if f.loaded[estimator.Up] {
			cfg.Up = cs.traces[s][estimator.Up]
		}
		res, err := sim.Run(cfg, kn.run)
		if err != nil {
			return fmt.Errorf("%s, seed %d, %s %s: %w", cs.name, f.firstSeed+s, kn.scheme, kn.label, err)
		}
		for _, r := range res {
			d := 0
			if r.Direction == "up" {
				d = 1
			}
			p := runPoint{util: r.Utilization, p50: r.Delay.P50, p95: r.Delay.P95}
			if r.Series != nil {
				p.delays = r.Series.Delay
			}
			pts[c][s][k][d] = p
		}
		return nil
	})
	if err != nil {
		return frontierReport{}, err
	}
	rep := frontierReport{FirstSeed: f.firstSeed, Seeds: f.seeds, Simulations: len(cases) * per, StaticFractions: f.fractions,
		ReferenceLagMs: ms(f.refLag), Load: f.load}
	for _, b := range f.budgets {
		rep.BudgetsMs = append(rep.BudgetsMs, ms(b))
	}
	for _, th := range f.thresholds {
		rep.ClassicThresholdsMs = append(rep.ClassicThresholdsMs, ms(th))
	}
	for _, o := range f.oracles {
		rep.Oracles = append(rep.Oracles, o.Lag.String()+": "+oracleLabel(o))
	}
	for c, cs := range cases {
		for d, dir := range []string{"down", "up"} {
			if !f.loaded[d] {
				continue
			}
			var stats []sim.TraceStats
			for s := range f.seeds {
				stats = append(stats, sim.MeasureTrace(cs.traces[s][d]))
				if cs.set == "shared" {
					break
				}
			}
			rep.Traces = append(rep.Traces, traceRow{cs.set, cs.name + "." + dir, medianStats(stats)})
			rep.Runs = append(rep.Runs, summarizeRun(cs, dir, ks, pts[c], d))
		}
	}
	for _, set := range []string{"shared", "generated"} {
		var runs []dirRun
		for _, r := range rep.Runs {
			if r.Set == set {
				runs = append(runs, r)
			}
		}
		if len(runs) > 0 {
			rep.Sets = append(rep.Sets, summarizeSet(set, runs, f.refLag))
		}
	}
	return rep, nil
}

// each calls f(0) … f(n-1) on jobs goroutines and returns the first error.
func each(n, jobs int, f func(i int) error) error {
	next := make(chan int)
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for range min(jobs, n) {
		wg.Go(func() {
			for i := range next {
				if err := f(i); err != nil {
					once.Do(func() { first = err })
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return first
}

func medianStats(st []sim.TraceStats) sim.TraceStats {
	var m, cv, out []float64
	for _, s := range st {
		m, cv, out = append(m, s.MeanMbps), append(cv, s.CV1s), append(out, s.OutageShare)
	}
	return sim.TraceStats{MeanMbps: median(m), CV1s: median(cv), OutageShare: median(out)}
}

// A point is one knob's result on a curve, in sweep order.
type point struct{ util, p95 float64 }

// p95AtUtil returns the lowest p95 at which the curve (its points joined in
// sweep order) gets utilisation u or more: at a point, or where a segment
// crosses u. +Inf when no point reaches u.
func p95AtUtil(curve []point, u float64) float64 {
	best := math.Inf(1)
	for i, p := range curve {
		if p.util >= u {
			best = math.Min(best, p.p95)
		}
		if i == 0 {
			continue
		}
		q := curve[i-1]
		if (q.util-u)*(p.util-u) < 0 {
			t := (u - q.util) / (p.util - q.util)
			best = math.Min(best, q.p95+t*(p.p95-q.p95))
		}
	}
	return best
}

// utilAtP95 returns the highest utilisation the curve gets at a p95 of d or
// less: at a point, or where a segment crosses d. -Inf when every point's
// p95 is above d.
func utilAtP95(curve []point, d float64) float64 {
	best := math.Inf(-1)
	for i, p := range curve {
		if p.p95 <= d {
			best = math.Max(best, p.util)
		}
		if i == 0 {
			continue
		}
		q := curve[i-1]
		if (q.p95-d)*(p.p95-d) < 0 {
			t := (d - q.p95) / (p.p95 - q.p95)
			best = math.Max(best, q.util+t*(p.util-q.util))
		}
	}
	return best
}

// bestUtil returns the highest utilisation of any point with a p95 of d or
// less (a set of oracles is no curve: its frontier is a staircase), and
// false when there is none.
func bestUtil(points []point, d float64) (float64, bool) {
	best, ok := 0.0, false
	for _, p := range points {
		if p.p95 <= d && (!ok || p.util > best) {
			best, ok = p.util, true
		}
	}
	return best, ok
}

// lowestP95 returns the lowest p95 of any point with utilisation u or more
// (a set of oracles is no curve), +Inf when there is none.
func lowestP95(points []point, u float64) float64 {
	best := math.Inf(1)
	for _, p := range points {
		if p.util >= u {
			best = math.Min(best, p.p95)
		}
	}
	return best
}

// oracleGap is the mean, over the curve's points, of the oracles' best
// utilisation at the point's p95 or less less the point's own; points that
// no oracle matches are left out (NaN when none is matched).
func oracleGap(curve, oracles []point) float64 {
	sum, n := 0.0, 0
	for _, p := range curve {
		if u, ok := bestUtil(oracles, p.p95); ok {
			sum += u - p.util
			n++
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return sum / float64(n)
}

// overShares returns the share of intervals in which delays are over the
// budget, and of those in which ref's are not: the avoidable share.
func overShares(delays, ref []float64, budget float64) (over, avoidable float64) {
	if len(delays) == 0 {
		return math.NaN(), math.NaN()
	}
	n, a := 0, 0
	for i, d := range delays {
		if d > budget {
			n++
			if i < len(ref) && ref[i] <= budget {
				a++
			}
		}
	}
	return float64(n) / float64(len(delays)), float64(a) / float64(len(delays))
}

// refOracle picks, among the reference oracles' results, the one that keeps
// the least time over budget while getting at least util through; or, when
// none gets that much, the one that gets the most.
func refOracle(oracles []runPoint, util, budget float64) runPoint {
	best, bestOver, top := -1, math.Inf(1), 0
	for i, o := range oracles {
		if o.util > oracles[top].util {
			top = i
		}
		if o.util >= util {
			if over, _ := overShares(o.delays, nil, budget); over < bestOver {
				best, bestOver = i, over
			}
		}
	}
	if best < 0 {
		best = top
	}
	return oracles[best]
}

// median returns the middle of v, NaNs left out (the mean of the two middle
// values of an even count; NaN when nothing is left).
func median(v []float64) float64 {
	var s []float64
	for _, x := range v {
		if !math.IsNaN(x) {
			s = append(s, x)
		}
	}
	if len(s) == 0 {
		return math.NaN()
	}
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// seedFigures are one seed's summary figures for one direction-run.
type seedFigures struct {
	classicUtil, classicP95, ratio, oracleRatio, gain, gap, reach, low, high, room, over, avoidable float64
}

// figuresFor computes one seed's figures from its points (one per knob, in
// knobs order).
func figuresFor(ks []knob, p []runPoint) seedFigures {
	var auto, refs []point
	var autoAt []int
	var refRuns []runPoint
	classic := -1
	defTh := ms(policies.DefaultClassicConfig().DelayThreshold)
	for i, k := range ks {
		switch {
		case k.scheme == "autoshape":
			auto = append(auto, point{p[i].util, p[i].p95})
			autoAt = append(autoAt, i)
		case k.scheme == "classic" && k.value == defTh:
			classic = i
		case k.ref:
			refs = append(refs, point{p[i].util, p[i].p95})
			refRuns = append(refRuns, p[i])
		}
	}
	nan := math.NaN()
	f := seedFigures{ratio: nan, oracleRatio: nan, gain: nan, gap: nan, reach: nan, low: nan, high: nan, room: nan, over: nan, avoidable: nan}
	c := p[classic]
	f.classicUtil, f.classicP95 = c.util, c.p95
	if c.p95 > 0 {
		f.ratio = p95AtUtil(auto, c.util) / c.p95
	}
	f.gain = utilAtP95(auto, c.p95) - c.util
	f.reach = math.Inf(1)
	for _, i := range autoAt {
		b := ks[i].budget
		if p[i].util >= c.util && ms(b) < f.reach {
			f.reach = ms(b)
		}
		switch b {
		case lowBudget:
			f.low = p[i].util
		case highBudget:
			f.high = p[i].util
		case estimator.DefaultBudget:
			if len(refRuns) > 0 {
				ref := refOracle(refRuns, p[i].util, ms(b))
				f.over, f.avoidable = overShares(p[i].delays, ref.delays, ms(b))
			}
		}
	}
	if len(refs) > 0 {
		f.gap = oracleGap(auto, refs)
		if c.p95 > 0 {
			f.oracleRatio = lowestP95(refs, c.util) / c.p95
		}
		best, ok := 0.0, false
		for _, r := range refRuns {
			if r.p50 <= ms(highBudget) && (!ok || r.util > best) {
				best, ok = r.util, true
			}
		}
		if ok {
			f.room = best - f.low
		}
	}
	return f
}

// summarizeRun builds one direction's curves and figures from every seed's
// points (pts[seed][knob][dir]).
func summarizeRun(cs frontierCase, dir string, ks []knob, pts [][][2]runPoint, d int) dirRun {
	run := dirRun{Set: cs.set, Case: cs.name, Dir: dir, LTE: cs.lte, Curves: map[string][]curvePoint{}}
	var figs []seedFigures
	for s := range pts {
		p := make([]runPoint, len(ks))
		for k := range ks {
			p[k] = pts[s][k][d]
		}
		figs = append(figs, figuresFor(ks, p))
	}
	med := func(get func(f seedFigures) float64) figure {
		var v []float64
		for _, f := range figs {
			v = append(v, get(f))
		}
		return figure(median(v))
	}
	run.Summary = runSummary{
		ClassicUtil: med(func(f seedFigures) float64 { return f.classicUtil }),
		ClassicP95:  med(func(f seedFigures) float64 { return f.classicP95 }),
		Ratio:       med(func(f seedFigures) float64 { return f.ratio }),
		OracleRatio: med(func(f seedFigures) float64 { return f.oracleRatio }),
		Gain:        med(func(f seedFigures) float64 { return f.gain }),
		OracleGap:   med(func(f seedFigures) float64 { return f.gap }),
		ReachMs:     med(func(f seedFigures) float64 { return f.reach }),
		UtilLow:     med(func(f seedFigures) float64 { return f.low }),
		UtilHigh:    med(func(f seedFigures) float64 { return f.high }),
		Rise:        med(func(f seedFigures) float64 { return f.high - f.low }),
		Room:        med(func(f seedFigures) float64 { return f.room }),
		Over:        med(func(f seedFigures) float64 { return f.over }),
		Avoidable:   med(func(f seedFigures) float64 { return f.avoidable }),
	}
	for k, kn := range ks {
		var u, p50, p95 []float64
		for s := range pts {
			u, p50, p95 = append(u, pts[s][k][d].util), append(p50, pts[s][k][d].p50), append(p95, pts[s][k][d].p95)
		}
		run.Curves[kn.scheme] = append(run.Curves[kn.scheme], curvePoint{Knob: kn.label, Value: kn.value, Util: median(u), P50: median(p50), P95: median(p95)})
	}
	return run
}

// summarizeSet takes the medians over a set's direction-runs and makes its
// acceptance checks.
func summarizeSet(set string, runs []dirRun, refLag time.Duration) setSummary {
	med := func(get func(s runSummary) figure) figure {
		var v []float64
		for _, r := range runs {
			v = append(v, float64(get(r.Summary)))
		}
		return figure(median(v))
	}
	ss := setSummary{Set: set, Runs: len(runs),
		Ratio:       med(func(s runSummary) figure { return s.Ratio }),
		OracleRatio: med(func(s runSummary) figure { return s.OracleRatio }),
		Gain:        med(func(s runSummary) figure { return s.Gain }),
		OracleGap:   med(func(s runSummary) figure { return s.OracleGap }),
		Avoidable:   med(func(s runSummary) figure { return s.Avoidable }),
		UtilLow:     med(func(s runSummary) figure { return s.UtilLow }),
		UtilHigh:    med(func(s runSummary) figure { return s.UtilHigh }),
	}
	name := func(r dirRun) string { return r.Case + " " + r.Dir }
	var over, far, flat []string
	within, roomy, oracleWithin, oracleOver := 0, 0, 0, 0
	for _, r := range runs {
		s := r.Summary
		if v := float64(s.Ratio); !(v <= ratioWorstRun) {
			over = append(over, fmt.Sprintf("%s %s (oracle %s)", name(r), fmtFig(s.Ratio, "%.2f"), fmtFig(s.OracleRatio, "%.2f")))
		}
		if v := float64(s.Ratio); v <= ratioMedian {
			within++
		}
		if v := float64(s.OracleRatio); v <= ratioMedian {
			oracleWithin++
		}
		if v := float64(s.OracleRatio); !(v <= ratioWorstRun) {
			oracleOver++
		}
		if v := float64(s.ReachMs); !(v <= ms(reachBudget)) {
			far = append(far, fmt.Sprintf("%s %s", name(r), fmtFig(s.ReachMs, "%.0f ms")))
		}
		if r.LTE && float64(s.Room) >= roomNeeded {
			roomy++
			if !(float64(s.Rise) >= roomNeeded) {
				flat = append(flat, fmt.Sprintf("%s %s (room %.2f)", name(r), fmtFig(s.Rise, "%+.2f"), float64(s.Room)))
			}
		}
	}
	list := func(v []string) string { return strings.Join(v, "; ") }
	ss.Checks = []check{
		{Pass: float64(ss.Ratio) <= ratioMedian,
			Text: fmt.Sprintf("median p95 ratio at classic's utilisation %s ≤ %.2f", fmtFig(ss.Ratio, "%.2f"), ratioMedian),
			Detail: fmt.Sprintf("%d of %d direction-runs at or under %.2f; the %v-late oracle's median %s, %d at or under",
				within, len(runs), ratioMedian, refLag, fmtFig(ss.OracleRatio, "%.2f"), oracleWithin)},
		{Pass: len(over) == 0,
			Text:   fmt.Sprintf("no direction-run's ratio over %.1f: %d over", ratioWorstRun, len(over)),
			Detail: list(append([]string{fmt.Sprintf("the %v-late oracle: %d over", refLag, oracleOver)}, over...))},
		{Pass: len(far) == 0,
			Text:   fmt.Sprintf("classic's utilisation reached at a budget ≤ %v on every direction-run: %d not", reachBudget, len(far)),
			Detail: list(far)},
		{Pass: len(flat) == 0,
			Text: fmt.Sprintf("utilisation rises ≥ %.2f from budget %v to %v on every LTE direction-run where the %v-late oracle shows room (%d such runs): %d do not",
				roomNeeded, lowBudget, highBudget, refLag, roomy, len(flat)),
			Detail: list(flat)},
	}
	return ss
}

// fmtFig prints a figure, "-" when not defined, "unreachable" when infinite.
func fmtFig(f figure, format string) string {
	v := float64(f)
	switch {
	case math.IsNaN(v):
		return "-"
	case math.IsInf(v, 0):
		return "unreachable"
	}
	return fmt.Sprintf(format, v)
}

// printFrontier prints the report as tables.
func printFrontier(w io.Writer, rep frontierReport) error {
	var b strings.Builder
	refLag := rep.referenceLag()
	fmt.Fprintf(&b, "seeds %d-%d; autoshape budgets %v ms; classic delay thresholds %v ms (default %v); static fractions %v;\n",
		rep.FirstSeed, rep.FirstSeed+rep.Seeds-1, rep.BudgetsMs, rep.ClassicThresholdsMs, policies.DefaultClassicConfig().DelayThreshold, rep.StaticFractions)
	fmt.Fprintf(&b, "%d oracles (lag: fraction/window/drain). %d simulations.\n", len(rep.Oracles), rep.Simulations)
	if rep.Load != "both" {
		fmt.Fprintf(&b, "Load on %s only: the other direction carries none, so no traffic crosses its queue.\n", rep.Load)
	}
	b.WriteString("\n")

	b.WriteString("Traces (generated: medians over the seeds' draws):\n\n")
	b.WriteString("| set | trace | mean Mbit/s | CV at 1 s | 100 ms windows empty |\n|---|---|---:|---:|---:|\n")
	for _, t := range rep.Traces {
		fmt.Fprintf(&b, "| %s | %s | %.2f | %.2f | %.1f %% |\n", t.Set, t.Trace, t.Stats.MeanMbps, t.Stats.CV1s, 100*t.Stats.OutageShare)
	}

	fmt.Fprintf(&b, "\nPer direction-run, medians over seeds (ratio: autoshape's p95 at classic's utilisation / classic's p95; oracle: the same for the %v-late oracle;\n"+
		"gain: utilisation autoshape gains at classic's p95; gap: mean utilisation the %v-late oracle gets over autoshape at equal p95;\n"+
		"reach: smallest budget reaching classic's utilisation; room: that oracle's best utilisation with p50 ≤ %v less autoshape's at %v;\n"+
		"over, avoidable: time over the %v budget, and of it the time that oracle was not over it):\n\n", refLag, refLag, highBudget, lowBudget, estimator.DefaultBudget)
	b.WriteString("| set | case | dir | classic util @ p95 | ratio | oracle | gain | gap | reach ms | util 5 ms | util 60 ms | room | over | avoidable |\n")
	b.WriteString("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rep.Runs {
		s := r.Summary
		fmt.Fprintf(&b, "| %s | %s | %s | %s @ %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.Set, r.Case, r.Dir,
			fmtFig(s.ClassicUtil, "%.2f"), fmtFig(s.ClassicP95, "%.0f"), fmtFig(s.Ratio, "%.2f"), fmtFig(s.OracleRatio, "%.2f"), fmtFig(s.Gain, "%+.2f"),
			fmtFig(s.OracleGap, "%+.2f"), fmtFig(s.ReachMs, "%.0f"), fmtFig(s.UtilLow, "%.2f"), fmtFig(s.UtilHigh, "%.2f"),
			fmtFig(s.Room, "%+.2f"), fmtFig(s.Over, "%.2f"), fmtFig(s.Avoidable, "%.2f"))
	}
	for _, ss := range rep.Sets {
		fmt.Fprintf(&b, "\n%s, medians over %d direction-runs: ratio %s (oracle %s), gain %s, gap %s, util at 5 ms %s, at 60 ms %s, avoidable %s\n",
			ss.Set, ss.Runs, fmtFig(ss.Ratio, "%.2f"), fmtFig(ss.OracleRatio, "%.2f"), fmtFig(ss.Gain, "%+.2f"), fmtFig(ss.OracleGap, "%+.2f"),
			fmtFig(ss.UtilLow, "%.2f"), fmtFig(ss.UtilHigh, "%.2f"), fmtFig(ss.Avoidable, "%.2f"))
		for _, c := range ss.Checks {
			verdict := "FAIL"
			if c.Pass {
				verdict = "PASS"
			}
			fmt.Fprintf(&b, "%s %s: %s\n", verdict, ss.Set, c.Text)
			if c.Detail != "" {
				fmt.Fprintf(&b, "     %s\n", c.Detail)
			}
		}
	}

	b.WriteString("\nCurves, medians over seeds (knob: utilisation @ p95 / p50 ms; oracles: those no other of their lag beats on both):\n")
	for _, r := range rep.Runs {
		fmt.Fprintf(&b, "\n%s %s %s\n", r.Set, r.Case, r.Dir)
		for _, name := range curveNames(r) {
			pts := r.Curves[name]
			if strings.HasPrefix(name, "oracle") {
				pts = paretoPoints(pts)
			}
			fmt.Fprintf(&b, "  %-12s", name)
			for _, p := range pts {
				fmt.Fprintf(&b, " %s: %.2f @ %.0f / %.1f;", p.Knob, p.Util, p.P95, p.P50)
			}
			b.WriteString("\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// curveNames orders a run's curves: autoshape, classic, static, oracles.
func curveNames(r dirRun) []string {
	var out []string
	for name := range r.Curves {
		out = append(out, name)
	}
	rank := map[string]int{"autoshape": 0, "classic": 1, "static": 2}
	slices.SortFunc(out, func(a, b string) int {
		ra, oka := rank[a]
		rb, okb := rank[b]
		if !oka {
			ra = 3
		}
		if !okb {
			rb = 3
		}
		if ra != rb {
			return ra - rb
		}
		return strings.Compare(a, b)
	})
	return out
}

// paretoPoints keeps the points that no other point beats on both
// utilisation and p95, by p95.
func paretoPoints(pts []curvePoint) []curvePoint {
	var out []curvePoint
	for i, p := range pts {
		beaten := false
		for j, q := range pts {
			if j != i && q.Util >= p.Util && q.P95 <= p.P95 && (q.Util > p.Util || q.P95 < p.P95 || j < i) {
				beaten = true
				break
			}
		}
		if !beaten {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b curvePoint) int { return cmp.Compare(a.P95, b.P95) })
	return out
}

// plotFrontier writes one figure per direction-run into dir: utilisation
// against p95 and against p50 added delay, log scale.
func plotFrontier(rep frontierReport, dir, ext string) error {
	refLag := rep.referenceLag()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return cli.Usagef("-plot %s: %v", dir, err)
	}
	for _, r := range rep.Runs {
		var row []*plot.Plot
		for _, axis := range []string{"p95", "p50"} {
			p := newPanel(fmt.Sprintf("%s %s: utilisation against %s added delay", r.Case, r.Dir, axis),
				axis+" added delay (ms, log scale)", "utilisation")
			p.X.Scale = plot.LogScale{}
			p.X.Tick.Marker = logticks.Ticks125{}
			p.Legend.Top, p.Legend.Left = false, false
			for i, name := range curveNames(r) {
				pts := r.Curves[name]
				var xys plotter.XYs
				for _, cp := range pts {
					x := cp.P95
					if axis == "p50" {
						x = cp.P50
					}
					xys = append(xys, plotter.XY{X: math.Max(x, 0.1), Y: cp.Util})
				}
				c := curveColor(name, i)
				if strings.HasPrefix(name, "oracle") {
					var dashes []vg.Length
					if name != oracleScheme(refLag) {
						c = colorFor("", i)
						dashes = []vg.Length{vg.Points(4), vg.Points(2)}
					}
					addPoints(p, "", xys, c, draw.CrossGlyph{})
					front := paretoXY(xys)
					addLine(p, name+" (frontier)", front, c, vg.Points(1.2), dashes)
					continue
				}
				addLine(p, name, xys, c, vg.Points(1.6), nil)
				addPoints(p, "", xys, c, draw.CircleGlyph{})
				if name == "classic" {
					def := ms(policies.DefaultClassicConfig().DelayThreshold)
					for j, cp := range pts {
						if sc, err := plotter.NewScatter(xys[j : j+1]); err == nil && cp.Value == def {
							sc.GlyphStyle = draw.GlyphStyle{Color: c, Radius: vg.Points(5), Shape: draw.RingGlyph{}}
							p.Add(sc)
							p.Legend.Add("classic's default", sc)
						}
					}
				}
				if name == "autoshape" {
					var labels plotter.XYLabels
					for j, cp := range pts {
						labels.XYs = append(labels.XYs, xys[j])
						labels.Labels = append(labels.Labels, cp.Knob)
					}
					if l, err := plotter.NewLabels(labels); err == nil {
						p.Add(l)
					}
				}
			}
			if p.X.Min == p.X.Max {
				p.X.Min, p.X.Max = p.X.Min/10, p.X.Max*10
			}
			row = append(row, p)
		}
		name := strings.NewReplacer("/", "_", " ", "_").Replace(fmt.Sprintf("frontier-%s-%s%s", r.Case, r.Dir, ext))
		if err := writeFigure([][]*plot.Plot{row}, filepath.Join(dir, name), ext); err != nil {
			return err
		}
	}
	return nil
}

// curveColor is a curve's colour: its scheme's, and the reference oracle's
// for the oracles.
func curveColor(name string, i int) color.RGBA {
	switch {
	case name == "static":
		name = "static90"
	case strings.HasPrefix(name, "oracle"):
		name = "oracle"
	}
	return colorFor(name, i)
}

// paretoXY keeps the points (x: delay, y: utilisation) that no other beats
// on both, by x: a set of oracles' frontier.
func paretoXY(xys plotter.XYs) plotter.XYs {
	var pts []curvePoint
	for _, p := range xys {
		pts = append(pts, curvePoint{Util: p.Y, P95: p.X})
	}
	var out plotter.XYs
	for _, p := range paretoPoints(pts) {
		out = append(out, plotter.XY{X: p.P95, Y: p.Util})
	}
	return out
}
