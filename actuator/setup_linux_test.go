//go:build linux

package actuator_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/autoshape/autoshape/actuator"
	"github.com/autoshape/autoshape/internal/kerneltest"
)

// wanNS creates a network namespace holding a veth "wan0" (its peer "lan0"
// in the same namespace, both up) and returns its name and a handle to it.
// Everything is removed when the test ends.
func wanNS(t *testing.T) (string, netns.NsHandle) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces, links and qdiscs")
	}
	b := make([]byte, 4)
	rand.Read(b)
	name := "as-setup-" + hex.EncodeToString(b)
	ipCmd(t, "netns", "add", name)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	ipCmd(t, "-n", name, "link", "add", "wan0", "type", "veth", "peer", "name", "lan0")
	ipCmd(t, "-n", name, "link", "set", "wan0", "up")
	ipCmd(t, "-n", name, "link", "set", "lan0", "up")
	h, err := netns.GetFromName(name)
	if err != nil {
		t.Fatalf("failed to open namespace %s: %v", name, err)
	}
	t.Cleanup(func() { h.Close() })
	return name, h
}

func ipCmd(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func tcCmd(t *testing.T, ns string, args ...string) string {
	t.Helper()
	out, err := exec.Command("tc", append([]string{"-n", ns}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("tc %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// snapshot is what the kernel holds in the namespace: links and qdiscs.
func snapshot(t *testing.T, ns string) string {
	t.Helper()
	links := exec.Command("ip", "-n", ns, "-br", "link")
	lo, _ := links.CombinedOutput()
	return string(lo) + tcCmd(t, ns, "qdisc", "show")
}

func TestSetupHTBAndRemove(t *testing.T) {
	ns, h := wanNS(t)
	before := snapshot(t, ns)

	l, err := actuator.Setup(actuator.SetupConfig{
		Iface: "wan0", Backend: actuator.HTB, Up: 20e6, Down: 30e6,
		Framing: actuator.Framing{Overhead: 44, LinkLayer: actuator.ATM}, NetNS: int(h),
	})
	if err != nil {
		t.Fatalf("Setup() failed: %v", err)
	}
	if got := tcCmd(t, ns, "class", "show", "dev", "wan0"); !strings.Contains(got, "rate 20Mbit") {
		t.Errorf("upload class = %q, want rate 20Mbit", got)
	}
	if got := tcCmd(t, ns, "-d", "class", "show", "dev", "wan0"); !strings.Contains(got, "linklayer atm") || !strings.Contains(got, "overhead 44") {
		t.Errorf("upload class = %q, want linklayer atm overhead 44", got)
	}
	if got := tcCmd(t, ns, "class", "show", "dev", "ifb4wan0"); !strings.Contains(got, "rate 30Mbit") {
		t.Errorf("download class = %q, want rate 30Mbit", got)
	}
	if got := tcCmd(t, ns, "filter", "show", "dev", "wan0", "ingress"); !strings.Contains(got, "ifb4wan0") {
		t.Errorf("ingress filters = %q, want a redirect to ifb4wan0", got)
	}

	ctx := context.Background()
	ch, err := l.Up().SetRate(ctx, 10e6)
	if err != nil {
		t.Fatalf("SetRate(10e6) failed: %v", err)
	}
	if !ch.Wrote || ch.From != 20e6 || ch.To != 10e6 || ch.Iface != "wan0" || ch.Kind != "htb" {
		t.Errorf("SetRate(10e6) = %+v, want a write from 20e6 to 10e6 on wan0 (htb)", ch)
	}
	if got := tcCmd(t, ns, "class", "show", "dev", "wan0"); !strings.Contains(got, "rate 10Mbit") {
		t.Errorf("upload class after SetRate = %q, want rate 10Mbit", got)
	}
	ch, err = l.Up().SetRate(ctx, 10e6)
	if err != nil || ch.Wrote {
		t.Errorf("SetRate(10e6) again = %+v, %v: want no write", ch, err)
	}
	if _, err := l.Down().Stats(ctx); err != nil {
		t.Errorf("Down().Stats() failed: %v", err)
	}

	if err := l.Remove(); err != nil {
		t.Fatalf("Remove() failed: %v", err)
	}
	if after := snapshot(t, ns); after != before {
		t.Errorf("Remove() left the namespace changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

func TestSetupRollsBack(t *testing.T) {
	ns, h := wanNS(t)
	before := snapshot(t, ns)
	// This kernel has no CAKE: the download side fails after the upload side
	// and the IFB were made; all of it must go again.
	_, err := actuator.Setup(actuator.SetupConfig{Iface: "wan0", Backend: actuator.CAKE, Up: 20e6, Down: 30e6, NetNS: int(h)})
	if err == nil {
		t.Skip("this kernel has CAKE; the rollback path needs a failing step")
	}
	if !errors.Is(err, actuator.ErrNotSupported) || !strings.Contains(err.Error(), "--backend htb") {
		t.Errorf("Setup() error = %v, want ErrNotSupported suggesting --backend htb", err)
	}
	if after := snapshot(t, ns); after != before {
		t.Errorf("a failed Setup() left the namespace changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

func TestSetupMissingInterface(t *testing.T) {
	ns, h := wanNS(t)
	before := snapshot(t, ns)
	_, err := actuator.Setup(actuator.SetupConfig{Iface: "nosuch0", Backend: actuator.HTB, Up: 20e6, Down: 30e6, NetNS: int(h)})
	if !errors.Is(err, actuator.ErrLinkGone) || !strings.Contains(err.Error(), "nosuch0") {
		t.Errorf("Setup() error = %v, want ErrLinkGone naming nosuch0", err)
	}
	if after := snapshot(t, ns); after != before {
		t.Errorf("a failed Setup() left the namespace changed")
	}
}

func TestAttachHTB(t *testing.T) {
	ns, h := wanNS(t)
	// What sqm-scripts' simple.qos would leave: HTB on the WAN and on its IFB.
	ipCmd(t, "-n", ns, "link", "add", "ifb4wan0", "type", "ifb")
	for _, dev := range []string{"wan0", "ifb4wan0"} {
		tcCmd(t, ns, "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "1")
		tcCmd(t, ns, "class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb", "rate", "5mbit", "overhead", "18")
	}
	before := snapshot(t, ns)

	l, err := actuator.Attach("wan0", "", int(h))
	if err != nil {
		t.Fatalf("Attach() failed: %v", err)
	}
	ctx := context.Background()
	if _, err := l.Down().SetRate(ctx, 8e6); err != nil {
		t.Fatalf("SetRate(8e6) failed: %v", err)
	}
	got := tcCmd(t, ns, "-d", "class", "show", "dev", "ifb4wan0")
	if !strings.Contains(got, "rate 8Mbit") || !strings.Contains(got, "overhead 18") {
		t.Errorf("download class = %q, want rate 8Mbit with overhead 18 kept", got)
	}
	if _, err := l.Down().SetRate(ctx, 5e6); err != nil {
		t.Fatalf("SetRate(5e6) failed: %v", err)
	}
	if err := l.Remove(); err != nil {
		t.Fatalf("Remove() after Attach failed: %v", err)
	}
	if after := snapshot(t, ns); after != before {
		t.Errorf("Remove() after Attach changed the namespace:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

func TestAttachNothing(t *testing.T) {
	_, h := wanNS(t)
	if _, err := actuator.Attach("wan0", "", int(h)); !errors.Is(err, actuator.ErrNoQdisc) && !errors.Is(err, actuator.ErrLinkGone) {
		t.Errorf("Attach() on a bare interface = %v, want ErrNoQdisc or ErrLinkGone", err)
	}
}

func TestRemoveShaping(t *testing.T) {
	ns, h := wanNS(t)
	before := snapshot(t, ns)
	l, err := actuator.Setup(actuator.SetupConfig{Iface: "wan0", Backend: actuator.HTB, Up: 2e6, Down: 3e6, NetNS: int(h)})
	if err != nil {
		t.Fatalf("Setup() failed: %v", err)
	}
	l.Close() // as `autoshape shape` does: the shaping stays
	if err := actuator.RemoveShaping("wan0", "", int(h)); err != nil {
		t.Fatalf("RemoveShaping() failed: %v", err)
	}
	if after := snapshot(t, ns); after != before {
		t.Errorf("RemoveShaping() left the namespace changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

func TestCounters(t *testing.T) {
	_, h := wanNS(t)
	if _, _, err := actuator.Counters("wan0", int(h)); err != nil {
		t.Errorf("Counters(wan0) failed: %v", err)
	}
	if _, _, err := actuator.Counters("nosuch0", int(h)); err == nil || !strings.Contains(err.Error(), "nosuch0") {
		t.Errorf("Counters(nosuch0) = %v, want an error naming it", err)
	}
}

// TestWithoutXFRM runs Setup, Attach and Counters on a kernel without
// xfrm_user (the UML runner's; OpenWrt images without IPsec), where a
// netlink handle opened for every family fails with "protocol not
// supported": the actuator must ask for NETLINK_ROUTE alone. Elsewhere it
// checks only that the calls work.
func TestWithoutXFRM(t *testing.T) {
	ns, h := wanNS(t)
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_XFRM)
	switch {
	case err == nil:
		unix.Close(fd)
		if kerneltest.RealKernel() {
			t.Fatalf("this kernel has NETLINK_XFRM (xfrm_user is loaded): with %s=1 the kernel must lack it, so that this case is tested", kerneltest.EnvRealKernel)
		}
		t.Log("this kernel has xfrm_user: the calls are checked, the case without it is not")
	case !errors.Is(err, unix.EPROTONOSUPPORT):
		t.Fatalf("opening a NETLINK_XFRM socket: %v, want success or EPROTONOSUPPORT", err)
	}

	l, err := actuator.Setup(actuator.SetupConfig{Iface: "wan0", Backend: actuator.HTB, Up: 2e6, Down: 3e6, NetNS: int(h)})
	if err != nil {
		t.Fatalf("Setup() failed: %v", err)
	}
	if _, _, err := actuator.Counters("wan0", int(h)); err != nil {
		t.Errorf("Counters() failed: %v", err)
	}
	a, err := actuator.Attach("wan0", "", int(h))
	if err != nil {
		t.Fatalf("Attach() failed: %v", err)
	}
	if _, err := a.Up().SetRate(context.Background(), 1e6); err != nil {
		t.Errorf("SetRate() on the attached link failed: %v", err)
	}
	if _, err := a.Down().Stats(context.Background()); err != nil {
		t.Errorf("Stats() on the attached link failed: %v", err)
	}
	if err := a.Remove(); err != nil {
		t.Errorf("Remove() after Attach failed: %v", err)
	}
	if got := tcCmd(t, ns, "class", "show", "dev", "wan0"); !strings.Contains(got, "rate 1Mbit") {
		t.Errorf("upload class = %q, want rate 1Mbit", got)
	}
	if err := l.Remove(); err != nil {
		t.Errorf("Remove() failed: %v", err)
	}
}
