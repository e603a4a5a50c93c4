//go:build linux

package uml_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/autoshape/autoshape/lab/uml"
)

// realKernelSuites are the packages whose tests run inside the User-mode
// Linux kernel: those run matches (all when empty), less those skip names
// (tests of a kernel without CAKE, which run on the host, whose kernel has
// none).
var realKernelSuites = []struct {
	pkg, run, skip string
}{
	{pkg: "internal/kerneltest"},
	{pkg: "actuator", skip: "NotSupported$"},
	// The sweep test measures delay against a bar that the guest's one CPU
	// moves; it runs on the host (HTB), as the sweep does. TestFaults' rows
	// (probes, clocks, disk, reloads) do not depend on the shaper and run
	// on the host; TestFaultsOnShaping's run here with CAKE.
	// TestDaemonLifecycle's HTB half runs on the host only: inside, amid
	// the whole suite, it failed once in three runs (2026-12-02, not
	// reproduced alone in three more); its CAKE half runs here.
	{pkg: "cmd/autoshape", skip: "NotSupported$|^TestSweepOnBloatedLine$|^TestFaults$|^TestDaemonLifecycle$"},
	{pkg: "cmd/autoshape", run: "^TestDaemonLifecycle$/^cake$"},
	// The lab's tests of CAKE and netem; the rest build the daemon with the
	// go command, which would take minutes there, and run on the host.
	{pkg: "lab", run: "^(TestSetRTTAddsTheRoundTrip|TestCakeRouterStatic|TestAutorateSchemeFollowsTheEstimate)$"},
}

// TestOnRealKernel runs the root tests of realKernelSuites inside the
// User-mode Linux kernel, where CAKE, fq_codel and netem exist and xfrm_user
// is not loaded. There AUTOSHAPE_REAL_KERNEL=1 turns a test's skip for a
// missing qdisc into a failure, and this test fails on any skip at all:
// everything must run. It needs root (to install the kernel when missing)
// and AUTOSHAPE_UML=1, which CI sets; without it it skips, so that `go test
// ./...` stays quick.
//
// A test that fails is run once more, alone, in a fresh boot of the
// kernel. One that passes then is reported as flaky, with the output of
// its failure, and does not fail this test: the guest has one CPU, which
// a busy host slows, and the actuator suite failed there once in ten runs
// without a name to show for it (2026-12-02). One that fails again fails
// this test.
func TestOnRealKernel(t *testing.T) {
	if os.Getenv("AUTOSHAPE_UML") != "1" {
		t.Skip("skipping: set AUTOSHAPE_UML=1 to run the root tests inside the User-mode Linux kernel (CI does)")
	}
	if os.Geteuid() != 0 {
		t.Skip("skipping: the tests inside the User-mode Linux kernel need root to install it and as their own user")
	}
	if err := uml.Install(os.Stderr); err != nil {
		t.Fatal(err)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bins := make([]string, len(realKernelSuites))
	for i, s := range realKernelSuites {
		bins[i] = filepath.Join(dir, fmt.Sprintf("suite%d.test", i))
		build := exec.Command("go", "test", "-c", "-o", bins[i], "./"+s.pkg)
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go test -c ./%s: %v\n%s", s.pkg, err, out)
		}
	}
	runs := make([]string, len(realKernelSuites))
	for i, s := range realKernelSuites {
		runs[i] = s.run
	}
	first := runSuites(t, root, dir, "first", false, bins, runs)

	// The failed top-level tests, once more, alone.
	again := make([]string, len(realKernelSuites))
	var retry bool
	for i, r := range first {
		var names []string
		for _, f := range r.failed {
			if !strings.Contains(f, "/") {
				names = append(names, regexp.QuoteMeta(f))
			}
		}
		if r.rc == "0" || len(names) == 0 {
			continue
		}
		again[i], retry = "^("+strings.Join(names, "|")+")$", true
	}
	var second []suiteResult
	if retry {
		second = runSuites(t, root, dir, "again", true, bins, again)
	}

	// The names of what failed come again last, with each one's first
	// lines, since CI keeps only the end of a long output.
	var summary []string
	defer func() {
		if len(summary) > 0 {
			t.Errorf("failed inside the kernel:\n%s", strings.Join(summary, "\n"))
		}
	}()
	for i, s := range realKernelSuites {
		r := first[i]
		t.Logf("%s inside the kernel: %d passed, %d failed, %d skipped", s.pkg, r.counts["PASS"], r.counts["FAIL"], r.counts["SKIP"])
		if r.rc != "0" || r.counts["FAIL"] > 0 {
			detail := failures(r.log)
			if detail == "" { // a panic or a timeout has no FAIL line of its own
				detail = r.log
			}
			if again[i] != "" && second[i].rc == "0" && second[i].counts["FAIL"] == 0 && second[i].counts["PASS"] > 0 {
				t.Logf("FLAKY inside the kernel: %s: %s failed, then passed when run again alone:\n%s",
					s.pkg, strings.Join(r.failed, ", "), tail(detail, 6000))
			} else {
				t.Errorf("%s failed inside the kernel (exit %s):\n%s\n... the log's end:\n%s", s.pkg, r.rc, detail, tail(r.log, 6000))
				summary = append(summary, fmt.Sprintf("%s (exit %s): %s\n%s", s.pkg, r.rc, strings.Join(r.failed, ", "), tail(detail, 1500)))
				if again[i] != "" {
					summary = append(summary, fmt.Sprintf("%s, run again alone (exit %s): %s\n%s", s.pkg, second[i].rc,
						strings.Join(second[i].failed, ", "), tail(failures(second[i].log), 1500)))
				}
			}
		}
		if len(r.skipped) > 0 {
			t.Errorf("%s: tests skipped inside the kernel, where everything must run: %s\n%s", s.pkg, strings.Join(r.skipped, ", "), skips(r.log))
		}
		if r.counts["PASS"] == 0 {
			t.Errorf("%s: no test passed inside the kernel:\n%s", s.pkg, tail(r.log, 4000))
		}
	}
}

