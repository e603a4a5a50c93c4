package main

import (
	"bytes"
	"encoding/json"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const plotData = "testdata/plot/"

// countNear counts the pixels within tol (per channel) of c.
func countNear(img image.Image, c color.RGBA, tol int) int {
	rgba := image.NewRGBA(img.Bounds())
	draw.Draw(rgba, rgba.Bounds(), img, img.Bounds().Min, draw.Src)
	n := 0
	for i := 0; i+3 < len(rgba.Pix); i += 4 {
		if abs(int(rgba.Pix[i])-int(c.R)) <= tol && abs(int(rgba.Pix[i+1])-int(c.G)) <= tol && abs(int(rgba.Pix[i+2])-int(c.B)) <= tol {
			n++
		}
	}
	return n
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

func TestPlotRenders(t *testing.T) {
	tests := []struct {
		name string
		args []string
		// colours that must show up in the plot area
		colors []color.RGBA
	}{
		{"simulation time series", []string{"--in", plotData + "sim.json"}, []color.RGBA{schemeColors["autoshape"], schemeColors["unshaped"], capacityColor}},
		{"simulation cdf", []string{"--in", plotData + "sim.json", "--kind", "cdf"}, []color.RGBA{schemeColors["autoshape"], schemeColors["unshaped"]}},
		{"decision file time series", []string{"--in", plotData + "decisions.jsonl"}, []color.RGBA{schemeColors["autoshape"], schemeColors["classic"]}},
		{"decision file cdf per reflector", []string{"--in", plotData + "decisions.jsonl", "--kind", "cdf"}, []color.RGBA{seriesColors[0], seriesColors[1], seriesColors[2]}},
		{"sweep", []string{"--in", plotData + "sweep.json"}, []color.RGBA{schemeColors["autoshape"], schemeColors["static90"], schemeColors["unshaped"]}},
		{"lab report on CAKE with the estimate (synthetic)", []string{"--in", plotData + "lab-cake.json"}, []color.RGBA{estimateColor, capacityColor}},
		{"two simulations overlaid", []string{"--in", plotData + "sim.json", "--in", plotData + "sim.json"}, []color.RGBA{schemeColors["autoshape"]}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "fig.png")
			var stdout, stderr bytes.Buffer
			if code := run(append(append([]string{"plot"}, tt.args...), "--out", out), &stdout, &stderr); code != 0 {
				t.Fatalf("plot exited %d: %s", code, stderr.String())
			}
			f, err := os.Open(out)
			if err != nil {
				t.Fatalf("no output: %v", err)
			}
			defer f.Close()
			img, err := png.Decode(f)
			if err != nil {
				t.Fatalf("the output is not a PNG: %v", err)
			}
			if b := img.Bounds(); b.Dx() != figureW || b.Dy() != figureH {
				t.Errorf("size = %dx%d, want %dx%d", b.Dx(), b.Dy(), figureW, figureH)
			}
			for _, c := range tt.colors {
				if n := countNear(img, c, 12); n < 50 {
					t.Errorf("only %d pixels of colour %v: the series is missing", n, c)
				}
			}
		})
	}
}

func TestPlotSVG(t *testing.T) {
	out := filepath.Join(t.TempDir(), "fig.svg")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"plot", "--in", plotData + "sim.json", "--out", out}, &stdout, &stderr); code != 0 {
		t.Fatalf("plot exited %d: %s", code, stderr.String())
	}
	b, err := os.ReadFile(out)
	if err != nil || !bytes.Contains(b, []byte("<svg")) || !bytes.Contains(b, []byte("autoshape")) {
		t.Errorf("the SVG output is %d bytes without an <svg> element or the legend (err %v)", len(b), err)
	}
}

func TestPlotBadInput(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"empty", []string{"--in", plotData + "empty.json"}, "empty input"},
		{"truncated", []string{"--in", plotData + "truncated.json"}, "not JSON"},
		{"unknown shape", []string{"--in", plotData + "unknown.json"}, "neither a simulation report"},
		{"no results", []string{"--in", plotData + "noresults.json"}, "without results"},
		{"bad direction in a decision file", []string{"--in", plotData + "baddir.jsonl"}, `line 2: direction "sideways"`},
		{"missing file", []string{"--in", plotData + "nosuch.json"}, "nosuch.json"},
		{"no input", []string{}, "--in is required"},
		{"bad kind", []string{"--in", plotData + "sim.json", "--kind", "pie"}, `--kind "pie"`},
		{"sweep from a simulation", []string{"--in", plotData + "sim.json", "--kind", "sweep"}, "no sweep report"},
		{"time series from a sweep", []string{"--in", plotData + "sweep.json", "--kind", "timeseries"}, "nothing to draw"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "fig.png")
			var stdout, stderr bytes.Buffer
			code := run(append(append([]string{"plot"}, tt.args...), "--out", out), &stdout, &stderr)
			if code != 2 {
				t.Errorf("exit status = %d, want 2", code)
			}
			if !strings.Contains(stderr.String(), tt.want) {
				t.Errorf("stderr = %q, want it to mention %q", stderr.String(), tt.want)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("a failed plot left %d files behind (%v)", len(entries), entries[0].Name())
			}
		})
	}
}

