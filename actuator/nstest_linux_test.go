//go:build linux

package actuator

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Helpers for tests that need root: each test builds its own network
// namespaces and links, and sends packets only inside them. iproute2 builds
// the scenery and reads back what the kernel holds; the code under test
// reaches the kernel through netlink handles opened in the namespace.

// requireRoot skips tb unless it runs as root.
func requireRoot(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("skipping: needs root to create network namespaces and change traffic control")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		tb.Skip("skipping: needs iproute2's ip to build test namespaces")
	}
}

var testNSSeq atomic.Int64

// newTestNS creates a network namespace with a name unique to this process,
// with its loopback up, and deletes it when tb ends. It skips tb unless
// root.
func newTestNS(tb testing.TB) (name string, ns netns.NsHandle) {
	tb.Helper()
	requireRoot(tb)
	name = fmt.Sprintf("autoshape-%d-%d", os.Getpid(), testNSSeq.Add(1))
	runCmd(tb, "ip", "netns", "add", name)
	tb.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			tb.Errorf("failed to delete namespace %s: %v: %s", name, err, out)
		}
	})
	ns, err := netns.GetFromName(name)
	if err != nil {
		tb.Fatalf("failed to open namespace %s: %v", name, err)
	}
	tb.Cleanup(func() { ns.Close() })
	runCmd(tb, "ip", "-n", name, "link", "set", "lo", "up")
	return name, ns
}

// A testEnd is one end of a veth pair: its namespace, device and address
// with prefix length (e.g. "10.9.0.1/24").
type testEnd struct {
	NS, Dev, Addr string
}

// IP is the end's address without its prefix length.
func (e testEnd) IP() string { return strings.Split(e.Addr, "/")[0] }

// newTestVeth links a and b with a veth pair, addresses both ends and sets
// them up. The namespaces may be the same. Deleting a namespace deletes the
// pair.
func newTestVeth(tb testing.TB, a, b testEnd) {
	tb.Helper()
	runCmd(tb, "ip", "-n", a.NS, "link", "add", a.Dev, "type", "veth", "peer", "name", b.Dev, "netns", b.NS)
	for _, e := range []testEnd{a, b} {
		if e.Addr != "" {
			runCmd(tb, "ip", "-n", e.NS, "addr", "add", e.Addr, "dev", e.Dev)
		}
		runCmd(tb, "ip", "-n", e.NS, "link", "set", e.Dev, "up")
	}
}

// runCmd runs a command and returns its standard output; it fails tb when
// the command fails.
func runCmd(tb testing.TB, name string, args ...string) string {
	tb.Helper()
	cmd := exec.Command(name, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		tb.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

// inNS runs fn on an OS thread that has entered ns. The thread is thrown
// away afterwards when it could not return to its own namespace.
func inNS(ns netns.NsHandle, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- fmt.Errorf("failed to read the thread's namespace: %w", err)
			return
		}
		defer orig.Close()
		if err := netns.Set(ns); err != nil {
			errc <- fmt.Errorf("failed to enter namespace: %w", err)
			return
		}
		ferr := fn()
		// A thread left in ns stays locked, so the runtime ends it with
		// this goroutine rather than reuse it.
		if err := netns.Set(orig); err != nil {
			errc <- fmt.Errorf("failed to leave namespace: %w", err)
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// sendUDP sends n datagrams of size bytes of payload from a socket in ns
// to dst (host:port, IPv4 or IPv6), one every gap.
func sendUDP(tb testing.TB, ns netns.NsHandle, dst string, n, size int, gap time.Duration) {
	tb.Helper()
	network := "udp4"
	if strings.Contains(dst, "[") {
		network = "udp6"
	}
	err := inNS(ns, func() error {
		// The socket belongs to the namespace it was made in. Unconnected,
		// so that the ICMP "port unreachable" answers do not fail writes.
		conn, err := net.ListenPacket(network, ":0")
		if err != nil {
			return err
		}
		defer conn.Close()
		addr, err := net.ResolveUDPAddr(network, dst)
		if err != nil {
			return err
		}
		payload := make([]byte, size)
		for i := range n {
			if _, err := conn.WriteTo(payload, addr); err != nil {
				return fmt.Errorf("datagram %d: %w", i, err)
			}
			time.Sleep(gap)
		}
		return nil
	})
	if err != nil {
		tb.Fatalf("failed to send UDP to %s: %v", dst, err)
	}
}

// testTC opens a traffic control connection in ns, closed when tb ends.
func testTC(tb testing.TB, ns netns.NsHandle) *tcConn {
	tb.Helper()
	conn, err := dialTC(int(ns))
	if err != nil {
		tb.Fatalf("failed to open tc connection: %v", err)
	}
	tb.Cleanup(func() { conn.Close() })
	return conn
}

// testNetlink opens a netlink handle in ns, closed when tb ends.
func testNetlink(tb testing.TB, ns netns.NsHandle) *netlink.Handle {
	tb.Helper()
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		tb.Fatalf("failed to open netlink handle: %v", err)
	}
	tb.Cleanup(h.Close)
	return h
}

// testIfindex returns the index of dev, read through h.
func testIfindex(tb testing.TB, h *netlink.Handle, dev string) uint32 {
	tb.Helper()
	link, err := h.LinkByName(dev)
	if err != nil {
		tb.Fatalf("failed to find %s: %v", dev, err)
	}
	return uint32(link.Attrs().Index)
}

// eventually polls cond every 10 ms until it holds or 5 s have passed.
func eventually(cond func() bool) bool {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		if cond() {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return cond()
}
