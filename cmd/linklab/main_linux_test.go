//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/autoshape/autoshape/estimator"
	"github.com/autoshape/autoshape/lab"
	"github.com/autoshape/autoshape/sim"
)

// TestRunJSON: a short unshaped run of the dsl scenario prints the
// simulator's JSON shape with series, and leaves no namespace behind.
func TestRunJSON(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: builds network namespaces")
	}
	exclusive(t)
	// Not the default prefix, which a manual linklab run may be using.
	t.Setenv("LINKLAB_PREFIX", "asxj-")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"run", "--scenario", "dsl", "--scheme", "unshaped", "--duration", "6s", "--json"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var rep Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("%v: %s", err, stdout.String())
	}
	if len(rep.Results) != 2 || rep.BudgetMs != 15 || rep.TraceDown != "17613kbit" {
		t.Fatalf("report %+v", rep)
	}
	for _, r := range rep.Results {
		if r.Series == nil || len(r.Series.T) < 50 || r.GoodputMbps <= 0 {
			t.Errorf("%s: goodput %v, series %v", r.Direction, r.GoodputMbps, r.Series != nil)
		}
		// ATM framing with 44 bytes costs about a fifth of the gross rate.
		if r.Utilization > 0.95 {
			t.Errorf("%s: utilisation %v of the gross rate through ATM framing", r.Direction, r.Utilization)
		}
		t.Logf("%s: goodput %.2f of %.2f Mbit/s, p95 %.1f ms", r.Direction, r.GoodputMbps, r.CapacityMbps, r.Delay.P95)
	}
	out, _ := exec.Command("ip", "netns", "list").Output()
	if strings.Contains(string(out), "asxj-") {
		t.Errorf("namespaces left behind:\n%s", out)
	}
}

// TestSweepDSL: `linklab sweep` runs autoshape's sweep on rtr against the
// lab's endpoint over the dsl line (the shaper given its ATM framing) and
// passes its JSON through. The recommendation lies within 80–100 % of the
// line rate down and 90–100 % up, the unshaped steps fill the line's
// buffer, and static shaping at the recommendation, measured by the lab's
// independent probe, keeps the p95 added delay within the budget.
func TestSweepDSL(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: builds network namespaces")
	}
	exclusive(t)
	bin := filepath.Join(t.TempDir(), "autoshape")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/autoshape/autoshape/cmd/autoshape").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v: %s", err, out)
	}
	// Not the default prefix, which a manual linklab run may be using.
	const prefix = "asxs-"
	t.Setenv("LINKLAB_PREFIX", prefix)
	var stdout, stderr bytes.Buffer
	code := run([]string{"sweep", "--scenario", "dsl", "--direction", "both", "--from", "0.8", "--to", "1", "--step", "0.1",
		"--hold", "5s", "--autoshape", bin, "--json"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var rep struct {
		Steps []struct {
			Direction   string                `json:"direction"`
			RateKbit    float64               `json:"rate_kbit"`
			GoodputKbit float64               `json:"goodput_kbit"`
			Delay       struct{ P95 float64 } `json:"delay_ms"`
		} `json:"steps"`
		Recommendation struct {
			DownKbit float64 `json:"down_kbit"`
			UpKbit   float64 `json:"up_kbit"`
		} `json:"recommendation"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("%v: %s", err, stdout.String())
	}
	if len(rep.Steps) != 8 || math.Round(rep.Steps[0].RateKbit) != 14090 || rep.Steps[3].RateKbit != 0 || rep.Steps[7].RateKbit != 0 {
		t.Fatalf("steps %+v", rep.Steps)
	}
	for _, i := range []int{3, 7} {
		if p := rep.Steps[i].Delay.P95; p < 100 {
			t.Errorf("unshaped %s: p95 %v ms, want the line's buffer", rep.Steps[i].Direction, p)
		}
	}
	rec := rep.Recommendation
	t.Logf("recommendation: down %v kbit/s (%.2f of the line), up %v kbit/s (%.2f)", rec.DownKbit, rec.DownKbit/17613, rec.UpKbit, rec.UpKbit/2604)
	if f := rec.DownKbit / 17613; f < 0.8-1e-3 || f > 1 {
		t.Errorf("download recommendation %v kbit/s: %.2f of the line rate, want 0.8 to 1", rec.DownKbit, f)
	}
	if f := rec.UpKbit / 2604; f < 0.9-1e-3 || f > 1 {
		t.Errorf("upload recommendation %v kbit/s: %.2f of the line rate, want 0.9 to 1", rec.UpKbit, f)
	}

	// Static shaping at each recommendation, one direction loaded at a time.
	top, err := lab.Build(prefix)
	if err != nil {
		t.Fatal(err)
	}
	defer top.Close()
	for _, c := range []struct {
		dir        estimator.Direction
		line, rate float64
	}{{estimator.Down, 17613e3, rec.DownKbit * 1000}, {estimator.Up, 2604e3, rec.UpKbit * 1000}} {
		if c.rate == 0 {
			continue
		}
		capacity, err := sim.ParseSchedule(fmt.Sprintf("%.0f", c.line))
		if err != nil {
			t.Fatal(err)
		}
		cfg := lab.RunConfig{Duration: 8 * time.Second, Budget: 15 * time.Millisecond, Bottleneck: scenarios["dsl"].bottleneck}
		cfg.Capacity[c.dir] = capacity
		s, err := lab.ParseScheme(fmt.Sprintf("static:%.4f", c.rate/c.line))
		if err != nil {
			t.Fatal(err)
		}
		rs, err := lab.Run(context.Background(), top, cfg, s)
		if err != nil || len(rs) != 1 {
			t.Fatalf("static run: %v %+v", err, rs)
		}
		t.Logf("%s static at %.0f kbit/s: goodput %.2f Mbit/s, p95 %.1f ms", c.dir, c.rate/1000, rs[0].GoodputMbps, rs[0].Delay.P95)
		if rs[0].Delay.P95 > 15 {
			t.Errorf("%s shaped at the recommended %.0f kbit/s: p95 added delay %.1f ms, over the 15 ms budget", c.dir, c.rate/1000, rs[0].Delay.P95)
		}
	}
	top.Close()
	out, _ := exec.Command("ip", "netns", "list").Output()
	if strings.Contains(string(out), prefix) {
		t.Errorf("namespaces left behind:\n%s", out)
	}
}
