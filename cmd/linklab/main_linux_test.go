//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunJSON: a short unshaped run of the dsl scenario prints the
// simulator's JSON shape with series, and leaves no namespace behind.
func TestRunJSON(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: builds network namespaces")
	}
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
	if strings.Contains(string(out), "aslab-") {
		t.Errorf("namespaces left behind:\n%s", out)
	}
}

// TestSweepDSL: `linklab sweep` runs autoshape's sweep on rtr against the
// lab's endpoint over the dsl line and passes its JSON through; a shaped
// step stays within the budget and the unshaped one fills the line's buffer.
func TestSweepDSL(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: builds network namespaces")
	}
	bin := filepath.Join(t.TempDir(), "autoshape")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/autoshape/autoshape/cmd/autoshape").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v: %s", err, out)
	}
	var stdout, stderr bytes.Buffer
	code := run([]string{"sweep", "--scenario", "dsl", "--direction", "down", "--from", "0.8", "--to", "1", "--step", "0.2",
		"--hold", "4s", "--autoshape", bin, "--json"}, &stdout, &stderr)
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
		} `json:"recommendation"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("%v: %s", err, stdout.String())
	}
	t.Logf("%s", stdout.String())
	if len(rep.Steps) != 3 || math.Round(rep.Steps[0].RateKbit) != 14090 || rep.Steps[2].RateKbit != 0 {
		t.Fatalf("steps %+v", rep.Steps)
	}
	if p := rep.Steps[0].Delay.P95; p > 15 {
		t.Errorf("at 80 %% of the line: p95 %v ms", p)
	}
	if p := rep.Steps[2].Delay.P95; p < 100 {
		t.Errorf("unshaped: p95 %v ms, want the line's buffer", p)
	}
	if rep.Recommendation.DownKbit < 14090 || rep.Recommendation.DownKbit > 17613 {
		t.Errorf("recommendation %v kbit/s", rep.Recommendation.DownKbit)
	}
	out, _ := exec.Command("ip", "netns", "list").Output()
	if strings.Contains(string(out), "aslab-") {
		t.Errorf("namespaces left behind:\n%s", out)
	}
}
