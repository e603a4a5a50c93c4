//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
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
