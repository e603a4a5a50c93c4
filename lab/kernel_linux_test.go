//go:build linux

package lab

import (
	"context"
	"math"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/autoshape/autoshape/actuator"
	"github.com/autoshape/autoshape/internal/kerneltest"
	"github.com/autoshape/autoshape/sim"
)

// Tests of the lab on a kernel with CAKE and netem (the User-mode Linux
// runner's): they skip elsewhere, and fail there if the kernel lacks them.

// TestSetRTTAddsTheRoundTrip: with netem's 40 ms, the independent probe's
// round trip between cli and srv is 40 ms and a little, half each way.
func TestSetRTTAddsTheRoundTrip(t *testing.T) {
	top := buildLab(t)
	kerneltest.RequireQdisc(t, "netem")
	if err := top.SetRTT(40 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	p, err := StartProbe(top)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	p.Stop()
	var up, down []float64
	for _, s := range p.Samples() {
		if !s.Lost {
			up = append(up, float64(s.Up)/1e6)
			down = append(down, float64(s.Down)/1e6)
		}
	}
	if len(up) < 10 {
		t.Fatalf("%d probes answered in 1.5 s at %d Hz", len(up), ProbeHz)
	}
	slices.Sort(up)
	slices.Sort(down)
	u, d := up[len(up)/2], down[len(down)/2]
	t.Logf("median one-way delays: up %.2f ms, down %.2f ms", u, d)
	if u < 20 || u > 24 || d < 20 || d > 24 {
		t.Errorf("median one-way delays up %.2f ms, down %.2f ms, want 20 ms each and a little", u, d)
	}
}

// TestCakeRouterStatic: the static scheme with the CAKE backend shapes rtr's
// WAN and its IFB with CAKE through the actuator; the download series
// carries the kernel's capacity estimate, which without autorate-ingress is
// the rate CAKE was created with; and nothing is left on rtr afterwards.
func TestCakeRouterStatic(t *testing.T) {
	top := buildLab(t)
	kerneltest.RequireQdisc(t, "cake")
	down, err := sim.ParseSchedule("8mbit")
	if err != nil {
		t.Fatal(err)
	}
	cfg := RunConfig{Duration: 5 * time.Second, Budget: 15 * time.Millisecond, Backend: actuator.CAKE, Warmup: time.Second}
	cfg.Capacity[0] = down // estimator.Down
	s, err := ParseScheme("static:0.9")
	if err != nil {
		t.Fatal(err)
	}
	rs, err := Run(context.Background(), top, cfg, s)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 || rs[0].Series == nil {
		t.Fatalf("results %+v", rs)
	}
	r := rs[0]
	if len(r.Series.CapacityEstimate) != len(r.Series.T) {
		t.Fatalf("%d estimates for %d intervals", len(r.Series.CapacityEstimate), len(r.Series.T))
	}
	for i, e := range r.Series.CapacityEstimate {
		if math.Abs(e-7.2) > 0.01 {
			t.Fatalf("estimate at %.1f s: %.3f Mbit/s, want CAKE's configured 7.2", r.Series.T[i], e)
		}
	}
	// A measurement, not a property: inside User-mode Linux the guest's
	// one CPU moves it.
	t.Logf("utilisation %.2f, p95 %.1f ms", r.Utilization, r.Delay.P95)
	out, _ := exec.Command("tc", "-n", top.Rtr, "qdisc", "show").CombinedOutput()
	if strings.Contains(string(out), "cake") {
		t.Errorf("CAKE left on rtr after the run:\n%s", out)
	}
}

// TestAutorateSchemeFollowsTheEstimate: under the autorate scheme the
// kernel's CAKE sets its own download rate to 15/16 of its capacity
// estimate, which moves with the load; the lab sees both.
func TestAutorateSchemeFollowsTheEstimate(t *testing.T) {
	top := buildLab(t)
	kerneltest.RequireQdisc(t, "cake")
	down, err := sim.ParseSchedule("6mbit")
	if err != nil {
		t.Fatal(err)
	}
	cfg := RunConfig{Duration: 6 * time.Second, Budget: 15 * time.Millisecond, Backend: actuator.CAKE, Warmup: time.Second}
	cfg.Capacity[0] = down
	s, err := ParseScheme("autorate")
	if err != nil {
		t.Fatal(err)
	}
	rs, err := Run(context.Background(), top, cfg, s)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 || rs[0].Series == nil || len(rs[0].Series.CapacityEstimate) == 0 {
		t.Fatalf("results %+v", rs)
	}
	ser := rs[0].Series
	n := len(ser.CapacityEstimate)
	est, rate := ser.CapacityEstimate[n-1], ser.Rate[n-1]
	t.Logf("estimate from %.2f to %.2f Mbit/s; CAKE's rate at the end %.2f; %d rate changes",
		ser.CapacityEstimate[0], est, rate, rs[0].RateChanges)
	if rs[0].RateChanges == 0 {
		t.Error("CAKE's rate never changed under autorate-ingress")
	}
	if slices.Min(ser.CapacityEstimate) == slices.Max(ser.CapacityEstimate) {
		t.Error("the capacity estimate never moved under load")
	}
	if math.Abs(rate-est*15/16) > 0.05*est {
		t.Errorf("CAKE's rate %.3f Mbit/s, want 15/16 of its estimate %.3f", rate, est)
	}
}
