//go:build linux

package actuator

// Tests that need root: each builds its own network namespace (helpers in
// nstest_linux_test.go) and skips unless run as root.

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/florianl/go-tc"
	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// newTestCake returns a CAKE backend working in ns, and the index of the
// namespace's lo.
func newTestCake(t *testing.T, ns netns.NsHandle, f Framing, o CakeOptions) (*cake, uint32) {
	t.Helper()
	c := newCake(testTC(t, ns), f, o)
	c.netns = int(ns)
	return c, testIfindex(t, testNetlink(t, ns), "lo")
}

// addTestBfifo makes a bfifo qdisc 1: the root of ifindex, through go-tc.
func addTestBfifo(t *testing.T, conn *tc.Tc, ifindex uint32) {
	t.Helper()
	err := conn.Qdisc().Add(&tc.Object{
		Msg:       tc.Msg{Family: unix.AF_UNSPEC, Ifindex: ifindex, Handle: 0x10000, Parent: tc.HandleRoot},
		Attribute: tc.Attribute{Kind: "bfifo", Bfifo: &tc.FifoOpt{Limit: 30000}},
	})
	if err != nil {
		t.Fatalf("failed to add bfifo root: %v", err)
	}
}

// TestCakeCreateNotSupported checks what a kernel without CAKE (the
// development and CI machines) answers: an error wrapping ErrNotSupported
// that suggests the HTB backend.
func TestCakeCreateNotSupported(t *testing.T) {
	_, ns := newTestNS(t)
	c, lo := newTestCake(t, ns, Framing{Overhead: 44, LinkLayer: ATM}, CakeOptions{})
	err := c.Create(lo, 20_000_000)
	if err == nil {
		t.Skip("skipping: this kernel has the cake qdisc (TestCakeOnKernel covers it)")
	}
	t.Log(err)
	if !errors.Is(err, ErrNotSupported) {
		t.Errorf("error %q does not wrap ErrNotSupported", err)
	}
	if !errors.Is(err, unix.ENOENT) {
		t.Errorf("error %q does not wrap the kernel's ENOENT", err)
	}
	if !strings.Contains(err.Error(), "--backend htb") {
		t.Errorf("error %q does not suggest --backend htb", err)
	}
	if _, err := c.Rate(lo); !errors.Is(err, ErrNoQdisc) {
		t.Errorf("after a failed create, Rate: %v, want ErrNoQdisc", err)
	}
}

// TestCakeWithoutCakeRoot checks every operation on an interface whose root
// is not cake: the default root, then a bfifo someone else made, which must
// survive.
func TestCakeWithoutCakeRoot(t *testing.T) {
	_, ns := newTestNS(t)
	c, lo := newTestCake(t, ns, Framing{}, CakeOptions{})

	check := func(t *testing.T, root string) {
		if _, err := c.Rate(lo); !errors.Is(err, ErrNoQdisc) || !strings.Contains(err.Error(), root) {
			t.Errorf("Rate: %v, want ErrNoQdisc naming %s", err, root)
		}
		err := c.SetRate(lo, 10_000_000)
		t.Logf("SetRate: %v", err)
		if !errors.Is(err, ErrNoQdisc) {
			t.Errorf("SetRate: %v, want ErrNoQdisc", err)
		}
		if _, err := c.Stats(lo); !errors.Is(err, ErrNoQdisc) {
			t.Errorf("Stats: %v, want ErrNoQdisc", err)
		}
		if _, err := readCakeStatsIn(int(ns), lo); !errors.Is(err, ErrNoQdisc) || !strings.Contains(err.Error(), root) {
			t.Errorf("readCakeStatsIn: %v, want ErrNoQdisc naming %s", err, root)
		}
		// readCakeStats reads in the calling thread's namespace.
		err = inNS(ns, func() error {
			_, err := readCakeStats(lo)
			return err
		})
		if !errors.Is(err, ErrNoQdisc) || !strings.Contains(err.Error(), root) {
			t.Errorf("readCakeStats in the namespace: %v, want ErrNoQdisc naming %s", err, root)
		}
	}

	t.Run("default root", func(t *testing.T) {
		check(t, "noqueue")
		if err := c.Remove(lo); err != nil {
			t.Errorf("Remove with the default root: %v, want nil", err)
		}
	})

	t.Run("bfifo root", func(t *testing.T) {
		addTestBfifo(t, c.conn, lo)
		check(t, "bfifo")
		if err := c.Remove(lo); !errors.Is(err, ErrNoQdisc) {
			t.Errorf("Remove with a bfifo root: %v, want ErrNoQdisc", err)
		}
		qs, err := dumpQdiscs(int(ns))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(qs, func(q qdiscMessage) bool {
			return q.Ifindex == lo && q.Parent == tc.HandleRoot && q.Kind == "bfifo"
		}) {
			t.Errorf("the bfifo root is gone: %+v", qs)
		}
	})
}