func TestPlotBadOut(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"plot", "--in", plotData + "sim.json", "--out", "fig.gif"}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), ".png or .svg") {
		t.Errorf("--out fig.gif: exit %d, stderr %q", code, stderr.String())
	}
}

func TestSimulateSeriesNeedsJSON(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"simulate", "--series", "--duration", "2s"}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "--series needs --json") {
		t.Errorf("simulate --series: exit %d, stderr %q", code, stderr.String())
	}
}

// writeInput writes text to a file of its own and returns its path.
func writeInput(t *testing.T, name, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// simWith returns testdata's simulation report with one value of the first
// result's series changed.
func simWith(t *testing.T, key string, v float64) string {
	t.Helper()
	b, err := os.ReadFile(plotData + "sim.json")
	if err != nil {
		t.Fatal(err)
	}
	var rep map[string]any
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	series := rep["results"].([]any)[0].(map[string]any)["series"].(map[string]any)
	series[key].([]any)[3] = v
	out, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

const (
	oneStep      = `{"direction":"down","fraction":0.9,"rate_kbit":9000,"goodput_kbit":8500,"delay_ms":{"p50":1,"p95":2,"p99":3},"drops":0}`
	unshapedStep = `{"direction":"down","fraction":0,"rate_kbit":0,"goodput_kbit":9900,"delay_ms":{"p50":300,"p95":400,"p99":450},"drops":0}`
	sweepEnd     = `],"recommendation":{"down_kbit":9000,"up_kbit":0,"budget_ms":15}}`
)

// TestPlotEdgeCases: inputs at the edges draw a figure, not a panic.
func TestPlotEdgeCases(t *testing.T) {
	tests := []struct {
		name, file, text, kind string
	}{
		// One record: the log axis would span a single value.
		{"cdf of one record without threshold_ms", "d.jsonl", `{"time":"2026-01-01T00:00:00Z","dir":"down","rate_kbit":1000}`, "cdf"},
		{"cdf of one reflector's zero", "d.jsonl", `{"time":"2026-01-01T00:00:00Z","dir":"down","rate_kbit":1000,"reflector_delay_ms":{"192.0.2.1":0}}`, "cdf"},
		{"cdf of equal delays", "d.jsonl", `{"time":"2026-01-01T00:00:00Z","dir":"down","rate_kbit":1000,"delay_ms":0.5}` + "\n" + `{"time":"2026-01-01T00:00:01Z","dir":"up","rate_kbit":1000,"delay_ms":0.5}`, "cdf"},
		{"sweep of the unshaped step alone", "s.json", `{"steps":[` + unshapedStep + sweepEnd, "sweep"},
		{"sweep of one shaped step", "s.json", `{"steps":[` + oneStep + sweepEnd, "sweep"},
		{"sweep of one shaped step and the unshaped", "s.json", `{"steps":[` + oneStep + "," + unshapedStep + sweepEnd, "sweep"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "fig.png")
			var stdout, stderr bytes.Buffer
			if code := run([]string{"plot", "--in", writeInput(t, tt.file, tt.text), "--kind", tt.kind, "--out", out}, &stdout, &stderr); code != 0 {
				t.Fatalf("plot exited %d: %s", code, stderr.String())
			}
			if _, err := os.Stat(out); err != nil {
				t.Errorf("no figure: %v", err)
			}
		})
	}
}

