package main

import (
	"errors"
	"flag"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/autoshape/autoshape/controller"
	"github.com/autoshape/autoshape/internal/cli"
	"github.com/autoshape/autoshape/sweep"
)

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// Figure size: legible at 1200×800 pixels.
const (
	figureDPI = 96
	figureW   = 1200
	figureH   = 800
)

// plotCmd draws pictures from decision files, simulations and sweeps.
func plotCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("plot", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var ins stringList
	fs.Var(&ins, "in", "input file: simulate/linklab --json --series output, sweep --json output, or a decision file (repeatable)")
	out := fs.String("out", "", "output file, .png or .svg")
	kind := fs.String("kind", "", "timeseries, cdf or sweep (default: inferred from the input)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: autoshape-tools plot --in FILE [--in FILE ...] --out FILE.png|FILE.svg [--kind timeseries|cdf|sweep]\n\n")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if len(ins) == 0 {
		return cli.Usagef("--in is required")
	}
	ext := strings.ToLower(filepath.Ext(*out))
	if *out == "" || (ext != ".png" && ext != ".svg") {
		return cli.Usagef("--out must name a .png or .svg file")
	}
	var inputs []plotInput
	for _, path := range ins {
		in, err := readPlotInput(path)
		if err != nil {
			return cli.UsageError{Err: err}
		}
		inputs = append(inputs, in)
	}
	if *kind == "" {
		*kind = inputs[0].kind()
	}
	var panels [][]*plot.Plot
	var err error
	switch *kind {
	case "timeseries":
		panels, err = timeseriesFigure(inputs)
	case "cdf":
		panels, err = cdfFigure(inputs)
	case "sweep":
		panels, err = sweepFigure(inputs)
	default:
		return cli.Usagef("--kind %q: want timeseries, cdf or sweep", *kind)
	}
	if err != nil {
		return cli.UsageError{Err: err}
	}
	if err := writeFigure(panels, *out, ext); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s\n", *out)
	return nil
}

// writeFigure draws the panels (rows of columns) and writes the file
// atomically: a temporary file beside it, renamed into place.
func writeFigure(panels [][]*plot.Plot, path, ext string) error {
	w := vg.Length(figureW) / figureDPI * vg.Inch
	h := vg.Length(figureH) / figureDPI * vg.Inch
	var c vg.CanvasWriterTo
	if ext == ".svg" {
		c = vgsvg.New(w, h)
	} else {
		c = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(figureDPI), vgimg.UseBackgroundColor(color.White))}
	}
	cols := 0
	for _, row := range panels {
		cols = max(cols, len(row))
	}
	tiles := draw.Tiles{Rows: len(panels), Cols: cols,
		PadTop: vg.Points(6), PadBottom: vg.Points(6), PadLeft: vg.Points(6), PadRight: vg.Points(12),
		PadX: vg.Points(24), PadY: vg.Points(10)}
	canvases := plot.Align(panels, tiles, draw.New(c))
	for i, row := range panels {
		for j, p := range row {
			if p != nil {
				p.Draw(canvases[i][j])
			}
		}
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, ".autoshape-plot-*"+ext)
	if err != nil {
		return fmt.Errorf("failed to create a file beside %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	if _, err := c.WriteTo(tmp); err != nil {
		tmp.Close()
		return fmt.Errorf("failed to write %s: %w", path, err)
	}
	// CreateTemp makes the file private; a figure is for sharing.
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return fmt.Errorf("failed to write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("failed to write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("failed to write %s: %w", path, err)
	}
	return nil
}

