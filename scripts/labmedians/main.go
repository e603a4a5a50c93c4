// Command labmedians summarises repeated lab runs of one line: it reads
// linklab's JSON reports (`linklab run --json`, one file per run, the same
// schemes in each) and prints, per scheme and direction, the median over
// the runs of the utilisation, the p50 and p95 of the added delay, the
// worst delay after a capacity drop, the reaction to it, the recovery
// after a rise (to 90 % of the restored capacity) and the worst delay
// after the rise, with the number of runs. With -plot it also draws
// utilisation against p95 per direction: one small point per run, a large
// one at the medians. -name renames a scheme (exec=cake-autorate).
// -window FROM-TO (seconds from the start) also prints the medians of the
// p50, p95 and p99 of the delay series' 100 ms means in that window, and of
// the utilisation over it, for reports run with their series: one phase of
// a run, such as the steady minutes after `step`'s recovery (-window
// 65-90), where the teeth of the probes at a live ceiling show apart from
// the drop's and the rise's, and where the goodput the recovery's 90 % is
// measured against settles.
//
// Reports run at different budgets (`linklab run --budget`) make a lab
// frontier: every scheme is then named with its run's budget
// (autoshape@5ms), and the plot joins one scheme's medians over its budgets
// in budget order, as autoshape-tools frontier does in the simulator.
//
//	go run ./scripts/labmedians [-name exec=cake-autorate] [-plot DIR] [-window FROM-TO] REPORT.json...
package main

import (
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/autoshape/autoshape/internal/logticks"
	"github.com/autoshape/autoshape/sim"
)

// report is the part of a linklab report this reads.
type report struct {
	TraceDown string       `json:"trace_down"`
	BudgetMs  float64      `json:"budget_ms"`
	Results   []sim.Result `json:"results"`
}

// key names one scheme's direction; budget is the run's budget in ms when
// the reports were run at several (0 otherwise).
type key struct {
	scheme, dir string
	budget      float64
}

// name is the scheme as printed: with its budget when there is one.
func (k key) name() string {
	if k.budget == 0 {
		return k.scheme
	}
	return fmt.Sprintf("%s@%gms", k.scheme, k.budget)
}

func main() {
	names := map[string]string{}
	flag.Func("name", "rename a scheme: FROM=TO (repeatable)", func(s string) error {
		from, to, ok := strings.Cut(s, "=")
		if !ok || from == "" || to == "" {
			return fmt.Errorf("%q is not FROM=TO", s)
		}
		names[from] = to
		return nil
	})
	plotDir := flag.String("plot", "", "draw utilisation against p95 per direction into this folder (SVG)")
	var win window
	flag.Var(&win, "window", "also print the delay's percentiles and the utilisation over FROM-TO seconds from the start (reports with series)")
	estimate := flag.Bool("estimate", false, "also print how CAKE's capacity estimate followed the capacity, where the reports carry it")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: labmedians [-name FROM=TO] [-plot DIR] [-window FROM-TO] REPORT.json...")
		os.Exit(2)
	}
	var reps []report
	for _, path := range flag.Args() {
		rep, err := read(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "labmedians:", err)
			os.Exit(2)
		}
		reps = append(reps, rep)
	}
	order, runs := group(reps, names)
	fmt.Println("| scheme | dir | runs | utilisation | p50 ms | p95 ms | worst after a drop ms | reaction s | recovery s | worst after the rise ms |")
	fmt.Println("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, k := range order {
		rs := runs[k]
		fmt.Printf("| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s |\n", k.name(), k.dir, len(rs),
			med(rs, 2, func(r sim.Result) (float64, bool) { return r.Utilization, true }),
			med(rs, 1, func(r sim.Result) (float64, bool) { return r.Delay.P50, true }),
			med(rs, 1, func(r sim.Result) (float64, bool) { return r.Delay.P95, true }),
			med(rs, 0, worst(func(r sim.Result) []float64 { return r.WorstDelayMs })),
			med(rs, 2, func(r sim.Result) (float64, bool) { return deref(r.ReactionS) }),
			med(rs, 1, func(r sim.Result) (float64, bool) { return deref(r.RecoveryS) }),
			med(rs, 0, worst(func(r sim.Result) []float64 { return r.RiseWorstDelayMs })))
	}
	if *estimate {
		printFollows(order, runs)
	}
	if win.set() {
		printWindow(win, order, runs)
	}
	if *plotDir != "" {
		if err := drawPlots(*plotDir, order, runs); err != nil {
			fmt.Fprintln(os.Stderr, "labmedians:", err)
			os.Exit(1)
		}
	}
}

