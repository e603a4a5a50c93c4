//go:build linux

package actuator_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"regexp"
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
func wanNS(t testing.TB) (string, netns.NsHandle) {
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

func ipCmd(t testing.TB, args ...string) string {
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

// snapshot is what the kernel holds in the namespace: links with their
// aliases, qdiscs, and wan0's ingress filters.
func snapshot(t *testing.T, ns string) string {
	t.Helper()
	links, _ := exec.Command("ip", "-n", ns, "-o", "link").CombinedOutput()
	// The link counters move with any stray packet, and the carrier flags
	// settle a while after a link comes up; names, the other flags and
	// aliases do not.
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimSpace(string(links)), "\n") {
		f := strings.Fields(l)
		if len(f) > 2 {
			b.WriteString(f[1] + " " + withoutCarrier(f[2]))
		}
		if i := strings.Index(l, "alias "); i >= 0 {
			b.WriteString(" " + strings.Fields(l[i:])[1])
		}
		b.WriteString("\n")
	}
	filters, _ := exec.Command("tc", "-n", ns, "filter", "show", "dev", "wan0", "ingress").CombinedOutput()
	return b.String() + tcCmd(t, ns, "qdisc", "show") + string(filters)
}

// withoutCarrier drops the carrier's flags from a link's "<...>" flags.
func withoutCarrier(flags string) string {
	var keep []string
	for _, f := range strings.Split(strings.Trim(flags, "<>"), ",") {
		switch f {
		case "NO-CARRIER", "LOWER_UP", "M-DOWN":
		default:
			keep = append(keep, f)
		}
	}
	return "<" + strings.Join(keep, ",") + ">"
}

// backends are the backends this kernel has; with AUTOSHAPE_REAL_KERNEL=1
// it must have both.
func backends(t *testing.T) []actuator.Backend {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces, links and qdiscs")
	}
	ok, err := kerneltest.HasQdisc("cake")
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		if kerneltest.RealKernel() {
			t.Fatalf("the kernel has no cake qdisc, and %s=1 says it must", kerneltest.EnvRealKernel)
		}
		t.Log("this kernel has no cake qdisc: HTB only")
		return []actuator.Backend{actuator.HTB}
	}
	return []actuator.Backend{actuator.HTB, actuator.CAKE}
}