// Colours: one per scheme, stable across figures.
var (
	schemeColors = map[string]color.RGBA{
		"autoshape": {0x1f, 0x77, 0xb4, 0xff},
		"classic":   {0xff, 0x7f, 0x0e, 0xff},
		"static90":  {0x2c, 0xa0, 0x2c, 0xff},
		"unshaped":  {0xd6, 0x27, 0x28, 0xff},
		"oracle":    {0x94, 0x67, 0xbd, 0xff},
	}
	extraColors   = []color.RGBA{{0x8c, 0x56, 0x4b, 0xff}, {0xe3, 0x77, 0xc2, 0xff}, {0x17, 0xbe, 0xcf, 0xff}, {0xbc, 0xbd, 0x22, 0xff}}
	capacityColor = color.RGBA{0x7f, 0x7f, 0x7f, 0xff}
	// estimateColor draws CAKE's capacity estimate.
	estimateColor = color.RGBA{0x00, 0x8b, 0x8b, 0xff}
	// seriesColors tell apart series that are not schemes (reflectors).
	seriesColors = []color.RGBA{
		{0x1f, 0x77, 0xb4, 0xff}, {0xff, 0x7f, 0x0e, 0xff}, {0x2c, 0xa0, 0x2c, 0xff}, {0xd6, 0x27, 0x28, 0xff},
		{0x94, 0x67, 0xbd, 0xff}, {0x8c, 0x56, 0x4b, 0xff}, {0xe3, 0x77, 0xc2, 0xff}, {0x17, 0xbe, 0xcf, 0xff},
	}
	budgetColor = color.RGBA{0x00, 0x00, 0x00, 0xff}
)

// colorFor returns the colour of the i-th series named name.
func colorFor(name string, i int) color.RGBA {
	if c, ok := schemeColors[name]; ok {
		return c
	}
	return extraColors[i%len(extraColors)]
}

// newPanel returns a plot with a title and axis labels, legend top right.
func newPanel(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = vg.Points(12)
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.Legend.Top = true
	p.Legend.TextStyle.Font.Size = vg.Points(9)
	p.Add(plotter.NewGrid())
	return p
}

// addLine adds a line; dashes may be nil.
func addLine(p *plot.Plot, label string, xys plotter.XYs, c color.RGBA, width vg.Length, dashes []vg.Length) {
	if len(xys) == 0 {
		return
	}
	l, err := plotter.NewLine(xys)
	if err != nil {
		return
	}
	l.Color = c
	l.Width = width
	l.Dashes = dashes
	p.Add(l)
	if label != "" {
		p.Legend.Add(label, l)
	}
}

// addPoints adds markers.
func addPoints(p *plot.Plot, label string, xys plotter.XYs, c color.RGBA, shape draw.GlyphDrawer) {
	if len(xys) == 0 {
		return
	}
	s, err := plotter.NewScatter(xys)
	if err != nil {
		return
	}
	s.GlyphStyle.Color = c
	s.GlyphStyle.Radius = vg.Points(1.6)
	s.GlyphStyle.Shape = shape
	p.Add(s)
	if label != "" {
		p.Legend.Add(label, s)
	}
}

// addBudget draws the budget as a horizontal (or, for a CDF, vertical) line.
func addBudget(p *plot.Plot, budget float64, vertical bool) {
	if budget <= 0 {
		return
	}
	var xys plotter.XYs
	if vertical {
		xys = plotter.XYs{{X: budget, Y: 0}, {X: budget, Y: 1}}
	} else {
		xys = plotter.XYs{{X: p.X.Min, Y: budget}, {X: p.X.Max, Y: budget}}
	}
	addLine(p, fmt.Sprintf("budget %g ms", budget), xys, budgetColor, vg.Points(1.2), []vg.Length{vg.Points(6), vg.Points(4)})
}

