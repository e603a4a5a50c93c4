//go:build linux

package uml_test

import (
	"context"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/autoshape/autoshape/actuator"
	"github.com/autoshape/autoshape/estimator"
	"github.com/autoshape/autoshape/lab"
	"github.com/autoshape/autoshape/lab/uml"
	"github.com/autoshape/autoshape/sim"
)

// TestOnRealKernelSplitLab runs the split lab (linklab run --kernel uml):
// the router half inside a kernel booted for the run, cli and srv on the
// host. static:0.9 on a 10 Mbit/s line with a 20 ms round trip gets its
// rate through with the short queue CAKE keeps, the CAKE shaper's estimate
// (its own rate, without autorate-ingress) comes back from inside, a
// second run (a second kernel) measures the same path, and the host is
// left as it was. Like TestOnRealKernel it needs root and
// AUTOSHAPE_UML=1 (CI sets both).
func TestOnRealKernelSplitLab(t *testing.T) {
	if os.Getenv("AUTOSHAPE_UML") != "1" {
		t.Skip("skipping: set AUTOSHAPE_UML=1 to run the split lab with the User-mode Linux kernel (CI does)")
	}
	if os.Geteuid() != 0 {
		t.Skip("skipping: the split lab needs root")
	}
	if err := uml.Install(os.Stderr); err != nil {
		t.Fatal(err)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	linklab := filepath.Join(t.TempDir(), "linklab")
	build := exec.Command("go", "build", "-o", linklab, "./cmd/linklab")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/linklab: %v\n%s", err, out)
	}
	const prefix = "asspl-"
	top, err := lab.BuildHosts(prefix)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := top.Close(); err != nil {
			t.Error(err)
		}
		out, _ := exec.Command("ip", "netns", "list").Output()
		if left, _ := lab.RemoveStale(prefix); len(left) > 0 {
			t.Errorf("namespaces left behind: %v (ip netns list: %s)", left, out)
		}
	}()

	capacity, err := sim.ParseSchedule("10mbit")
	if err != nil {
		t.Fatal(err)
	}
	cfg := lab.RunConfig{Duration: 8 * time.Second, Budget: 15 * time.Millisecond, Backend: actuator.CAKE,
		RTT: 20 * time.Millisecond, Warmup: 2 * time.Second}
	cfg.Capacity[estimator.Down] = capacity
	scheme, err := lab.ParseScheme("static:0.9")
	if err != nil {
		t.Fatal(err)
	}
	guest := lab.GuestCommand{
		Argv:   []string{linklab, "router", "--kernel", "uml", "--trace-down", "10mbit", "--duration", "8s", "--scheme", "static:0.9"},
		Stderr: testWriter{t},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// Twice, as linklab runs one scheme after another: each run boots a
	// kernel of its own, and the second's path must be as the first's (the
	// hosts' neighbour entries must still hold; see uml.vectorMAC).
	for boot := 1; boot <= 2; boot++ {
		splitRun(ctx, t, boot, top, cfg, scheme, guest)
	}
}

// splitRun is one run of TestOnRealKernelSplitLab and its checks.
func splitRun(ctx context.Context, t *testing.T, boot int, top *lab.Topology, cfg lab.RunConfig, scheme lab.Scheme, guest lab.GuestCommand) {
	t.Helper()
	rs, err := lab.RunSplit(ctx, top, cfg, scheme, guest)
	if err != nil {
		t.Fatalf("boot %d: %v", boot, err)
	}
	if len(rs) != 1 || rs[0].Direction != "down" {
		t.Fatalf("boot %d: results %+v, want the download's alone", boot, rs)
	}
	r := rs[0]
	t.Logf("boot %d: goodput %.2f Mbit/s at rate %.2f, p50 %.1f ms, p95 %.1f ms", boot, r.GoodputMbps, r.MeanRateMbps, r.Delay.P50, r.Delay.P95)
	if r.MeanRateMbps != 9 {
		t.Errorf("boot %d: mean rate %.3f Mbit/s, want the static 9", boot, r.MeanRateMbps)
	}
	// TCP/IP headers and the ramp take some; a shaper that did not shape
	// would pass 10.
	if r.GoodputMbps < 7.5 || r.GoodputMbps > 9 {
		t.Errorf("boot %d: goodput %.2f Mbit/s through CAKE at 9, want 7.5 to 9", boot, r.GoodputMbps)
	}
	// Two faults would show in the delay, and each has a bar that the
	// host's scheduling noise does not reach. The path's 10 ms one way
	// counted as queue (a baseline of 0) puts every sample at 10 ms or
	// more, so no 100 ms of the run could average under 10. A queue at the
	// 10 Mbit/s bottleneck (its buffer is 500 ms) puts the p50 in the
	// hundreds. With the kernel on one host CPU the p50 was 1.8-6.1 ms in
	// 16 boots on a 2-core machine, 5-6 ms with a busy loop sharing that
	// CPU, and 19.5 ms (p95 55.7) once in CI: timing goes to the lab's
	// report, not to this test (docs/sim-vs-lab.md, "The split lab").
	// A 100 ms with no probe answered holds 0; with the bias none could.
	lowest := math.Inf(1)
	for _, v := range r.Series.Delay {
		if v > 0 {
			lowest = min(lowest, v)
		}
	}
	t.Logf("boot %d: the lowest 100 ms mean of the added delay %.1f ms", boot, lowest)
	if lowest >= 10 {
		t.Errorf("boot %d: no 100 ms of the run averaged under the path's 10 ms one way (lowest %.1f ms): the baseline is biased", boot, lowest)
	}
	if r.Delay.P50 > 50 {
		t.Errorf("boot %d: p50 added delay %.1f ms at 90 %% of the bottleneck, want under a tenth of the line's 500 ms buffer", boot, r.Delay.P50)
	}
	est := r.Series.CapacityEstimate
	if len(est) == 0 || est[len(est)/2] != 9 {
		t.Errorf("boot %d: CAKE's estimate from inside %v, want 9 Mbit/s (its rate without autorate-ingress)", boot, est)
	}
}

// testWriter is the kernel's console in the test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s", p)
	return len(p), nil
}
