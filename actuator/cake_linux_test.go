//go:build linux

package actuator

// Tests that need root: each builds its own network namespace (helpers in
// nstest_linux_test.go) and skips unless run as root.

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/florianl/go-tc"
	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netns"
	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"

	"github.com/autoshape/autoshape/internal/kerneltest"
)

// newTestCake returns a CAKE backend working in ns, and the index of the
// namespace's lo.
func newTestCake(t *testing.T, ns netns.NsHandle, f Framing, o CakeOptions) (*cake, uint32) {
	t.Helper()
	c := newCake(testTC(t, ns), f, o)
	return c, testIfindex(t, testNetlink(t, ns), "lo")
}

// addTestBfifo makes a bfifo qdisc 1: the root of ifindex, through go-tc.
func addTestBfifo(t *testing.T, conn *tcConn, ifindex uint32) {
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
// development machines) answers: an error wrapping ErrNotSupported that
// suggests the HTB backend. It needs a kernel without CAKE: a run with
// AUTOSHAPE_REAL_KERNEL=1 leaves it out by name.
func TestCakeCreateNotSupported(t *testing.T) {
	_, ns := newTestNS(t)
	c, lo := newTestCake(t, ns, Framing{Overhead: 44, LinkLayer: ATM}, CakeOptions{})
	err := c.Create(lo, 20_000_000, false)
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
// is not autoshape's cake: the default root, a bfifo someone else made, and
// someone else's cake (as sqm-scripts makes it). Nothing may change them:
// on a kernel with CAKE, a rate change sent without the root's handle
// replaces a root of another kind with a new cake qdisc.
func TestCakeWithoutCakeRoot(t *testing.T) {
	name, ns := newTestNS(t)
	c, lo := newTestCake(t, ns, Framing{}, CakeOptions{})

	check := func(t *testing.T, root string) {
		if _, err := c.Rate(lo); !errors.Is(err, ErrNoQdisc) || !strings.Contains(err.Error(), root) {
			t.Errorf("Rate: %v, want ErrNoQdisc naming %s", err, root)
		}
		_, _, err := c.SetRate(lo, 10_000_000)
		t.Logf("SetRate: %v", err)
		if !errors.Is(err, ErrNoQdisc) {
			t.Errorf("SetRate: %v, want ErrNoQdisc", err)
		}
		if _, err := c.Stats(lo); !errors.Is(err, ErrNoQdisc) {
			t.Errorf("Stats: %v, want ErrNoQdisc", err)
		}
		if root == "cake" {
			return // readCakeStats reads any root cake qdisc
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

	// stays checks that lo's root is still the qdisc of the kind and
	// handle, with the given options as tc prints them.
	stays := func(t *testing.T, kind string, handle uint32, options string) {
		t.Helper()
		qs, err := dumpQdiscs(int(ns))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(qs, func(q qdiscMessage) bool {
			return q.Ifindex == lo && q.Parent == tc.HandleRoot && q.Kind == kind && q.Handle == handle
		}) {
			t.Errorf("the %s root %s is gone: %+v", kind, handleString(handle), qs)
		}
		mustContain(t, "tc qdisc show", runCmd(t, "tc", "-n", name, "qdisc", "show", "dev", "lo"), options)
	}

	t.Run("bfifo root", func(t *testing.T) {
		addTestBfifo(t, c.conn, lo)
		check(t, "bfifo")
		if err := c.Remove(lo); !errors.Is(err, ErrNoQdisc) {
			t.Errorf("Remove with a bfifo root: %v, want ErrNoQdisc", err)
		}
		stays(t, "bfifo", 0x10000, "qdisc bfifo 1: root refcnt 2 limit 30000b")
		runCmd(t, "tc", "-n", name, "qdisc", "del", "dev", "lo", "root")
	})

	t.Run("foreign cake root", func(t *testing.T) {
		kerneltest.RequireQdisc(t, "cake")
		// As sqm-scripts makes it: no handle, so the kernel picks one.
		runCmd(t, "tc", "-n", name, "qdisc", "add", "dev", "lo", "root", "cake", "bandwidth", "5mbit")
		var handle uint32
		qs, err := dumpQdiscs(int(ns))
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range qs {
			if q.Ifindex == lo && q.Parent == tc.HandleRoot {
				handle = q.Handle
			}
		}
		check(t, "cake")
		if err := c.Remove(lo); !errors.Is(err, ErrNoQdisc) {
			t.Errorf("Remove with a foreign cake root: %v, want ErrNoQdisc", err)
		}
		stays(t, "cake", handle, "bandwidth 5Mbit")
		runCmd(t, "tc", "-n", name, "qdisc", "del", "dev", "lo", "root")
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
// router, or the UML runner; the development machines skip it).
func TestCakeOnKernel(t *testing.T) {
	name, ns := newTestNS(t)
	kerneltest.RequireQdisc(t, "cake")
	yes := true
	c, lo := newTestCake(t, ns, Framing{Overhead: 44, LinkLayer: ATM}, CakeOptions{DiffServ: "diffserv4", NAT: &yes})
	if err := c.Create(lo, 20_000_000, false); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(lo, 20_000_000, false); err == nil {
		t.Error("a second Create succeeded, want an error")
	}
	mustContain(t, "tc qdisc show", runCmd(t, "tc", "-n", name, "qdisc", "show", "dev", "lo"),
		"qdisc cake a5: root", "bandwidth 20Mbit diffserv4", " nat ", "atm overhead 44")
	if got, err := c.Rate(lo); err != nil || got != 20_000_000 {
		t.Errorf("Rate = %d, %v, want 20000000", got, err)
	}
	before, err := c.root(lo)
	if err != nil {
		t.Fatal(err)
	}

	if _, _, err := c.SetRate(lo, 10_000_000); err != nil {
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

// tcCakeJSON is what `tc -s -j qdisc show` prints for a cake qdisc; the
// rates are in bytes/s.
type tcCakeJSON struct {
	Kind             string `json:"kind"`
	Handle           string `json:"handle"`
	Bytes            uint64 `json:"bytes"`
	Packets          uint64 `json:"packets"`
	Drops            uint64 `json:"drops"`
	Backlog          uint64 `json:"backlog"`
	MemoryUsed       uint32 `json:"memory_used"`
	MemoryLimit      uint32 `json:"memory_limit"`
	CapacityEstimate uint64 `json:"capacity_estimate"`
	Options          struct {
		Bandwidth uint64 `json:"bandwidth"` // bytes/s
	} `json:"options"`
	MinNetworkSize uint32 `json:"min_network_size"`
	MaxNetworkSize uint32 `json:"max_network_size"`
	MinAdjSize     uint32 `json:"min_adj_size"`
	MaxAdjSize     uint32 `json:"max_adj_size"`
	AvgHdrOffset   uint32 `json:"avg_hdr_offset"`
	Tins           []struct {
		ThresholdRate     uint64 `json:"threshold_rate"`
		SentBytes         uint64 `json:"sent_bytes"`
		BacklogBytes      uint64 `json:"backlog_bytes"`
		TargetUS          uint32 `json:"target_us"`
		IntervalUS        uint32 `json:"interval_us"`
		PeakDelayUS       uint32 `json:"peak_delay_us"`
		AvgDelayUS        uint32 `json:"avg_delay_us"`
		BaseDelayUS       uint32 `json:"base_delay_us"`
		SentPackets       uint64 `json:"sent_packets"`
		Drops             uint64 `json:"drops"`
		ECNMark           uint64 `json:"ecn_mark"`
		AckDrops          uint64 `json:"ack_drops"`
		SparseFlows       uint32 `json:"sparse_flows"`
		BulkFlows         uint32 `json:"bulk_flows"`
		UnresponsiveFlows uint32 `json:"unresponsive_flows"`
	} `json:"tins"`
}

// cakeStatsFromTC converts tc's JSON into what the decoder returns.
func cakeStatsFromTC(j tcCakeJSON) (Stats, CakeStats) {
	cs := CakeStats{
		CapacityEstimate: j.CapacityEstimate * 8,
		MemoryLimit:      j.MemoryLimit, MemoryUsed: j.MemoryUsed, AvgNetoff: j.AvgHdrOffset,
		MinNetlen: j.MinNetworkSize, MaxNetlen: j.MaxNetworkSize, MinAdjlen: j.MinAdjSize, MaxAdjlen: j.MaxAdjSize,
	}
	for _, t := range j.Tins {
		cs.Tins = append(cs.Tins, TinStats{
			SentPackets: t.SentPackets, SentBytes: t.SentBytes, DroppedPackets: t.Drops,
			ECNMarkedPackets: t.ECNMark, AckDropsPackets: t.AckDrops, BacklogBytes: t.BacklogBytes,
			ThresholdRate: t.ThresholdRate * 8,
			Target:        cakeMicros(t.TargetUS), Interval: cakeMicros(t.IntervalUS),
			PeakDelay: cakeMicros(t.PeakDelayUS), AvgDelay: cakeMicros(t.AvgDelayUS), BaseDelay: cakeMicros(t.BaseDelayUS),
			SparseFlows: t.SparseFlows, BulkFlows: t.BulkFlows, UnresponsiveFlows: t.UnresponsiveFlows,
		})
	}
	st := Stats{Bytes: j.Bytes, Packets: j.Packets, Drops: j.Drops, Backlog: j.Backlog,
		CapacityEstimate: cs.CapacityEstimate, Rate: j.Options.Bandwidth * 8, Tins: cs.Tins}
	return st, cs
}

// sendUDPTOS sends n datagrams of size bytes of payload from a socket in ns
// to dst with the IP TOS byte tos, as fast as the socket takes them.
func sendUDPTOS(t *testing.T, ns netns.NsHandle, dst string, tos, n, size int) {
	t.Helper()
	err := inNS(ns, func() error {
		conn, err := net.ListenPacket("udp4", ":0")
		if err != nil {
			return err
		}
		defer conn.Close()
		if err := ipv4.NewPacketConn(conn).SetTOS(tos); err != nil {
			return err
		}
		addr, err := net.ResolveUDPAddr("udp4", dst)
		if err != nil {
			return err
		}
		payload := make([]byte, size)
		for i := range n {
			if _, err := conn.WriteTo(payload, addr); err != nil {
				return fmt.Errorf("datagram %d: %w", i, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("failed to send UDP to %s: %v", dst, err)
	}
}

// TestCakeStatsMatchTC sends traffic through CAKE on a veth into another
// namespace, in three tins (one flow ECN-capable) and faster than the rate,
// and compares the statistics the actuator decodes from the kernel with
// what iproute2's `tc -s -j qdisc show` prints, field by field.
func TestCakeStatsMatchTC(t *testing.T) {
	l := newHTBLink(t)
	kerneltest.RequireQdisc(t, "cake")
	c := newCake(testTC(t, l.ns), Framing{Overhead: 18}, CakeOptions{})
	if err := c.Create(l.ifindex, 10_000_000, false); err != nil {
		t.Fatalf("Create: %v", err)
	}
	dst := l.peer.IP() + ":9"
	l.resolve(t, dst) // so that the bursts meet CAKE at once
	for _, tos := range []int{
		0x02, // best effort, ECT(0): CAKE marks instead of dropping
		0x20, // CS1: the bulk tin
		0xb8, // EF: the voice tin
	} {
		sendUDPTOS(t, l.ns, dst, tos, 300, 1400)
	}
	var st Stats
	var err error
	if !eventually(func() bool {
		st, err = c.Stats(l.ifindex)
		return err == nil && st.Backlog == 0 && st.Packets > 0
	}) {
		t.Fatalf("Stats = %+v, %v; want packets sent and the queue drained", st, err)
	}

	read := func() (Stats, CakeStats) {
		st, err := c.Stats(l.ifindex)
		if err != nil {
			t.Fatalf("Stats: %v", err)
		}
		cs, err := readCakeStatsIn(int(l.ns), l.ifindex)
		if err != nil {
			t.Fatalf("readCakeStatsIn: %v", err)
		}
		return st, cs
	}
	// A stray packet between the reads would make them differ: read ours
	// on both sides of tc's and compare only a quiet moment.
	for attempt := 0; ; attempt++ {
		st, cs := read()
		var js []tcCakeJSON
		out := runCmd(t, "tc", "-n", l.router.NS, "-s", "-j", "qdisc", "show", "dev", l.router.Dev, "root")
		if err := json.Unmarshal([]byte(out), &js); err != nil || len(js) != 1 || js[0].Kind != "cake" || js[0].Handle != "a5:" {
			t.Fatalf("tc -s -j qdisc show: %v: %s", err, out)
		}
		st2, cs2 := read()
		if diff := cmp.Diff(st, st2) + cmp.Diff(cs, cs2); diff != "" {
			if attempt == 5 {
				t.Fatalf("the statistics never stood still between two reads:\n%s", diff)
			}
			continue
		}
		wantStats, wantCake := cakeStatsFromTC(js[0])
		st.WireBytes = 0
		if diff := cmp.Diff(wantStats, st); diff != "" {
			t.Errorf("Stats (-tc +decoded):\n%s", diff)
		}
		if diff := cmp.Diff(wantCake, cs); diff != "" {
			t.Errorf("CakeStats (-tc +decoded):\n%s", diff)
		}
		t.Logf("tc: %s", out)

		// The comparison means something only where the counters moved.
		busy := 0
		for _, tin := range cs.Tins {
			if tin.SentPackets > 0 {
				busy++
			}
		}
		var ecn, drops uint64
		for _, tin := range cs.Tins {
			ecn += tin.ECNMarkedPackets
			drops += tin.DroppedPackets
		}
		if len(cs.Tins) != 3 || busy != 3 || cs.CapacityEstimate != 10_000_000 || cs.MaxNetlen == 0 || cs.MaxAdjlen != cs.MaxNetlen+18 ||
			cs.MemoryUsed == 0 || ecn == 0 || drops == 0 || st.Drops != drops {
			t.Errorf("CAKE statistics %+v, %+v: want 3 busy tins, ECN marks and drops, a capacity estimate of 10 Mbit/s and sizes seen", st, cs)
		}
		return
	}
}

// TestCakeRateChangeTakesOverAutorate: under autorate-ingress CAKE sets its
// own rate at the end of every packet train, so a rate change must turn it
// off to hold (as tc's change does with AUTORATE 0). Before this rule a rate
// written alone was replaced by 15/16 of CAKE's estimate with the next
// traffic.
func TestCakeRateChangeTakesOverAutorate(t *testing.T) {
	l := newHTBLink(t)
	kerneltest.RequireQdisc(t, "cake")
	on := true
	c := newCake(testTC(t, l.ns), Framing{}, CakeOptions{AutorateIngress: &on})
	if err := c.Create(l.ifindex, 50_000_000, false); err != nil {
		t.Fatalf("Create: %v", err)
	}
	// A stray packet (IPv6 neighbour discovery) may already have moved the
	// estimate a little from the 50 Mbit/s it starts at.
	if st, err := c.Stats(l.ifindex); err != nil || !st.AutorateIngress || st.CapacityEstimate == 0 {
		t.Fatalf("Stats after Create = %+v, %v; want autorate-ingress on and an estimate", st, err)
	}
	if out := runCmd(t, "tc", "-n", l.router.NS, "qdisc", "show", "dev", l.router.Dev); !strings.Contains(out, "autorate-ingress") {
		t.Fatalf("the kernel holds no autorate-ingress:\n%s", out)
	}

	if _, _, err := c.SetRate(l.ifindex, 10_000_000); err != nil {
		t.Fatal(err)
	}
	dst := l.peer.IP() + ":9"
	l.resolve(t, dst)
	for range 3 {
		sendUDP(t, l.ns, dst, 200, 1400, 0)
		time.Sleep(300 * time.Millisecond)
	}
	if got, err := c.Rate(l.ifindex); err != nil || got != 10_000_000 {
		t.Errorf("Rate after traffic = %d, %v; want the 10 Mbit/s written, not CAKE's own", got, err)
	}
	st, err := c.Stats(l.ifindex)
	if err != nil {
		t.Fatal(err)
	}
	if st.AutorateIngress {
		t.Errorf("Stats after SetRate: autorate-ingress still on")
	}
	if out := runCmd(t, "tc", "-n", l.router.NS, "qdisc", "show", "dev", l.router.Dev); strings.Contains(out, "autorate-ingress") {
		t.Errorf("the kernel still holds autorate-ingress after the rate change:\n%s", out)
	}
}

// TestCakeYieldHandsBack: a hand-back turns autorate-ingress on again from
// the rate given; CAKE then sets its own rate from the estimate it kept
// (the 50 Mbit/s it was made with, not the 10 written), Stats reports that
// rate, and the next rate change takes it over again. A root that is not
// autoshape's cake is left alone.
func TestCakeYieldHandsBack(t *testing.T) {
	l := newHTBLink(t)
	kerneltest.RequireQdisc(t, "cake")
	on := true
	c := newCake(testTC(t, l.ns), Framing{}, CakeOptions{AutorateIngress: &on})
	if err := c.yield(l.ifindex, 10_000_000); !errors.Is(err, ErrNoQdisc) {
		t.Errorf("yield with no cake root: %v, want ErrNoQdisc", err)
	}
	if err := c.Create(l.ifindex, 50_000_000, false); err != nil {
		t.Fatalf("Create: %v", err)
	}
	if _, _, err := c.SetRate(l.ifindex, 10_000_000); err != nil {
		t.Fatal(err)
	}
	if err := c.yield(l.ifindex, 10_000_000); err != nil {
		t.Fatalf("yield: %v", err)
	}
	st, err := c.Stats(l.ifindex)
	if err != nil || !st.AutorateIngress || st.Rate != 10_000_000 {
		t.Fatalf("Stats after yield = %+v, %v; want autorate-ingress on at 10 Mbit/s", st, err)
	}
	if out := runCmd(t, "tc", "-n", l.router.NS, "qdisc", "show", "dev", l.router.Dev); !strings.Contains(out, "autorate-ingress") {
		t.Fatalf("the kernel holds no autorate-ingress after yield:\n%s", out)
	}
	dst := l.peer.IP() + ":9"
	l.resolve(t, dst)
	for range 3 {
		sendUDP(t, l.ns, dst, 200, 1400, 0)
		time.Sleep(300 * time.Millisecond)
	}
	if st, err = c.Stats(l.ifindex); err != nil || !st.AutorateIngress || st.Rate == 10_000_000 || st.Rate == 0 {
		t.Errorf("Stats after traffic = rate %d, autorate %v, %v; want CAKE's own rate, not the 10 Mbit/s handed back", st.Rate, st.AutorateIngress, err)
	}
	if _, _, err := c.SetRate(l.ifindex, 8_000_000); err != nil {
		t.Fatal(err)
	}
	if st, err = c.Stats(l.ifindex); err != nil || st.AutorateIngress || st.Rate != 8_000_000 {
		t.Errorf("Stats after the take-over = rate %d, autorate %v, %v; want 8 Mbit/s, autorate off", st.Rate, st.AutorateIngress, err)
	}
}