// timeseriesFigure: per direction, a panel of rates and a panel of added
// delay, with every scheme (or decision file) overlaid.
func timeseriesFigure(inputs []plotInput) ([][]*plot.Plot, error) {
	var rows [][]*plot.Plot
	for _, dir := range []string{"down", "up"} {
		rates := newPanel("", "time (s)", "rate (Mbit/s)")
		delay := newPanel("", "time (s)", "added delay (ms)")
		found, budget, title := false, 0.0, ""
		for _, in := range inputs {
			switch {
			case in.report != nil:
				budget = in.report.BudgetMs
				title = traceTitle(in.report, dir)
				capDone := false
				for i, r := range in.report.Results {
					if r.Direction != dir {
						continue
					}
					if r.Series == nil {
						return nil, fmt.Errorf("%s: no time series: run simulate with --json --series", in.name)
					}
					found = true
					s := r.Series
					c := colorFor(r.Scheme, i)
					if !capDone {
						addLine(rates, "capacity", xy(s.T, s.Capacity), capacityColor, vg.Points(0.8), nil)
						capDone = true
					}
					if r.Scheme != "unshaped" {
						addLine(rates, r.Scheme+" rate", xy(s.T, s.Rate), c, vg.Points(1.4), nil)
					}
					addLine(rates, r.Scheme+" goodput", xy(s.T, s.Goodput), c, vg.Points(0.8), []vg.Length{vg.Points(2), vg.Points(2)})
					// CAKE's capacity estimate: the kernel's in the lab's
					// report, the model's in the simulator's.
					if len(s.CapacityEstimate) == len(s.T) && (r.Scheme == "autoshape" || r.Scheme == "autorate") {
						addLine(rates, r.Scheme+" CAKE estimate", xy(s.T, s.CapacityEstimate), estimateColor, vg.Points(1.2), []vg.Length{vg.Points(1), vg.Points(2)})
					}
					addLine(delay, r.Scheme, xy(s.T, s.Delay), c, vg.Points(1), nil)
					addPoints(delay, "", overBudget(s.T, s.Delay, in.report.BudgetMs), c, draw.CircleGlyph{})
				}
			case in.decisions != nil:
				recs := recordsFor(in.decisions, dir)
				if len(recs) == 0 {
					continue
				}
				found = true
				title = "decisions: " + filepath.Base(in.name)
				t0 := in.decisions[0].Time
				c := colorFor("autoshape", 0)
				var rate, ach, est, dl, bloat plotter.XYs
				for k, r := range recs {
					t := r.Time.Sub(t0).Seconds()
					if k > 0 {
						rate = append(rate, plotter.XY{X: t, Y: recs[k-1].RateKbit / 1000})
					}
					rate = append(rate, plotter.XY{X: t, Y: r.RateKbit / 1000})
					ach = append(ach, plotter.XY{X: t, Y: r.AchievedKbit / 1000})
					if r.CapacityEstimateKbit > 0 {
						est = append(est, plotter.XY{X: t, Y: r.CapacityEstimateKbit / 1000})
					}
					dl = append(dl, plotter.XY{X: t, Y: r.DelayMs})
					if r.Reason == "bloat" || r.Reason == "capacity_drop" {
						bloat = append(bloat, plotter.XY{X: t, Y: r.DelayMs})
					}
					budget = math.Max(budget, r.ThresholdMs)
				}
				addLine(rates, "shaper rate", rate, c, vg.Points(1.4), nil)
				addLine(rates, "achieved", ach, colorFor("classic", 1), vg.Points(0.8), []vg.Length{vg.Points(2), vg.Points(2)})
				addLine(rates, "CAKE estimate", est, estimateColor, vg.Points(1.2), []vg.Length{vg.Points(1), vg.Points(2)})
				addLine(delay, "delay at decisions", dl, c, vg.Points(1), nil)
				addPoints(delay, "cuts for bloat", bloat, colorFor("unshaped", 3), draw.CrossGlyph{})
			}
		}
		if !found {
			continue
		}
		rates.Title.Text = fmt.Sprintf("%s: rates — %s", dir, title)
		delay.Title.Text = fmt.Sprintf("%s: added delay under load", dir)
		rates.Y.Min, delay.Y.Min = 0, 0
		addBudget(delay, budget, false)
		rows = append(rows, []*plot.Plot{rates}, []*plot.Plot{delay})
	}
	if len(rows) == 0 {
		return nil, errors.New("nothing to draw as a time series")
	}
	return rows, nil
}