// sqmLike sets up shaping as sqm-scripts does, with the backend's qdisc:
// roots on wan0 and on an IFB ifb4wan0 (no alias), and wan0's ingress
// redirected to the IFB at preference 10.
func sqmLike(t *testing.T, ns string, b actuator.Backend) {
	t.Helper()
	ipCmd(t, "-n", ns, "link", "add", "ifb4wan0", "type", "ifb")
	ipCmd(t, "-n", ns, "link", "set", "ifb4wan0", "up")
	for _, dev := range []string{"wan0", "ifb4wan0"} {
		if b == actuator.CAKE {
			// No handle: the kernel picks 8001: and up.
			args := []string{"qdisc", "add", "dev", dev, "root", "cake", "bandwidth", "5mbit", "overhead", "18", "diffserv4"}
			if dev == "ifb4wan0" {
				args = append(args, "ingress")
			}
			tcCmd(t, ns, args...)
			continue
		}
		tcCmd(t, ns, "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "1")
		tcCmd(t, ns, "class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb", "rate", "5mbit", "overhead", "18")
	}
	tcCmd(t, ns, "qdisc", "add", "dev", "wan0", "handle", "ffff:", "ingress")
	tcCmd(t, ns, "filter", "add", "dev", "wan0", "parent", "ffff:", "protocol", "all", "prio", "10", "u32",
		"match", "u32", "0", "0", "flowid", "1:1", "action", "mirred", "egress", "redirect", "dev", "ifb4wan0")
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
	if got := tcCmd(t, ns, "class", "show", "dev", "wan0"); !strings.Contains(got, "class htb a5:1 root") || !strings.Contains(got, "rate 20Mbit") {
		t.Errorf("upload class = %q, want a5:1 at rate 20Mbit", got)
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
	if got := ipCmd(t, "-n", ns, "link", "show", "ifb4wan0"); !strings.Contains(got, "alias autoshape") {
		t.Errorf("IFB = %q, want the alias autoshape", got)
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

func TestSetupCakeAndRemove(t *testing.T) {
	ns, h := wanNS(t)
	kerneltest.RequireQdisc(t, "cake")
	before := snapshot(t, ns)

	l, err := actuator.Setup(actuator.SetupConfig{
		Iface: "wan0", Backend: actuator.CAKE, Up: 20e6, Down: 30e6,
		Framing: actuator.Framing{Overhead: 44, LinkLayer: actuator.ATM},
		Cake:    actuator.CakeOptions{DiffServ: "diffserv4"}, NetNS: int(h),
	})
	if err != nil {
		t.Fatalf("Setup() failed: %v", err)
	}
	up := tcCmd(t, ns, "qdisc", "show", "dev", "wan0")
	for _, want := range []string{"qdisc cake a5: root", "bandwidth 20Mbit diffserv4", "atm overhead 44", "qdisc ingress ffff:"} {
		if !strings.Contains(up, want) {
			t.Errorf("wan0's qdiscs = %q, want %q", up, want)
		}
	}
	down := tcCmd(t, ns, "qdisc", "show", "dev", "ifb4wan0")
	// The download gets autorate-ingress, so that CAKE's estimate is live
	// until autoshape writes a rate; CAKE then sets the rate itself from
	// whatever arrives (a stray neighbour solicitation will do), so it is
	// 30 Mbit/s only until then.
	autoRate := regexp.MustCompile(`bandwidth \S+ autorate-ingress `)
	for _, want := range []string{"qdisc cake a5: root", " autorate-ingress diffserv4", " ingress ", "atm overhead 44"} {
		if !strings.Contains(down, want) {
			t.Errorf("ifb4wan0's qdiscs = %q, want %q", down, want)
		}
	}
	if got := ipCmd(t, "-n", ns, "link", "show", "ifb4wan0"); !strings.Contains(got, "alias autoshape") {
		t.Errorf("IFB = %q, want the alias autoshape", got)
	}

	ctx := context.Background()
	ch, err := l.Down().SetRate(ctx, 25e6)
	if err != nil {
		t.Fatalf("SetRate(25e6) failed: %v", err)
	}
	if !ch.Wrote || ch.From == 0 || ch.To != 25e6 || ch.Iface != "ifb4wan0" || ch.Kind != "cake" {
		t.Errorf("SetRate(25e6) = %+v, want a write to 25e6 on ifb4wan0 (cake)", ch)
	}
	after := tcCmd(t, ns, "qdisc", "show", "dev", "ifb4wan0")
	// The rate changed and, taken over, autorate-ingress is off; nothing
	// else changed.
	if want := autoRate.ReplaceAllString(down, "bandwidth 25Mbit "); after != want {
		t.Errorf("ifb4wan0's qdiscs after SetRate = %q, want %q (the rate alone changed, and autorate-ingress went off)", after, want)
	}
	if ch, err := l.Down().SetRate(ctx, 25e6); err != nil || ch.Wrote {
		t.Errorf("SetRate(25e6) again = %+v, %v: want no write", ch, err)
	}
	st, err := l.Up().Stats(ctx)
	if err != nil {
		t.Fatalf("Up().Stats() failed: %v", err)
	}
	if len(st.Tins) != 4 || st.CapacityEstimate != 20e6 {
		t.Errorf("Up().Stats() = %+v, want 4 tins and a capacity estimate of 20e6", st)
	}

	if err := l.Remove(); err != nil {
		t.Fatalf("Remove() failed: %v", err)
	}
	if after := snapshot(t, ns); after != before {
		t.Errorf("Remove() left the namespace changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// TestSetupRollsBack makes Setup fail after it has created the upload
// shaping and the IFB (a clsact qdisc holds wan0's ingress): all of it must
// go again, and the clsact stay.
func TestSetupRollsBack(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(string(b), func(t *testing.T) {
			ns, h := wanNS(t)
			tcCmd(t, ns, "qdisc", "add", "dev", "wan0", "clsact")
			before := snapshot(t, ns)
			_, err := actuator.Setup(actuator.SetupConfig{Iface: "wan0", Backend: b, Up: 20e6, Down: 30e6, NetNS: int(h)})
			if err == nil || !strings.Contains(err.Error(), "clsact") {
				t.Errorf("Setup() error = %v, want one naming the clsact qdisc", err)
			}
			if after := snapshot(t, ns); after != before {
				t.Errorf("a failed Setup() left the namespace changed:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
}

// TestSetupCakeNotSupported: on a kernel without CAKE the upload side fails
// first; Setup suggests HTB and leaves nothing. It needs such a kernel: a
// run with AUTOSHAPE_REAL_KERNEL=1 leaves it out by name.
func TestSetupCakeNotSupported(t *testing.T) {
	ns, h := wanNS(t)
	kerneltest.RequireNoQdisc(t, "cake")
	before := snapshot(t, ns)
	_, err := actuator.Setup(actuator.SetupConfig{Iface: "wan0", Backend: actuator.CAKE, Up: 20e6, Down: 30e6, NetNS: int(h)})
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

// TestSetupRefusesForeignRoot: a root qdisc autoshape did not create, on
// the interface or on the IFB, makes Setup fail naming it, and nothing
// changes.
func TestSetupRefusesForeignRoot(t *testing.T) {
	for _, b := range backends(t) {
		for _, where := range []string{"wan0", "ifb4wan0"} {
			t.Run(string(b)+" on "+where, func(t *testing.T) {
				ns, h := wanNS(t)
				sqmLike(t, ns, b)
				if where == "ifb4wan0" {
					tcCmd(t, ns, "qdisc", "del", "dev", "wan0", "root")
				}
				before := snapshot(t, ns)
				for _, backend := range []actuator.Backend{actuator.HTB, b} {
					_, err := actuator.Setup(actuator.SetupConfig{Iface: "wan0", Backend: backend, Up: 20e6, Down: 30e6, NetNS: int(h)})
					var foreign *actuator.ForeignQdiscError
					if !errors.As(err, &foreign) || !errors.Is(err, actuator.ErrForeignQdisc) {
						t.Fatalf("Setup(%s) error = %v, want a ForeignQdiscError", backend, err)
					}
					if foreign.Iface != where || foreign.Kind != string(b) {
						t.Errorf("Setup(%s) error = %v, want it to name %s's %s root", backend, err, where, b)
					}
					if !strings.Contains(err.Error(), `"`+where+`"`) || !strings.Contains(err.Error(), string(b)+" qdisc") {
						t.Errorf("Setup(%s) error = %q, want it to name %s and its %s qdisc", backend, err, where, b)
					}
				}
				if after := snapshot(t, ns); after != before {
					t.Errorf("a refused Setup() changed the namespace:\nbefore:\n%s\nafter:\n%s", before, after)
				}
			})
		}
	}
}

// TestSetupReplace replaces sqm-like shaping when asked to, and removes
// only its own again: the roots become the kernel's default, while the
// IFB and the ingress redirect, which are sqm-scripts', stay.
func TestSetupReplace(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(string(b), func(t *testing.T) {
			ns, h := wanNS(t)
			sqmLike(t, ns, b)
			filters := tcCmd(t, ns, "filter", "show", "dev", "wan0", "ingress")
			l, err := actuator.Setup(actuator.SetupConfig{Iface: "wan0", Backend: b, Up: 20e6, Down: 30e6, NetNS: int(h), Replace: true})
			if err != nil {
				t.Fatalf("Setup() with Replace failed: %v", err)
			}
			for _, dev := range []string{"wan0", "ifb4wan0"} {
				if got := tcCmd(t, ns, "qdisc", "show", "dev", dev); !strings.Contains(got, "qdisc "+string(b)+" a5: root") {
					t.Errorf("%s's qdiscs = %q, want autoshape's %s root", dev, got, b)
				}
			}
			if got := tcCmd(t, ns, "filter", "show", "dev", "wan0", "ingress"); got != filters {
				t.Errorf("ingress filters = %q, want sqm-scripts' as they were, %q", got, filters)
			}
			if _, err := l.Up().SetRate(context.Background(), 10e6); err != nil {
				t.Errorf("SetRate() failed: %v", err)
			}
			if err := l.Remove(); err != nil {
				t.Fatalf("Remove() failed: %v", err)
			}
			for _, dev := range []string{"wan0", "ifb4wan0"} {
				if got := tcCmd(t, ns, "qdisc", "show", "dev", dev, "root"); !strings.Contains(got, " 0: root") {
					t.Errorf("%s's root after Remove = %q, want the kernel's default", dev, got)
				}
			}
			if got := tcCmd(t, ns, "filter", "show", "dev", "wan0", "ingress"); got != filters {
				t.Errorf("ingress filters after Remove = %q, want sqm-scripts' as they were, %q", got, filters)
			}
		})
	}
}

// TestSetupAfterCrash: what an earlier Setup left (a crash, or `autoshape
// shape`) carries autoshape's mark, and a new Setup replaces it without
// Replace, with either backend; Remove then leaves nothing.
func TestSetupAfterCrash(t *testing.T) {
	bs := backends(t)
	ns, h := wanNS(t)
	before := snapshot(t, ns)
	for i, first := range bs {
		l, err := actuator.Setup(actuator.SetupConfig{Iface: "wan0", Backend: first, Up: 2e6, Down: 3e6, NetNS: int(h)})
		if err != nil {
			t.Fatalf("Setup(%s) failed: %v", first, err)
		}
		l.Close() // the process ends without removing anything
		second := bs[(i+1)%len(bs)]
		l, err = actuator.Setup(actuator.SetupConfig{Iface: "wan0", Backend: second, Up: 4e6, Down: 5e6, NetNS: int(h)})
		if err != nil {
			t.Fatalf("Setup(%s) over %s's leftovers failed: %v", second, first, err)
		}
		if got := tcCmd(t, ns, "qdisc", "show", "dev", "ifb4wan0"); !strings.Contains(got, "qdisc "+string(second)+" a5: root") {
			t.Errorf("ifb4wan0's qdiscs = %q, want autoshape's %s root", got, second)
		}
		if got := tcCmd(t, ns, "filter", "show", "dev", "wan0", "ingress"); strings.Count(got, "Redirect to device ifb4wan0") != 1 {
			t.Errorf("ingress filters = %q, want one redirect", got)
		}
		if err := l.Remove(); err != nil {
			t.Fatalf("Remove() failed: %v", err)
		}
		if after := snapshot(t, ns); after != before {
			t.Errorf("Remove() left the namespace changed:\nbefore:\n%s\nafter:\n%s", before, after)
		}
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

// TestAttachCake attaches to sqm-like CAKE: SetRate changes the bandwidth
// and nothing else, Remove removes nothing, and a root that someone put in
// the place of the one attached to is left alone.
func TestAttachCake(t *testing.T) {
	ns, h := wanNS(t)
	kerneltest.RequireQdisc(t, "cake")
	sqmLike(t, ns, actuator.CAKE)
	before := snapshot(t, ns)

	l, err := actuator.Attach("wan0", "", int(h))
	if err != nil {
		t.Fatalf("Attach() failed: %v", err)
	}
	ctx := context.Background()
	for _, s := range []actuator.Shaper{l.Up(), l.Down()} {
		ch, err := s.SetRate(ctx, 8e6)
		if err != nil || !ch.Wrote || ch.From != 5e6 || ch.Kind != "cake" {
			t.Errorf("SetRate(8e6) = %+v, %v; want a write from 5e6 (cake)", ch, err)
		}
	}
	if got, want := snapshot(t, ns), strings.ReplaceAll(before, "bandwidth 5Mbit", "bandwidth 8Mbit"); got != want {
		t.Errorf("after SetRate the namespace holds (-want +got):\n%s\n%s", want, got)
	}
	if st, err := l.Down().Stats(ctx); err != nil || len(st.Tins) != 4 {
		t.Errorf("Down().Stats() = %+v, %v; want diffserv4's 4 tins", st, err)
	}
	for _, s := range []actuator.Shaper{l.Up(), l.Down()} {
		if _, err := s.SetRate(ctx, 5e6); err != nil {
			t.Fatalf("SetRate(5e6) failed: %v", err)
		}
	}
	if err := l.Remove(); err != nil {
		t.Fatalf("Remove() after Attach failed: %v", err)
	}
	if after := snapshot(t, ns); after != before {
		t.Errorf("Remove() after Attach changed the namespace:\nbefore:\n%s\nafter:\n%s", before, after)
	}

	// sqm-scripts restarts: a new root with another handle. The link
	// attached to the old one changes nothing; a new Attach finds it.
	l, err = actuator.Attach("wan0", "", int(h))
	if err != nil {
		t.Fatalf("Attach() failed: %v", err)
	}
	defer l.Close()
	tcCmd(t, ns, "qdisc", "replace", "dev", "wan0", "root", "handle", "7:", "cake", "bandwidth", "3mbit")
	if _, err := l.Up().SetRate(ctx, 9e6); !errors.Is(err, actuator.ErrNoQdisc) {
		t.Errorf("SetRate() on a replaced root: %v, want ErrNoQdisc", err)
	}
	if got := tcCmd(t, ns, "qdisc", "show", "dev", "wan0", "root"); !strings.Contains(got, "qdisc cake 7: root") || !strings.Contains(got, "bandwidth 3Mbit") {
		t.Errorf("wan0's root = %q, want the new cake 7: at 3Mbit, untouched", got)
	}
}

func TestAttachNothing(t *testing.T) {
	_, h := wanNS(t)
	if _, err := actuator.Attach("wan0", "", int(h)); !errors.Is(err, actuator.ErrNoQdisc) && !errors.Is(err, actuator.ErrLinkGone) {
		t.Errorf("Attach() on a bare interface = %v, want ErrNoQdisc or ErrLinkGone", err)
	}
}

func TestRemoveShaping(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(string(b), func(t *testing.T) {
			ns, h := wanNS(t)
			before := snapshot(t, ns)
			l, err := actuator.Setup(actuator.SetupConfig{Iface: "wan0", Backend: b, Up: 2e6, Down: 3e6, NetNS: int(h)})
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
		})
	}
}

// TestRemoveShapingLeavesForeign: shaping that autoshape did not create
// (sqm-scripts' roots, its ifb4wan0 and its ingress redirect) survives
// RemoveShaping.
func TestRemoveShapingLeavesForeign(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(string(b), func(t *testing.T) {
			ns, h := wanNS(t)
			sqmLike(t, ns, b)
			before := snapshot(t, ns)
			if err := actuator.RemoveShaping("wan0", "", int(h)); err != nil {
				t.Fatalf("RemoveShaping() failed: %v", err)
			}
			if after := snapshot(t, ns); after != before {
				t.Errorf("RemoveShaping() changed sqm-scripts' shaping:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
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

// TestSetRateAtTheHeldRateTakesOver: under autorate-ingress a write of the
// rate CAKE holds is still a write, since CAKE would move it by itself (the
// daemon leaving its shaper at base on exit met it in User-mode Linux).
func TestSetRateAtTheHeldRateTakesOver(t *testing.T) {
	ns, h := wanNS(t)
	kerneltest.RequireQdisc(t, "cake")
	l, err := actuator.Setup(actuator.SetupConfig{Iface: "wan0", Backend: actuator.CAKE, Up: 20e6, Down: 30e6, NetNS: int(h)})
	if err != nil {
		t.Fatalf("Setup() failed: %v", err)
	}
	t.Cleanup(func() { l.Remove() })
	ch, err := l.Down().SetRate(context.Background(), 30e6)
	if err != nil || !ch.Wrote {
		t.Errorf("SetRate(30e6) at the rate held under autorate-ingress = %+v, %v; want a write", ch, err)
	}
	if down := tcCmd(t, ns, "qdisc", "show", "dev", "ifb4wan0"); strings.Contains(down, "autorate-ingress") {
		t.Errorf("ifb4wan0's qdiscs after SetRate = %q, want autorate-ingress off", down)
	}
	if ch, err := l.Down().SetRate(context.Background(), 30e6); err != nil || ch.Wrote {
		t.Errorf("SetRate(30e6) again = %+v, %v; want no write", ch, err)
	}
}
