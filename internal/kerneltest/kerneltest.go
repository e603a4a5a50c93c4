// Package kerneltest lets root tests ask what the running kernel offers.
// A test that needs a qdisc kind (cake, fq_codel, netem) skips, with the
// reason, on a kernel without it, as on the development machines; where
// AUTOSHAPE_REAL_KERNEL=1 says the kernel must have them (the User-mode Linux
// runner sets it), it fails instead, so that nothing there skips unnoticed.
package kerneltest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"testing"

	"github.com/mdlayher/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
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
)

// HasQdisc reports whether the kernel has the qdisc kind: it asks for one
// as the root of the loopback device of a new network namespace of its own,
// over netlink, and the namespace goes with the socket. The answer is
// remembered for the process. It needs root.
func HasQdisc(kind string) (bool, error) {
	mu.Lock()
	defer mu.Unlock()
	if ok, seen := probed[kind]; seen {
		return ok, nil
	}
	ok, err := probeQdisc(kind)
	if err != nil {
		return false, err
	}
	probed[kind] = ok
	return ok, nil
}

// probeQdisc adds a qdisc of the kind, without options, as the root of lo
// (ifindex 1) in a new namespace. The kernel answers ENOENT for a kind it
// has no module for; a kind that needs options (netem) answers EINVAL, and
// so is there.
func probeQdisc(kind string) (bool, error) {
	nsc := make(chan netns.NsHandle, 1)
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the thread, moved into the new namespace, ends
		// with the goroutine.
		runtime.LockOSThread()
		ns, err := netns.New()
		if err != nil {
			errc <- fmt.Errorf("failed to create a network namespace: %w", err)
			return
		}
		nsc <- ns
	}()
	var ns netns.NsHandle
	select {
	case err := <-errc:
		return false, err
	case ns = <-nsc:
	}
	defer ns.Close()
	conn, err := netlink.Dial(unix.NETLINK_ROUTE, &netlink.Config{NetNS: int(ns)})
	if err != nil {
		return false, fmt.Errorf("failed to open a netlink socket: %w", err)
	}
	defer conn.Close()
	ae := netlink.NewAttributeEncoder()
	ae.String(unix.TCA_KIND, kind)
	attrs, err := ae.Encode()
	if err != nil {
		return false, err
	}
	// struct tcmsg: family, padding, ifindex 1, handle 1:, parent root, info.
	tcm := make([]byte, 20)
	binary.NativeEndian.PutUint32(tcm[4:], 1)
	binary.NativeEndian.PutUint32(tcm[8:], 0x10000)
	binary.NativeEndian.PutUint32(tcm[12:], 0xffffffff) // TC_H_ROOT
	_, err = conn.Execute(netlink.Message{
		Header: netlink.Header{Type: unix.RTM_NEWQDISC,
			Flags: netlink.Request | netlink.Acknowledge | netlink.Create | netlink.Excl},
		Data: append(tcm, attrs...),
	})
	switch {
	case err == nil, errors.Is(err, unix.EINVAL):
		return true, nil
	case errors.Is(err, unix.ENOENT):
		return false, nil
	}
	return false, fmt.Errorf("failed to add a %s qdisc to probe for it: %w", kind, err)
}
