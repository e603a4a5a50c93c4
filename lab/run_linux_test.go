//go:build linux

package lab

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/autoshape/autoshape/sim"
)

// buildAutoshape compiles the daemon for the autoshape scheme.
func buildAutoshape(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "autoshape")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/autoshape/autoshape/cmd/autoshape").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v: %s", err, out)
	}
	return bin
}

// TestRunSchemesOnStep: a short step scenario (20 → 5 Mbit/s down at 8 s)
// under unshaped, static and the daemon. Unshaped fills the half-second
// buffer; static:0.9 of the mean rate holds delay while the capacity is
// above it and not after the drop; autoshape cuts after the drop, so its
// delay is far below unshaped's, and it leaves nothing behind. The line,
// holding a queue, sends at its rate (sim.Delivery).
func TestRunSchemesOnStep(t *testing.T) {
	top := buildLab(t)
	down, err := sim.ParseSchedule("20mbit@0s,5mbit@8s")
	if err != nil {
		t.Fatal(err)
	}
	cfg := RunConfig{Duration: 20 * time.Second, Budget: 15 * time.Millisecond, Autoshape: buildAutoshape(t)}
	cfg.Capacity[0] = down // estimator.Down
	results := map[string]sim.Result{}
	for _, name := range []string{"unshaped", "autoshape"} {
		s, err := ParseScheme(name)
		if err != nil {
			t.Fatal(err)
		}
		rs, err := Run(context.Background(), top, cfg, s)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(rs) != 1 || rs[0].Direction != "down" || rs[0].Series == nil || len(rs[0].Series.T) < 190 {
			t.Fatalf("%s: results %+v", name, rs)
		}
		r := rs[0]
		r.Series = nil
		t.Logf("%s: %+v", name, r)
		if r.Bottleneck != nil {
			t.Logf("%s: the line's delivery %+v", name, *r.Bottleneck)
		}
		results[name] = rs[0]
	}
	u, a := results["unshaped"], results["autoshape"]
	if u.Delay.P95 < 200 {
		t.Errorf("unshaped p95 added delay %v ms, want the buffer's hundreds", u.Delay.P95)
	}
	if a.Delay.P95 > u.Delay.P95/3 {
		t.Errorf("autoshape p95 %v ms, unshaped %v ms: want far less", a.Delay.P95, u.Delay.P95)
	}
	if a.ReactionS == nil || a.RateChanges == 0 {
		t.Errorf("autoshape: reaction %v, %d rate changes", a.ReactionS, a.RateChanges)
	}
	// Unshaped, the line holds its buffer's queue nearly throughout and,
	// holding it, sends at its rate: the lab's check on itself counts it.
	if b := u.Bottleneck; b == nil || b.QueuedS < 10 || b.Share < 0.85 || b.Share > 1.1 {
		t.Errorf("unshaped: the line's delivery %+v, want a queue for 10 s or more with its rate sent", b)
	}
	if a.Bottleneck == nil {
		t.Errorf("autoshape: no account of the line's delivery")
	}
	if u.Utilization < 0.8 || a.Utilization < 0.4 {
		t.Errorf("utilisation unshaped %v, autoshape %v", u.Utilization, a.Utilization)
	}
	out, _ := exec.Command("ip", "-n", top.Rtr, "link", "show").CombinedOutput()
	if strings.Contains(string(out), "ifb4") {
		t.Errorf("the daemon left its IFB behind:\n%s", out)
	}
}