// printFollows prints, per scheme and direction whose runs carry CAKE's
// estimate, medians over the runs of how it followed the capacity (the
// rise and fall times: over every step of every run).
func printFollows(order []key, runs map[key][]sim.Result) {
	fmt.Println()
	fmt.Println("| scheme | dir | runs | estimate off the capacity, median, share of its mean | median estimate − capacity, Mbit/s | lag of best correlation, s (r) | to within 10 % after a rise, s | after a drop, s |")
	fmt.Println("|---|---|---:|---:|---:|---:|---:|---:|")
	for _, k := range order {
		var errs, bias, lags, corrs, rise, fall []float64
		for _, r := range runs[k] {
			f, ok := followOf(r)
			if !ok {
				continue
			}
			errs, bias = append(errs, f.err), append(bias, f.bias)
			if f.ok {
				lags, corrs = append(lags, f.lag), append(corrs, f.corr)
			}
			rise, fall = append(rise, f.rise...), append(fall, f.fall...)
		}
		if len(errs) == 0 {
			continue
		}
		lag := "-"
		if len(lags) > 0 {
			lag = fmt.Sprintf("%.1f (%.2f)", median(lags), median(corrs))
		}
		fmt.Printf("| %s | %s | %d | %.2f | %+.1f | %s | %s | %s |\n", k.name(), k.dir, len(errs), median(errs), median(bias), lag,
			stepTimes(rise), stepTimes(fall))
	}
}

// window is a span of a run, in seconds from its start; the zero window,
// which Set never makes (to > from >= 0), is none.
type window struct{ from, to float64 }

func (w *window) set() bool { return w.to > 0 }

func (w *window) String() string {
	if !w.set() {
		return ""
	}
	return fmt.Sprintf("%g-%g", w.from, w.to)
}

func (w *window) Set(s string) error {
	a, b, ok := strings.Cut(s, "-")
	from, err1 := strconv.ParseFloat(a, 64)
	to, err2 := strconv.ParseFloat(b, 64)
	if !ok || err1 != nil || err2 != nil || !(from >= 0 && to > from) || math.IsInf(to, 0) {
		return fmt.Errorf("%q is not FROM-TO, seconds from the start with FROM under TO", s)
	}
	*w = window{from: from, to: to}
	return nil
}

// printWindow prints, per scheme and direction, medians over the runs that
// carry a series of the delay's percentiles and of the utilisation in the
// window.
func printWindow(w window, order []key, runs map[key][]sim.Result) {
	fmt.Println()
	fmt.Printf("Delay over %s s, from the series' 100 ms means, and the utilisation over it:\n\n", w.String())
	fmt.Println("| scheme | dir | runs | p50 ms | p95 ms | p99 ms | utilisation |")
	fmt.Println("|---|---|---:|---:|---:|---:|---:|")
	for _, k := range order {
		var p50, p95, p99, util []float64
		for _, r := range runs[k] {
			if r.Series == nil {
				continue
			}
			if d, ok := r.Series.DelayIn(w.from, w.to); ok {
				p50, p95, p99 = append(p50, d.P50), append(p95, d.P95), append(p99, d.P99)
			}
			if u, ok := r.Series.UtilisationIn(w.from, w.to); ok {
				util = append(util, u)
			}
		}
		if len(p50) == 0 {
			fmt.Printf("| %s | %s | 0 | - | - | - | - |\n", k.name(), k.dir)
			continue
		}
		u := "-"
		if len(util) > 0 {
			u = fmt.Sprintf("%.3f", median(util))
		}
		fmt.Printf("| %s | %s | %d | %.1f | %.1f | %.1f | %s |\n", k.name(), k.dir, len(p50), median(p50), median(p95), median(p99), u)
	}
}

// stepTimes is the median of the times and their count, "never" for
// +Inf.
func stepTimes(v []float64) string {
	if len(v) == 0 {
		return "-"
	}
	m := median(v)
	if math.IsInf(m, 1) {
		return fmt.Sprintf("never (%d)", len(v))
	}
	return fmt.Sprintf("%.1f (%d)", m, len(v))
}

// group gathers the runs of each scheme and direction (and budget, when the
// reports were run at more than one), in the order they first appear, with
// the schemes renamed by names.
func group(reps []report, names map[string]string) ([]key, map[key][]sim.Result) {
	budgets := map[float64]bool{}
	for _, rep := range reps {
		budgets[rep.BudgetMs] = true
	}
	runs := map[key][]sim.Result{}
	var order []key
	for _, rep := range reps {
		for _, r := range rep.Results {
			if n, ok := names[r.Scheme]; ok {
				r.Scheme = n
			}
			k := key{scheme: r.Scheme, dir: r.Direction}
			if len(budgets) > 1 {
				k.budget = rep.BudgetMs
			}
			if _, ok := runs[k]; !ok {
				order = append(order, k)
			}
			runs[k] = append(runs[k], r)
		}
	}
	// Each scheme's budgets together, in budget order.
	first := map[string]int{}
	for i, k := range order {
		if _, ok := first[k.scheme]; !ok {
			first[k.scheme] = i
		}
	}
	slices.SortStableFunc(order, func(a, b key) int {
		return cmp.Or(cmp.Compare(first[a.scheme], first[b.scheme]), cmp.Compare(a.budget, b.budget))
	})
	return order, runs
}

func read(path string) (report, error) {
	var rep report
	b, err := os.ReadFile(path)
	if err != nil {
		return rep, err
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		return rep, fmt.Errorf("%s: not a linklab JSON report: %w", path, err)
	}
	if len(rep.Results) == 0 {
		return rep, fmt.Errorf("%s: no results", path)
	}
	return rep, nil
}