// cdfFigure: the distribution of added delay per scheme and direction, log x.
func cdfFigure(inputs []plotInput) ([][]*plot.Plot, error) {
	p := newPanel("added delay under load: cumulative distribution", "added delay (ms, log scale)", "fraction of time at or below")
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top = false
	p.Legend.Left = false
	p.Y.Min, p.Y.Max = 0, 1
	budget, n := 0.0, 0
	for _, in := range inputs {
		switch {
		case in.report != nil:
			budget = in.report.BudgetMs
			if len(inputs) == 1 {
				p.Title.Text += " — " + strings.TrimSuffix(filepath.Base(in.report.TraceDown), ".down") + fmt.Sprintf(", %g s, seed %d", in.report.DurationS, in.report.Seed)
			}
			for i, r := range in.report.Results {
				if r.Series == nil {
					return nil, fmt.Errorf("%s: no time series: run simulate with --json --series", in.name)
				}
				var dashes []vg.Length
				if r.Direction == "up" {
					dashes = []vg.Length{vg.Points(4), vg.Points(2)}
				}
				addLine(p, r.Scheme+" "+r.Direction, cdf(r.Series.Delay), colorFor(r.Scheme, i), vg.Points(2), dashes)
				n++
			}
		case in.decisions != nil:
			// Per reflector when the records carry reflectors' delays (to
			// spot a bad one), else per direction.
			per := map[string][]float64{}
			for _, r := range in.decisions {
				budget = math.Max(budget, r.ThresholdMs)
				for name, v := range r.ReflectorDelayMs {
					per[name] = append(per[name], v)
				}
			}
			if len(per) == 0 {
				for _, r := range in.decisions {
					per[r.Dir] = append(per[r.Dir], r.DelayMs)
				}
			}
			names := make([]string, 0, len(per))
			for name := range per {
				names = append(names, name)
			}
			sort.Strings(names)
			for i, name := range names {
				addLine(p, filepath.Base(in.name)+" "+name, cdf(per[name]), seriesColors[i%len(seriesColors)], vg.Points(2), nil)
				n += len(per[name])
			}
		}
	}
	if n == 0 {
		return nil, errors.New("nothing to draw as a distribution")
	}
	addBudget(p, budget, true)
	// One value (or many equal ones) leaves the axis a point, which the
	// plotting library widens by ±1: below 0 on a log scale. A decade each
	// way keeps it positive.
	if p.X.Min == p.X.Max {
		p.X.Min, p.X.Max = p.X.Min/10, p.X.Max*10
	}
	return [][]*plot.Plot{{p}}, nil
}

// sweepFigure: per direction, delay boxes per step (p50–p95, whisker to
// p99) above the goodput per step, the recommended rate marked.
func sweepFigure(inputs []plotInput) ([][]*plot.Plot, error) {
	var sw *sweep.Report
	var name string
	for _, in := range inputs {
		if in.sweep != nil {
			sw, name = in.sweep, in.name
			break
		}
	}
	if sw == nil {
		return nil, errors.New("no sweep report among the inputs")
	}
	var cols [][]*plot.Plot // per direction: delay, goodput
	for _, dir := range []string{"down", "up"} {
		var steps []sweep.Step
		for _, s := range sw.Steps {
			if s.Direction == dir {
				steps = append(steps, s)
			}
		}
		if len(steps) == 0 {
			continue
		}
		// Shaped steps by rate; the unshaped step (rate 0) last, drawn just
		// right of them.
		sort.Slice(steps, func(i, j int) bool {
			a, b := steps[i].RateKbit, steps[j].RateKbit
			if (a == 0) != (b == 0) {
				return b == 0
			}
			return a < b
		})
		delay := newPanel(fmt.Sprintf("%s: added delay per step — %s", dir, filepath.Base(name)), "shaper rate (Mbit/s)", "added delay (ms): p50–p95 box, p99 whisker")
		good := newPanel(fmt.Sprintf("%s: goodput per step", dir), "shaper rate (Mbit/s)", "goodput (Mbit/s)")
		box := colorFor("autoshape", 0)
		width := boxWidth(steps)
		var goodput plotter.XYs
		var labels plotter.XYLabels
		top := 4 * sw.Recommendation.BudgetMs
		for _, s := range steps {
			if s.RateKbit > 0 {
				top = math.Max(top, 1.2*s.Delay.P99)
			}
		}
		for _, s := range steps {
			x := s.RateKbit / 1000
			if s.RateKbit == 0 {
				x = unshapedX(steps)
				if s.Delay.P50 > top {
					labels.XYs = append(labels.XYs, plotter.XY{X: x - width/2, Y: top * 0.6})
					labels.Labels = append(labels.Labels, fmt.Sprintf("unshaped:\np50 %.0f ms,\np95 %.0f ms\n(above)", s.Delay.P50, s.Delay.P95))
				}
			}
			poly, err := plotter.NewPolygon(plotter.XYs{{X: x - width/2, Y: s.Delay.P50}, {X: x + width/2, Y: s.Delay.P50}, {X: x + width/2, Y: s.Delay.P95}, {X: x - width/2, Y: s.Delay.P95}})
			if err == nil {
				poly.Color = color.NRGBA{box.R, box.G, box.B, 0x80}
				poly.LineStyle.Color = box
				delay.Add(poly)
			}
			addLine(delay, "", plotter.XYs{{X: x, Y: s.Delay.P95}, {X: x, Y: s.Delay.P99}}, box, vg.Points(1), nil)
			goodput = append(goodput, plotter.XY{X: x, Y: s.GoodputKbit / 1000})
		}
		if len(labels.Labels) > 0 {
			if l, err := plotter.NewLabels(labels); err == nil {
				delay.Add(l)
			}
		}
		delay.Y.Max = top
		delay.Legend.Left = true
		good.Legend.Top = false
		addLine(good, "goodput", goodput, colorFor("static90", 2), vg.Points(1.4), nil)
		addPoints(good, "", goodput, colorFor("static90", 2), draw.CircleGlyph{})
		delay.Y.Min, good.Y.Min = 0, 0
		addBudget(delay, sw.Recommendation.BudgetMs, false)
		rec := sw.Recommendation.DownKbit
		if dir == "up" {
			rec = sw.Recommendation.UpKbit
		}
		if rec > 0 {
			for _, p := range []*plot.Plot{delay, good} {
				ymax := p.Y.Max
				addLine(p, fmt.Sprintf("recommended %.1f Mbit/s", rec/1000), plotter.XYs{{X: rec / 1000, Y: 0}, {X: rec / 1000, Y: ymax}}, colorFor("unshaped", 3), vg.Points(1.4), []vg.Length{vg.Points(3), vg.Points(3)})
			}
		}
		cols = append(cols, []*plot.Plot{delay, good})
	}
	if len(cols) == 0 {
		return nil, errors.New("the sweep has no steps to draw")
	}
	// Rows of columns: row 0 the delays, row 1 the goodputs.
	rows := [][]*plot.Plot{make([]*plot.Plot, len(cols)), make([]*plot.Plot, len(cols))}
	for j, c := range cols {
		rows[0][j], rows[1][j] = c[0], c[1]
	}
	return rows, nil
}