// A suiteResult is what one suite's test binary did inside the kernel.
type suiteResult struct {
	rc, log         string
	counts          map[string]int
	failed, skipped []string
}

// runSuites boots the kernel once and runs there bins[i] with -test.run
// runs[i] (all its tests where runs[i] is empty, or, with named, none), and
// returns what each did; name tells the boots' logs apart.
func runSuites(t *testing.T, root, dir, name string, named bool, bins, runs []string) []suiteResult {
	t.Helper()
	var script strings.Builder
	for i, s := range realKernelSuites {
		if named && runs[i] == "" {
			continue
		}
		args := []string{bins[i], "-test.v", "-test.count=1", "-test.timeout=15m"}
		if runs[i] != "" {
			args = append(args, "-test.run", runs[i])
		}
		if s.skip != "" {
			args = append(args, "-test.skip", s.skip)
		}
		var q []string
		for _, a := range args {
			q = append(q, "'"+a+"'")
		}
		fmt.Fprintf(&script, "cd '%s' && %s > '%s/%s%d.log' 2>&1; echo $? > '%s/%s%d.rc'\n",
			filepath.Join(root, s.pkg), strings.Join(q, " "), dir, name, i, dir, name, i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), uml.Timeout)
	defer cancel()
	start := time.Now()
	var console strings.Builder
	code, err := uml.Run(ctx, uml.Config{Modules: uml.LabModules, Mem: "1G", Dir: dir,
		Env: []string{"AUTOSHAPE_REAL_KERNEL=1"}, Stderr: &console}, "sh", "-c", script.String())
	if err != nil || code != 0 {
		t.Fatalf("the suites inside the kernel (%s): exit %d, %v; console:\n%s", name, code, err, console.String())
	}
	t.Logf("inside the kernel (%s) for %v", name, time.Since(start).Round(time.Second))

	result := regexp.MustCompile(`(?m)^\s*--- (PASS|FAIL|SKIP): (\S+)`)
	out := make([]suiteResult, len(realKernelSuites))
	for i, s := range realKernelSuites {
		if named && runs[i] == "" {
			continue
		}
		log, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("%s%d.log", name, i)))
		if err != nil {
			t.Fatalf("%s: no log: %v", s.pkg, err)
		}
		rc, _ := os.ReadFile(filepath.Join(dir, fmt.Sprintf("%s%d.rc", name, i)))
		r := suiteResult{rc: strings.TrimSpace(string(rc)), log: string(log), counts: map[string]int{}}
		for _, m := range result.FindAllStringSubmatch(r.log, -1) {
			r.counts[m[1]]++
			switch m[1] {
			case "SKIP":
				r.skipped = append(r.skipped, m[2])
			case "FAIL":
				r.failed = append(r.failed, m[2])
			}
		}
		out[i] = r
	}
	return out
}

// failures is what the log holds for each failed test: its FAIL line and
// the lines it printed. go test -v prints those after the test's "=== RUN"
// line, up to the next test's; a subtest's FAIL line comes only at its
// parent's end, far from them. At most 60 lines each.
func failures(log string) string {
	lines := strings.Split(log, "\n")
	var out []string
	for i, l := range lines {
		_, rest, ok := strings.Cut(l, "--- FAIL: ")
		if !ok {
			continue
		}
		name, _, _ := strings.Cut(rest, " ")
		out = append(out, l)
		start := slices.Index(lines[:i], "=== RUN   "+name)
		if start < 0 {
			continue
		}
		for _, m := range lines[start+1 : min(i, start+61)] {
			if strings.HasPrefix(m, "=== ") || strings.Contains(m, "--- ") {
				break
			}
			out = append(out, m)
		}
	}
	return strings.Join(out, "\n")
}

// skips is the log's skip lines with the reason each test gave.
func skips(log string) string {
	var out []string
	lines := strings.Split(log, "\n")
	for i, l := range lines {
		if strings.Contains(l, "--- SKIP") {
			out = append(out, l)
			if i+1 < len(lines) {
				out = append(out, lines[i+1])
			}
		}
	}
	return strings.Join(out, "\n")
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// TestFailures: each failed test's FAIL line comes with the lines it
// printed, a subtest's too, whose FAIL line go test -v prints only at its
// parent's end; a passing test's lines do not come.
func TestFailures(t *testing.T) {
	log := `=== RUN   TestA
=== RUN   TestA/one
    a_test.go:1: one's note
=== RUN   TestA/two
    a_test.go:2: two went wrong
    a_test.go:3: and more
=== RUN   TestA/three
--- FAIL: TestA (5.33s)
    --- PASS: TestA/one (0.00s)
    --- FAIL: TestA/two (5.03s)
    --- PASS: TestA/three (0.00s)
=== RUN   TestB
    b_test.go:9: B failed
--- FAIL: TestB (0.10s)
=== RUN   TestC
--- PASS: TestC (0.00s)
FAIL`
	want := `--- FAIL: TestA (5.33s)
    --- FAIL: TestA/two (5.03s)
    a_test.go:2: two went wrong
    a_test.go:3: and more
--- FAIL: TestB (0.10s)
    b_test.go:9: B failed`
	if got := failures(log); got != want {
		t.Errorf("failures =\n%s\nwant\n%s", got, want)
	}
}