func deref(p *float64) (float64, bool) {
	if p == nil {
		return 0, false
	}
	return *p, true
}

// worst is the largest of a run's values, none when it has none.
func worst(f func(sim.Result) []float64) func(sim.Result) (float64, bool) {
	return func(r sim.Result) (float64, bool) {
		v := f(r)
		if len(v) == 0 {
			return 0, false
		}
		return slices.Max(v), true
	}
}

// median of the values (the mean of the middle two of an even count).
func median(v []float64) float64 {
	v = slices.Sorted(slices.Values(v))
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

// med formats the median of f over the runs that have a value, "-" when
// none has.
func med(rs []sim.Result, digits int, f func(sim.Result) (float64, bool)) string {
	var v []float64
	for _, r := range rs {
		if x, ok := f(r); ok {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.*f", digits, median(v))
}

// drawPlots draws one plot per direction: utilisation against p95, a small
// point per run and a ring at each scheme's medians.
func drawPlots(dir string, order []key, runs map[key][]sim.Result) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	palette := []color.Color{
		color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
		color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
		color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	}
	var dirs []string
	for _, k := range order {
		if !slices.Contains(dirs, k.dir) {
			dirs = append(dirs, k.dir)
		}
	}
	for _, d := range dirs {
		p := plot.New()
		p.Title.Text = "lab runs, " + d
		p.X.Label.Text = "p95 added delay (ms)"
		p.Y.Label.Text = "utilisation"
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = logticks.Ticks125{}
		p.Legend.Top = true
		p.Legend.Left = true // the corner no scheme reaches: low delay, high utilisation
		// A scheme run at more than one budget is swept: its medians are
		// joined, labelled with their budgets, under one legend entry.
		budgets := map[string]int{}
		for _, k := range order {
			if k.dir == d && k.budget > 0 {
				budgets[k.scheme]++
			}
		}
		colors := map[string]color.Color{}
		curves := map[string]plotter.XYs{}
		var swept []string
		for _, k := range order {
			if k.dir != d {
				continue
			}
			c, ok := colors[k.scheme]
			if !ok {
				c = palette[len(colors)%len(palette)]
				colors[k.scheme] = c
			}
			var pts, mid plotter.XYs
			var ps, us []float64
			for _, r := range runs[k] {
				pts = append(pts, plotter.XY{X: max(r.Delay.P95, 0.1), Y: r.Utilization})
				ps, us = append(ps, max(r.Delay.P95, 0.1)), append(us, r.Utilization)
			}
			mid = append(mid, plotter.XY{X: median(ps), Y: median(us)})
			legend := k.name()
			if budgets[k.scheme] > 1 {
				legend = ""
				if _, ok := curves[k.scheme]; !ok {
					swept = append(swept, k.scheme)
					legend = k.scheme
				}
				curves[k.scheme] = append(curves[k.scheme], plotter.XY{X: k.budget, Y: 0}, mid[0])
			}
			s, err := plotter.NewScatter(pts)
			if err != nil {
				return err
			}
			s.GlyphStyle = draw.GlyphStyle{Color: c, Radius: vg.Points(2), Shape: draw.CircleGlyph{}}
			m, err := plotter.NewScatter(mid)
			if err != nil {
				return err
			}
			m.GlyphStyle = draw.GlyphStyle{Color: c, Radius: vg.Points(6), Shape: draw.RingGlyph{}}
			p.Add(s, m)
			if legend != "" {
				p.Legend.Add(legend, m)
			}
		}
		for _, name := range swept {
			if err := addCurve(p, curves[name], colors[name]); err != nil {
				return err
			}
		}
		if err := p.Save(5*vg.Inch, 3.5*vg.Inch, filepath.Join(dir, "lab-"+d+".svg")); err != nil {
			return err
		}
	}
	return nil
}

// addCurve joins a swept scheme's medians in budget order; pairs holds, for
// each budget, (budget, 0) then its median point. Each point is labelled
// with its budget.
func addCurve(p *plot.Plot, pairs plotter.XYs, c color.Color) error {
	type at struct {
		budget float64
		pt     plotter.XY
	}
	var pts []at
	for i := 0; i+1 < len(pairs); i += 2 {
		pts = append(pts, at{pairs[i].X, pairs[i+1]})
	}
	slices.SortFunc(pts, func(a, b at) int { return cmp.Compare(a.budget, b.budget) })
	var xys plotter.XYs
	var labels []string
	for _, a := range pts {
		xys = append(xys, a.pt)
		labels = append(labels, fmt.Sprintf("%gms", a.budget))
	}
	l, err := plotter.NewLine(xys)
	if err != nil {
		return err
	}
	l.LineStyle.Color = c
	l.LineStyle.Width = vg.Points(1)
	lb, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: labels})
	if err != nil {
		return err
	}
	for i := range lb.TextStyle {
		lb.TextStyle[i].Color = c
		lb.TextStyle[i].XAlign = draw.XLeft
	}
	lb.Offset = vg.Point{X: vg.Points(5), Y: vg.Points(-4)}
	p.Add(l, lb)
	return nil
}