// unshapedX is where the unshaped step is drawn: right of the shaped
// steps (sorted by rate, the unshaped last), by a tenth of their span, or
// of their rate when there is one, or at 1 Mbit/s when there is none.
func unshapedX(steps []sweep.Step) float64 {
	lo, hi := 0.0, 0.0
	for _, s := range steps {
		if s.RateKbit > 0 {
			if lo == 0 {
				lo = s.RateKbit / 1000
			}
			hi = s.RateKbit / 1000
		}
	}
	switch {
	case hi == 0:
		return 1
	case hi == lo:
		return hi * 1.1
	}
	return lo + (hi-lo)*1.1
}

// boxWidth is 60 % of the smallest gap between steps.
func boxWidth(steps []sweep.Step) float64 {
	w := math.Inf(1)
	for i := 1; i < len(steps); i++ {
		if d := (steps[i].RateKbit - steps[i-1].RateKbit) / 1000; d > 0 {
			w = math.Min(w, d)
		}
	}
	if math.IsInf(w, 1) {
		w = math.Max(steps[0].RateKbit, 1000) / 1000 * 0.1
	}
	return 0.6 * w
}

func xy(x, y []float64) plotter.XYs {
	n := min(len(x), len(y))
	out := make(plotter.XYs, n)
	for i := range n {
		out[i] = plotter.XY{X: x[i], Y: y[i]}
	}
	return out
}

// overBudget returns the points whose delay exceeds the budget.
func overBudget(t, d []float64, budget float64) plotter.XYs {
	var out plotter.XYs
	for i := range min(len(t), len(d)) {
		if budget > 0 && d[i] > budget {
			out = append(out, plotter.XY{X: t[i], Y: d[i]})
		}
	}
	return out
}

// cdf returns the empirical distribution of vals, with values floored at
// 0.01 ms for the log axis.
func cdf(vals []float64) plotter.XYs {
	if len(vals) == 0 {
		return nil
	}
	s := append([]float64(nil), vals...)
	sort.Float64s(s)
	out := make(plotter.XYs, 0, len(s))
	for i, v := range s {
		out = append(out, plotter.XY{X: math.Max(v, 0.01), Y: float64(i+1) / float64(len(s))})
	}
	return out
}

func recordsFor(recs []controller.Record, dir string) []controller.Record {
	var out []controller.Record
	for _, r := range recs {
		if r.Dir == dir {
			out = append(out, r)
		}
	}
	return out
}

func traceTitle(r *simReport, dir string) string {
	name := r.TraceDown
	if dir == "up" {
		name = r.TraceUp
	}
	return fmt.Sprintf("%s, budget %g ms", filepath.Base(name), r.BudgetMs)
}
