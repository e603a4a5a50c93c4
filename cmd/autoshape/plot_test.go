package main

import (
	"bytes"
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