// TestPlotAbsurdValues: a value no measurement comes near (1e308 made the
// rasteriser spin for ever) is refused with exit status 2, naming the record
// and the key; a large but possible one is drawn.
func TestPlotAbsurdValues(t *testing.T) {
	sweep := func(step string) string { return `{"steps":[` + oneStep + "," + step + sweepEnd }
	tests := []struct {
		name, file, text, want string
	}{
		{"sweep p95 of 1e308", "s.json", sweep(strings.Replace(oneStep, `"p95":2`, `"p95":1e308`, 1)), "sweep step 2 (down, fraction 0.9): delay_ms.p95 1e+308 is outside -1e+06 to 1e+06 ms"},
		{"sweep p99 of 1.7e308", "s.json", sweep(strings.Replace(oneStep, `"p99":3`, `"p99":1.7e308`, 1)), "sweep step 2 (down, fraction 0.9): delay_ms.p99 1.7e+308"},
		{"sweep rate of -1", "s.json", sweep(strings.Replace(oneStep, `"rate_kbit":9000`, `"rate_kbit":-1`, 1)), "rate_kbit -1 is outside 0 to 1e+10 kbit/s"},
		{"sweep budget of 1e308", "s.json", strings.Replace(sweep(oneStep), `"budget_ms":15`, `"budget_ms":1e308`, 1), "recommendation.budget_ms 1e+308"},
		{"decision delay of 1e308", "d.jsonl", `{"time":"2026-01-01T00:00:00Z","dir":"down","rate_kbit":1000}` + "\n" + `{"time":"2026-01-01T00:00:01Z","dir":"down","rate_kbit":1000,"delay_ms":1e308}`, "line 2: delay_ms 1e+308 is outside"},
		{"decision threshold of 1e308", "d.jsonl", `{"time":"2026-01-01T00:00:00Z","dir":"down","rate_kbit":1000,"threshold_ms":1e308}`, "line 1: threshold_ms 1e+308"},
		{"reflector delay of -1e308", "d.jsonl", `{"time":"2026-01-01T00:00:00Z","dir":"down","rate_kbit":1000,"reflector_delay_ms":{"192.0.2.1":-1e308}}`, `line 1: reflector_delay_ms["192.0.2.1"] -1e+308`},
		{"simulated delay of 1e308", "sim.json", simWith(t, "delay_ms", 1e308), "series.delay_ms[3] 1e+308 is outside"},
		{"simulated time of 1e308", "sim.json", simWith(t, "t_s", 1e308), "series.t_s[3] 1e+308"},
		{"simulated rate of 1e308", "sim.json", simWith(t, "rate_mbps", 1e308), "series.rate_mbps[3] 1e+308"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			var stdout, stderr bytes.Buffer
			for _, kind := range []string{"", "cdf"} {
				args := []string{"plot", "--in", writeInput(t, tt.file, tt.text), "--out", filepath.Join(dir, "fig.png")}
				if kind != "" {
					args = append(args, "--kind", kind)
				}
				if code := run(args, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), tt.want) {
					t.Errorf("%v: exit %d, stderr %q; want 2 and %q", args[1:], code, stderr.String(), tt.want)
				}
				if entries, _ := os.ReadDir(dir); len(entries) != 0 {
					t.Errorf("a refused plot left %s behind", entries[0].Name())
				}
			}
		})
	}
	t.Run("large but possible", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "fig.png")
		var stdout, stderr bytes.Buffer
		in := writeInput(t, "s.json", sweep(strings.Replace(oneStep, `"p95":2`, `"p95":999999`, 1)))
		if code := run([]string{"plot", "--in", in, "--out", out}, &stdout, &stderr); code != 0 {
			t.Errorf("exit %d: %s", code, stderr.String())
		}
	})
}

// TestSimulateRefusesAbsurdTraces: capacities whose bytes overflow (a
// negative mean came out) and traces too long to hold are refused with
// exit status 2 and a message naming the step or line.
func TestSimulateRefusesAbsurdTraces(t *testing.T) {
	day := writeInput(t, "day.trace", "1\n86400000")
	tests := []struct {
		name, trace, want string
	}{
		{"rate of 2e18 bit/s", "2000000000000000000", `invalid rate "2000000000000000000": above 10 Tbit/s`},
		{"infinite rate", "1e300gbit", `invalid rate "1e300gbit": above 10 Tbit/s`},
		{"step after 292 years", "40mbit@0s,10mbit@2562047h", `schedule step 2 ("10mbit@2562047h"): time 2562047h0m0s is beyond 24h0m0s`},
		{"13-byte trace of a day", day, "line 2: timestamp 86400000 ms is beyond 3600000 ms (1h0m0s)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run([]string{"simulate", "--trace-down", tt.trace, "--policy", "static90", "--duration", "2s"}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), tt.want) {
				t.Errorf("exit %d, stderr %q, stdout %q; want 2 and %q", code, stderr.String(), stdout.String(), tt.want)
			}
		})
	}
}
