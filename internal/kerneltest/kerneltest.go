// Package kerneltest lets root tests ask what the running kernel offers.
// A test that needs a qdisc kind (cake, fq_codel, netem) skips, with the
// reason, on a kernel without it, as on the development machines; where
// AUTOSHAPE_REAL_KERNEL=1 says the kernel must have them (the User-mode Linux
// runner sets it), it fails instead, so that nothing there skips unnoticed.
package kerneltest

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// EnvRealKernel names the environment variable that says the kernel has
// every qdisc kind the tests need.
const EnvRealKernel = "AUTOSHAPE_REAL_KERNEL"

// RealKernel reports whether AUTOSHAPE_REAL_KERNEL=1.
func RealKernel() bool { return os.Getenv(EnvRealKernel) == "1" }

// RequireQdisc skips tb unless the kernel has every one of the qdisc kinds;
// with AUTOSHAPE_REAL_KERNEL=1 it fails tb instead. It needs root, as the
// tests that call it do.
func RequireQdisc(tb testing.TB, kinds ...string) {
	tb.Helper()
	requireRoot(tb)
	for _, kind := range kinds {
		ok, err := HasQdisc(kind)
		switch {
		case err != nil:
			tb.Fatalf("failed to find out whether the kernel has the %s qdisc: %v", kind, err)
		case ok:
			continue
		case RealKernel():
			tb.Fatalf("the kernel has no %s qdisc, and %s=1 says it must", kind, EnvRealKernel)
		default:
			tb.Skipf("skipping: the kernel has no %s qdisc (set %s=1 to make this a failure)", kind, EnvRealKernel)
		}
	}
}

// RequireNoQdisc skips tb when the kernel has the qdisc kind: for tests of
// what autoshape does on a kernel without it. A run with
// AUTOSHAPE_REAL_KERNEL=1 excludes such tests by name rather than seeing
// them skip.
func RequireNoQdisc(tb testing.TB, kind string) {
	tb.Helper()
	requireRoot(tb)
	ok, err := HasQdisc(kind)
	if err != nil {
		tb.Fatalf("failed to find out whether the kernel has the %s qdisc: %v", kind, err)
	}
	if ok {
		tb.Skipf("skipping: the kernel has the %s qdisc, and this test needs a kernel without it", kind)
	}
}

// requireRoot skips tb unless it runs as root, which the probe needs.
func requireRoot(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("skipping: needs root to create network namespaces and find out which qdiscs the kernel has")
	}
}

var (
	mu     sync.Mutex
	probed = map[string]bool{}
	seq    atomic.Int64
)

// HasQdisc reports whether the kernel has the qdisc kind: it adds one as the
// root of the loopback device of a network namespace of its own, which it
// then deletes. The answer is remembered for the process. It needs root.
func HasQdisc(kind string) (bool, error) {
	mu.Lock()
	defer mu.Unlock()
	if ok, seen := probed[kind]; seen {
		return ok, nil
	}
	ns := fmt.Sprintf("autoshape-probe-%d-%d", os.Getpid(), seq.Add(1))
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		return false, fmt.Errorf("ip netns add %s: %v: %s", ns, err, out)
	}
	defer exec.Command("ip", "netns", "del", ns).Run()
	out, err := exec.Command("tc", "-n", ns, "qdisc", "add", "dev", "lo", "root", "handle", "1:", kind).CombinedOutput()
	switch {
	case err == nil:
		probed[kind] = true
	case strings.Contains(string(out), "kind is unknown"):
		// The kernel's answer (ENOENT) to a kind it has no module for.
		probed[kind] = false
	default:
		return false, fmt.Errorf("tc qdisc add dev lo root %s: %v: %s", kind, err, out)
	}
	return probed[kind], nil
}