// TestDumpQdiscsMatchesGoTC checks the project's own qdisc dump against
// go-tc's on what this kernel really sends.
func TestDumpQdiscsMatchesGoTC(t *testing.T) {
	name, ns := newTestNS(t)
	runCmd(t, "ip", "-n", name, "link", "add", "ifb0", "type", "ifb")
	c, lo := newTestCake(t, ns, Framing{}, CakeOptions{})
	addTestBfifo(t, c.conn, lo)

	type qdisc struct {
		Ifindex, Handle, Parent uint32
		Kind                    string
	}
	objs, err := c.conn.Qdisc().Get()
	if err != nil {
		t.Fatal(err)
	}
	var want []qdisc
	for _, o := range objs {
		want = append(want, qdisc{o.Ifindex, o.Handle, o.Parent, o.Kind})
	}
	qs, err := dumpQdiscs(int(ns))
	if err != nil {
		t.Fatal(err)
	}
	var got []qdisc
	for _, q := range qs {
		got = append(got, qdisc{q.Ifindex, q.Handle, q.Parent, q.Kind})
		if q.App != nil {
			t.Errorf("%s qdisc on ifindex %d has TCA_STATS_APP % x", q.Kind, q.Ifindex, q.App)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("qdiscs (-go-tc +ours):\n%s", diff)
	}
	if !slices.Contains(got, qdisc{lo, 0x10000, tc.HandleRoot, "bfifo"}) {
		t.Errorf("lo's bfifo root 1: not in %+v", got)
	}
}

// TestCakeOnKernel runs the whole backend on a kernel that has CAKE (a
// router, not the development machines, where it skips).
func TestCakeOnKernel(t *testing.T) {
	_, ns := newTestNS(t)
	yes := true
	c, lo := newTestCake(t, ns, Framing{Overhead: 44, LinkLayer: ATM}, CakeOptions{DiffServ: "diffserv4", NAT: &yes})
	if err := c.Create(lo, 20_000_000); errors.Is(err, ErrNotSupported) {
		t.Skip("skipping: this kernel has no cake qdisc")
	} else if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(lo, 20_000_000); err == nil {
		t.Error("a second Create succeeded, want an error")
	}
	if got, err := c.Rate(lo); err != nil || got != 20_000_000 {
		t.Errorf("Rate = %d, %v, want 20000000", got, err)
	}
	before, err := c.root(lo)
	if err != nil {
		t.Fatal(err)
	}

	if err := c.SetRate(lo, 10_000_000); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Rate(lo); err != nil || got != 10_000_000 {
		t.Errorf("Rate after SetRate = %d, %v, want 10000000", got, err)
	}
	after, err := c.root(lo)
	if err != nil {
		t.Fatal(err)
	}
	// Every option but the rate is as it was.
	before.Cake.BaseRate, after.Cake.BaseRate = nil, nil
	if diff := cmp.Diff(before.Cake, after.Cake); diff != "" {
		t.Errorf("SetRate changed other options (-before +after):\n%s", diff)
	}

	s, err := c.Stats(lo)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Tins) != 4 {
		t.Errorf("diffserv4 has %d tins: %+v", len(s.Tins), s)
	}

	if err := c.Remove(lo); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Rate(lo); !errors.Is(err, ErrNoQdisc) {
		t.Errorf("Rate after Remove: %v, want ErrNoQdisc", err)
	}
}
