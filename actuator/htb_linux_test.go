//go:build linux

package actuator

import (
	"encoding/binary"
	"errors"
	"io/fs"
	"net"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/florianl/go-tc"
	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/autoshape/autoshape/internal/kerneltest"
)

// An htbLink is a veth pair between a router namespace, whose end (wan0)
// the HTB shapes, and a peer namespace.
type htbLink struct {
	router, peer testEnd
	ns           netns.NsHandle
	peerNS       netns.NsHandle
	ifindex      uint32
}

func newHTBLink(t testing.TB) htbLink {
	t.Helper()
	routerNS, ns := newTestNS(t)
	peerNS, pns := newTestNS(t)
	l := htbLink{
		router: testEnd{NS: routerNS, Dev: "wan0", Addr: "10.9.0.1/24"},
		peer:   testEnd{NS: peerNS, Dev: "isp0", Addr: "10.9.0.2/24"},
		ns:     ns, peerNS: pns,
	}
	newTestVeth(t, l.router, l.peer)
	l.ifindex = testIfindex(t, testNetlink(t, ns), l.router.Dev)
	return l
}

// resolve sends a datagram to each destination and waits, up to 2 s, until
// the router's end holds that many reachable neighbours: ARP and neighbour
// discovery then add no packets of their own to a test's counters, and no
// datagram waits in the neighbour table's queue (or falls out of it) while
// the test reads its qdisc. In User-mode Linux the answer may come only
// after the sender's time slice, later than a burst takes to send.
func (l htbLink) resolve(t *testing.T, dsts ...string) {
	t.Helper()
	for _, d := range dsts {
		sendUDP(t, l.ns, d, 1, 10, 0)
	}
	for end := time.Now().Add(2 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		out, _ := exec.Command("ip", "-n", l.router.NS, "neigh", "show", "dev", l.router.Dev).CombinedOutput()
		if strings.Count(string(out), "REACHABLE") >= len(dsts) {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("%d neighbours of %s not reachable after 2 s:\n%s", len(dsts), l.router.Dev, out)
		}
	}
}

// tcShow runs `tc -n NS [-d] KIND show dev wan0`.
func (l htbLink) tcShow(t *testing.T, details bool, kind string) string {
	t.Helper()
	args := []string{"-n", l.router.NS}
	if details {
		args = append(args, "-d")
	}
	return runCmd(t, "tc", append(args, kind, "show", "dev", l.router.Dev)...)
}

func mustContain(t *testing.T, what, text string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(text, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, text)
		}
	}
}

// createSplit builds the priority split on ifindex at bps, as Create does
// on a kernel without fq_codel, whatever this kernel has.
func createSplit(t testing.TB, h *htb, ifindex uint32, bps uint64) {
	t.Helper()
	if err := initClock(); err != nil {
		t.Fatal(err)
	}
	bytes, err := htbBytesPerSecond(bps, h.framing.LinkLayer)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.buildSplit(ifindex, bytes); err != nil {
		t.Fatalf("buildSplit: %v", err)
	}
}

// TestHTBCreatePicksLeaf checks the tree Create builds: fq_codel under
// class a5:1 where the kernel has it (with AUTOSHAPE_REAL_KERNEL=1 it must),
// the priority split where it has not.
func TestHTBCreatePicksLeaf(t *testing.T) {
	l := newHTBLink(t)
	fqCodel, err := kerneltest.HasQdisc("fq_codel")
	if err != nil {
		t.Fatal(err)
	}
	if !fqCodel && kerneltest.RealKernel() {
		t.Fatalf("the kernel has no fq_codel qdisc, and %s=1 says it must", kerneltest.EnvRealKernel)
	}
	h := newHTB(testTC(t, l.ns), Framing{})
	if err := h.Create(l.ifindex, 20_000_000, false); err != nil {
		t.Fatalf("Create: %v", err)
	}
	qdiscs := l.tcShow(t, false, "qdisc")
	if fqCodel {
		mustContain(t, "tc qdisc show", qdiscs, "qdisc htb a5: root", "default 0x1 ", "qdisc fq_codel 10: parent a5:1 limit 10240p", " ecn ")
		if strings.Contains(qdiscs, "bfifo") {
			t.Errorf("tc qdisc show has a bfifo beside fq_codel:\n%s", qdiscs)
		}
	} else {
		mustContain(t, "tc qdisc show", qdiscs, "qdisc htb a5: root", "default 0x12", "qdisc bfifo 11: parent a5:11", "qdisc bfifo 12: parent a5:12")
	}
	mustContain(t, "tc class show", l.tcShow(t, false, "class"), "class htb a5:1 root")
}

// TestHTBFqCodel runs the fq_codel tree through its life: Create, SetRate,
// Stats with traffic, Remove.
func TestHTBFqCodel(t *testing.T) {
	l := newHTBLink(t)
	kerneltest.RequireQdisc(t, "fq_codel")
	h := newHTB(testTC(t, l.ns), Framing{LinkLayer: ATM, Overhead: 44})
	if err := h.Create(l.ifindex, 20_000_000, false); err != nil {
		t.Fatalf("Create: %v", err)
	}
	mustContain(t, "tc qdisc show", l.tcShow(t, false, "qdisc"), "qdisc htb a5: root", "qdisc fq_codel 10: parent a5:1")
	mustContain(t, "tc -d class show", l.tcShow(t, true, "class"),
		"class htb a5:1 root leaf 10: prio 0", "rate 20Mbit overhead 44 ceil 20Mbit", "linklayer atm")
	if _, _, err := h.SetRate(l.ifindex, 8_000_000); err != nil {
		t.Fatalf("SetRate: %v", err)
	}
	mustContain(t, "tc -d class show", l.tcShow(t, true, "class"), "rate 8Mbit overhead 44 ceil 8Mbit", "linklayer atm")
	if got, err := h.Rate(l.ifindex); err != nil || got != 8_000_000 {
		t.Errorf("Rate = %d, %v; want 8000000", got, err)
	}
	// The leaf is fq_codel, which SetRate leaves as it is.
	mustContain(t, "tc qdisc show", l.tcShow(t, false, "qdisc"), "qdisc fq_codel 10: parent a5:1 limit 10240p")

	before, err := h.Stats(l.ifindex)
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	const n, size = 50, 1000
	sendUDP(t, l.ns, l.peer.IP()+":9", n, size, time.Millisecond)
	var after Stats
	if !eventually(func() bool {
		after, err = h.Stats(l.ifindex)
		return err == nil && after.Packets-before.Packets >= n && after.Backlog == 0
	}) {
		t.Fatalf("Stats after sending %d datagrams: %+v (before %+v), err %v", n, after, before, err)
	}
	if after.WireBytes <= after.Bytes {
		t.Errorf("Stats: %d wire bytes for %d bytes, want more with ATM framing", after.WireBytes, after.Bytes)
	}

	if err := h.Remove(l.ifindex); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if got, want := l.tcShow(t, false, "qdisc"), "qdisc noqueue 0: root refcnt 2 \n"; got != want {
		t.Errorf("tc qdisc show after Remove (-want +got):\n%s", cmp.Diff(want, got))
	}
}

// TestHTBLifecycle runs the priority split (what Create builds on a kernel
// without fq_codel) through its life.
func TestHTBLifecycle(t *testing.T) {
	l := newHTBLink(t)
	h := newHTB(testTC(t, l.ns), Framing{})

	createSplit(t, h, l.ifindex, 20_000_000)
	// The priority split, whose leaves are bfifos of 5 ms at 20 Mbit/s.
	mustContain(t, "tc class show", l.tcShow(t, false, "class"),
		"class htb a5:1 root rate 20Mbit ceil 20Mbit",
		"class htb a5:11 parent a5:1 leaf 11: prio 0 rate 17500Kbit ceil 20Mbit",
		"class htb a5:12 parent a5:1 leaf 12: prio 1 rate 2500Kbit ceil 20Mbit")
	mustContain(t, "tc qdisc show", l.tcShow(t, false, "qdisc"),
		"qdisc htb a5: root", "default 0x12", "qdisc bfifo 12: parent a5:12 limit 12500b", "qdisc bfifo 11: parent a5:11 limit 12500b")
	mustContain(t, "tc filter show", l.tcShow(t, false, "filter"),
		"protocol ip pref 1 u32", "*flowid a5:11", "match 00000000/0000ff00 at 0",
		"protocol ipv6 pref 2 u32", "match 00000000/ff000000 at 4")
	if err := h.Create(l.ifindex, 20_000_000, false); !errors.Is(err, fs.ErrExist) {
		t.Errorf("second Create: got %v, want an error wrapping fs.ErrExist", err)
	}

	for _, step := range []struct {
		bps           uint64
		classes       []string
		bfifo, sparse string
		wantRate      uint64
	}{
		{10_000_000, []string{"a5:1 root rate 10Mbit ceil 10Mbit", "a5:11 parent a5:1 leaf 11: prio 0 rate 8750Kbit ceil 10Mbit",
			"a5:12 parent a5:1 leaf 12: prio 1 rate 1250Kbit ceil 10Mbit"}, "limit 6250b", "limit 6250b", 10_000_000},
		// The same rate again: nothing to write, Rate unchanged.
		{10_000_000, []string{"a5:1 root rate 10Mbit ceil 10Mbit"}, "limit 6250b", "limit 6250b", 10_000_000},
		// 123 kbit/s: the bulk bfifo keeps 4 full frames, the sparse one 4
		// small ones.
		{123_000, []string{"a5:1 root rate 123Kbit ceil 123Kbit", "a5:11 parent a5:1 leaf 11: prio 0 rate 107632bit ceil 123Kbit",
			"a5:12 parent a5:1 leaf 12: prio 1 rate 15368bit ceil 123Kbit"}, "limit 6056b", "limit 1080b", 123_000},
		{20_000_000, []string{"a5:1 root rate 20Mbit ceil 20Mbit", "a5:11 parent a5:1 leaf 11: prio 0 rate 17500Kbit ceil 20Mbit",
			"a5:12 parent a5:1 leaf 12: prio 1 rate 2500Kbit ceil 20Mbit"}, "limit 12500b", "limit 12500b", 20_000_000},
	} {
		if _, _, err := h.SetRate(l.ifindex, step.bps); err != nil {
			t.Fatalf("SetRate(%d): %v", step.bps, err)
		}
		classes := l.tcShow(t, false, "class")
		for _, c := range step.classes {
			mustContain(t, "tc class show", classes, "class htb "+c)
		}
		mustContain(t, "tc qdisc show", l.tcShow(t, false, "qdisc"), "bfifo 12: parent a5:12 "+step.bfifo, "bfifo 11: parent a5:11 "+step.sparse)
		got, err := h.Rate(l.ifindex)
		if err != nil {
			t.Fatalf("Rate: %v", err)
		}
		if got != step.wantRate {
			t.Errorf("Rate after SetRate(%d) = %d, want %d", step.bps, got, step.wantRate)
		}
	}

	before, err := h.Stats(l.ifindex)
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	// 50 datagrams of 1000 bytes, 1 ms apart: about 8 Mbit/s, under the
	// 20 Mbit/s rate, so none is dropped.
	const n, size = 50, 1000
	sendUDP(t, l.ns, l.peer.IP()+":9", n, size, time.Millisecond)
	var after Stats
	ok := eventually(func() bool {
		after, err = h.Stats(l.ifindex)
		return err == nil && after.Packets-before.Packets >= n && after.Backlog == 0
	})
	if !ok {
		t.Fatalf("Stats after sending %d datagrams: %+v (before %+v), err %v", n, after, before, err)
	}
	// Each frame is the payload with UDP, IPv4 and Ethernet headers.
	if got, want := after.Bytes-before.Bytes, uint64(n*(size+8+20+14)); got < want {
		t.Errorf("Stats counted %d bytes, want at least %d", got, want)
	}
	if after.Drops != 0 {
		t.Errorf("Stats counted %d drops, want 0", after.Drops)
	}

	if err := h.Remove(l.ifindex); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if got, want := l.tcShow(t, false, "qdisc"), "qdisc noqueue 0: root refcnt 2 \n"; got != want {
		t.Errorf("tc qdisc show after Remove (-want +got):\n%s", cmp.Diff(want, got))
	}
	if got := l.tcShow(t, false, "class") + l.tcShow(t, false, "filter"); got != "" {
		t.Errorf("tc class and filter show after Remove: %q, want nothing", got)
	}
	if err := h.Remove(l.ifindex); err != nil {
		t.Errorf("second Remove: %v", err)
	}
	if _, err := h.Rate(l.ifindex); !errors.Is(err, ErrNoQdisc) {
		t.Errorf("Rate after Remove: got %v, want ErrNoQdisc", err)
	}
	if _, _, err := h.SetRate(l.ifindex, 1_000_000); !errors.Is(err, ErrNoQdisc) {
		t.Errorf("SetRate after Remove: got %v, want ErrNoQdisc", err)
	}
	if _, err := h.Stats(l.ifindex); !errors.Is(err, ErrNoQdisc) {
		t.Errorf("Stats after Remove: got %v, want ErrNoQdisc", err)
	}
}

func TestHTBDrops(t *testing.T) {
	l := newHTBLink(t)
	h := newHTB(testTC(t, l.ns), Framing{})
	// Resolved first: a burst that waits for ARP loses datagrams from the
	// neighbour table's queue before they meet the qdisc (1 of 100 once in
	// User-mode Linux).
	l.resolve(t, l.peer.IP()+":9")
	// 1 Mbit/s with a 3028-byte bfifo: a burst of 100 datagrams overflows.
	createSplit(t, h, l.ifindex, 1_000_000)
	const n = 100
	sendUDP(t, l.ns, l.peer.IP()+":9", n, 1000, 0)
	var s Stats
	var err error
	if !eventually(func() bool {
		s, err = h.Stats(l.ifindex)
		return err == nil && s.Packets+s.Drops >= n && s.Backlog == 0
	}) {
		t.Fatalf("Stats: %+v, err %v; want %d packets sent or dropped", s, err, n)
	}
	if s.Drops == 0 {
		t.Errorf("Stats: %+v, want drops", s)
	}
}

func TestHTBFraming(t *testing.T) {
	requireRoot(t)
	for _, tt := range []struct {
		name    string
		framing Framing
		bps     uint64
		// want are what `tc -d class show` must print.
		want []string
		// wantBytes is the rate the kernel holds, in bytes/s.
		wantBytes uint64
	}{
		{
			name: "ethernet", framing: Framing{}, bps: 20_000_000,
			want: []string{"rate 20Mbit ceil 20Mbit", "linklayer ethernet"}, wantBytes: 2_500_000,
		},
		{
			name: "ADSL", framing: Framing{LinkLayer: ATM, Overhead: 44}, bps: 20_000_000,
			want: []string{"rate 20Mbit overhead 44 ceil 20Mbit", "linklayer atm"}, wantBytes: 2_500_000,
		},
		{
			name: "ethernet with VLAN and MPU", framing: Framing{Overhead: 22, MPU: 64}, bps: 50_000_000,
			want: []string{"rate 50Mbit overhead 22", "linklayer ethernet", "mpu 64b"}, wantBytes: 6_250_000,
		},
		{
			// 20 Mbit/s × 64/65.
			name: "VDSL2 PTM", framing: Framing{LinkLayer: PTM, Overhead: 22}, bps: 20_000_000,
			want: []string{"rate 19692Kbit overhead 22", "linklayer ethernet"}, wantBytes: 2_461_538,
		},
		{
			// Above 2^32 bytes/s, in the 64-bit attributes.
			name: "40 Gbit/s", framing: Framing{}, bps: 40_000_000_000,
			want: []string{"rate 40Gbit ceil 40Gbit"}, wantBytes: 5_000_000_000,
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := newHTBLink(t)
			h := newHTB(testTC(t, l.ns), tt.framing)
			if err := h.Create(l.ifindex, tt.bps, false); err != nil {
				t.Fatalf("Create: %v", err)
			}
			mustContain(t, "tc -d class show", l.tcShow(t, true, "class"), tt.want...)
			class, err := h.class(l.ifindex)
			if err != nil {
				t.Fatalf("class: %v", err)
			}
			if got := classRate(class.Htb); got != tt.wantBytes {
				t.Errorf("kernel rate %d bytes/s, want %d", got, tt.wantBytes)
			}
			if got, err := h.Rate(l.ifindex); err != nil || got != tt.bps {
				t.Errorf("Rate = %d, %v; want %d", got, err, tt.bps)
			}
			// A change keeps the framing.
			if _, _, err := h.SetRate(l.ifindex, tt.bps/2); err != nil {
				t.Fatalf("SetRate: %v", err)
			}
			after, err := h.class(l.ifindex)
			if err != nil {
				t.Fatalf("class: %v", err)
			}
			have, want := after.Htb.Parms.Rate, class.Htb.Parms.Rate
			have.Rate, want.Rate = 0, 0
			if diff := cmp.Diff(want, have); diff != "" {
				t.Errorf("rate spec framing after SetRate (-want +got):\n%s", diff)
			}
			if got, err := h.Rate(l.ifindex); err != nil || got != tt.bps/2 {
				t.Errorf("Rate after SetRate = %d, %v; want %d", got, err, tt.bps/2)
			}
		})
	}
}

// TestHTBAttach changes the rate of an HTB class that iproute2 built, as
// when autoshape is told to attach to shaping someone else set up.
func TestHTBAttach(t *testing.T) {
	l := newHTBLink(t)
	dev := []string{"-n", l.router.NS}
	runCmd(t, "tc", append(dev, "qdisc", "add", "dev", l.router.Dev, "root", "handle", "1:", "htb", "default", "1")...)
	runCmd(t, "tc", append(dev, "class", "add", "dev", l.router.Dev, "parent", "1:", "classid", "1:1",
		"htb", "rate", "5mbit", "overhead", "18", "linklayer", "ethernet")...)

	h := newHTB(testTC(t, l.ns), Framing{})
	// Autoshape's own root handle finds nothing there.
	if _, _, err := h.SetRate(l.ifindex, 8_000_000); !errors.Is(err, ErrNoQdisc) {
		t.Errorf("SetRate on the HTB 1: as if it were a5:: got %v, want ErrNoQdisc", err)
	}
	if err := h.Remove(l.ifindex); !errors.Is(err, ErrNoQdisc) {
		t.Errorf("Remove of the HTB 1: as if it were a5:: got %v, want ErrNoQdisc", err)
	}
	h.root = 0x0001_0000 // as Attach finds it
	if got, err := h.Rate(l.ifindex); err != nil || got != 5_000_000 {
		t.Fatalf("Rate = %d, %v; want 5000000", got, err)
	}
	if _, _, err := h.SetRate(l.ifindex, 8_000_000); err != nil {
		t.Fatalf("SetRate: %v", err)
	}
	mustContain(t, "tc -d class show", l.tcShow(t, true, "class"),
		"rate 8Mbit overhead 18 ceil 8Mbit", "linklayer ethernet", "prio 0")
	if got, err := h.Rate(l.ifindex); err != nil || got != 8_000_000 {
		t.Errorf("Rate = %d, %v; want 8000000", got, err)
	}
	// The kernel's default pfifo leaf is not autoshape's: left alone.
	if got := l.tcShow(t, false, "qdisc"); strings.Contains(got, "bfifo") {
		t.Errorf("tc qdisc show has a bfifo after SetRate:\n%s", got)
	}
}

func TestHTBErrors(t *testing.T) {
	l := newHTBLink(t)
	for _, tt := range []struct {
		name    string
		framing Framing
		bps     uint64
		want    string
	}{
		{"negative overhead", Framing{Overhead: -4}, 1_000_000, "overhead -4 bytes out of HTB's range"},
		{"huge MPU", Framing{MPU: 70000}, 1_000_000, "MPU 70000 bytes out of HTB's range"},
		{"unknown link layer", Framing{LinkLayer: 7}, 1_000_000, "unknown link layer 7"},
		{"rate too low", Framing{}, 1000, "rate 1000 bit/s below HTB's minimum"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHTB(testTC(t, l.ns), tt.framing)
			err := h.Create(l.ifindex, tt.bps, false)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Create: got %v, want an error containing %q", err, tt.want)
			}
			if got := l.tcShow(t, false, "qdisc"); strings.Contains(got, "htb") {
				t.Errorf("tc qdisc show after a failed Create:\n%s", got)
			}
		})
	}

	h := newHTB(testTC(t, l.ns), Framing{})
	if err := h.Create(l.ifindex+1000, 1_000_000, false); err == nil || !strings.Contains(err.Error(), "ifindex") {
		t.Errorf("Create on a missing interface: got %v, want an error naming the ifindex", err)
	}
	// Another kind of root qdisc is neither used nor deleted.
	runCmd(t, "tc", "-n", l.router.NS, "qdisc", "add", "dev", l.router.Dev, "root", "handle", "2:", "tbf",
		"rate", "1mbit", "burst", "10kb", "latency", "50ms")
	if err := h.Create(l.ifindex, 1_000_000, false); !errors.Is(err, fs.ErrExist) {
		t.Errorf("Create over a tbf: got %v, want an error wrapping fs.ErrExist", err)
	}
	if err := h.Remove(l.ifindex); err == nil {
		t.Errorf("Remove of a tbf root: got nil, want an error")
	}
	mustContain(t, "tc qdisc show", l.tcShow(t, false, "qdisc"), "qdisc tbf 2: root")
}

// TestHTBSplitLikeIproute2 builds the priority split and, on a second veth,
// the same tree with iproute2's tc: the kernel must hold the same leaves and
// filters for both, so the filters go-tc encodes match what tc's
// "match u16 0 0xff00 at 2" means.
func TestHTBSplitLikeIproute2(t *testing.T) {
	l := newHTBLink(t)
	h := newHTB(testTC(t, l.ns), Framing{})
	createSplit(t, h, l.ifindex, 2_000_000)
	other := testEnd{NS: l.router.NS, Dev: "wan1"}
	newTestVeth(t, other, testEnd{NS: l.router.NS, Dev: "isp1"})
	tcDo := func(args ...string) {
		runCmd(t, "tc", append([]string{"-n", other.NS}, args...)...)
	}
	tcDo("qdisc", "add", "dev", other.Dev, "root", "handle", "a5:", "htb", "default", "12", "r2q", "10")
	tcDo("class", "add", "dev", other.Dev, "parent", "a5:", "classid", "a5:1", "htb", "rate", "2mbit", "ceil", "2mbit")
	tcDo("class", "add", "dev", other.Dev, "parent", "a5:1", "classid", "a5:11", "htb", "rate", "1750kbit", "ceil", "2mbit", "prio", "0")
	tcDo("class", "add", "dev", other.Dev, "parent", "a5:1", "classid", "a5:12", "htb", "rate", "250kbit", "ceil", "2mbit", "prio", "1")
	tcDo("qdisc", "add", "dev", other.Dev, "parent", "a5:11", "handle", "11:", "bfifo", "limit", "1250")
	tcDo("qdisc", "add", "dev", other.Dev, "parent", "a5:12", "handle", "12:", "bfifo", "limit", "6056")
	tcDo("filter", "add", "dev", other.Dev, "parent", "a5:", "protocol", "ip", "prio", "1", "u32",
		"match", "u16", "0", "0xff00", "at", "2", "flowid", "a5:11")
	tcDo("filter", "add", "dev", other.Dev, "parent", "a5:", "protocol", "ipv6", "prio", "2", "u32",
		"match", "u16", "0", "0xff00", "at", "4", "flowid", "a5:11")

	for _, kind := range []string{"qdisc", "filter"} {
		want := runCmd(t, "tc", "-n", other.NS, kind, "show", "dev", other.Dev)
		got := l.tcShow(t, false, kind)
		// direct_packets_stat counts what passed before the classes existed.
		unstable := regexp.MustCompile(`direct_packets_stat \d+`)
		want, got = unstable.ReplaceAllString(want, ""), unstable.ReplaceAllString(got, "")
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("tc %s show: autoshape's (+) and iproute2's (-) differ:\n%s", kind, diff)
		}
	}
	mustContain(t, "tc filter show", l.tcShow(t, false, "filter"), "*flowid a5:11")
}

// TestHTBSplitRepair starts SetRate from the state a failure part-way
// leaves, and from children someone changed: SetRate writes what differs.
func TestHTBSplitRepair(t *testing.T) {
	l := newHTBLink(t)
	h := newHTB(testTC(t, l.ns), Framing{})
	createSplit(t, h, l.ifindex, 20_000_000)
	tcDo := func(args ...string) {
		runCmd(t, "tc", append([]string{"-n", l.router.NS}, args...)...)
	}
	at10 := []string{"class htb a5:1 root rate 10Mbit ceil 10Mbit",
		"class htb a5:11 parent a5:1 leaf 11: prio 0 rate 8750Kbit ceil 10Mbit",
		"class htb a5:12 parent a5:1 leaf 12: prio 1 rate 1250Kbit ceil 10Mbit"}

	// SetRate(10 Mbit/s) that failed before its last write, class a5:1:
	// the bulk bfifo and both children are changed, the rate reads as
	// 20 Mbit/s still.
	tcDo("qdisc", "change", "dev", l.router.Dev, "parent", "a5:12", "handle", "12:", "bfifo", "limit", "6250")
	tcDo("class", "change", "dev", l.router.Dev, "parent", "a5:1", "classid", "a5:11", "htb", "rate", "8750kbit", "ceil", "10mbit", "prio", "0")
	tcDo("class", "change", "dev", l.router.Dev, "parent", "a5:1", "classid", "a5:12", "htb", "rate", "1250kbit", "ceil", "10mbit", "prio", "1")
	if got, err := h.Rate(l.ifindex); err != nil || got != 20_000_000 {
		t.Fatalf("Rate = %d, %v; want 20000000", got, err)
	}
	if _, _, err := h.SetRate(l.ifindex, 10_000_000); err != nil {
		t.Fatalf("SetRate: %v", err)
	}
	mustContain(t, "tc class show", l.tcShow(t, false, "class"), at10...)
	mustContain(t, "tc qdisc show", l.tcShow(t, false, "qdisc"), "bfifo 12: parent a5:12 limit 6250b")

	// A child changed behind autoshape's back, class a5:1 as it was: the
	// same rate again puts the child back.
	tcDo("class", "change", "dev", l.router.Dev, "parent", "a5:1", "classid", "a5:12", "htb", "rate", "1mbit", "ceil", "1mbit", "prio", "1")
	if _, _, err := h.SetRate(l.ifindex, 10_000_000); err != nil {
		t.Fatalf("SetRate: %v", err)
	}
	mustContain(t, "tc class show", l.tcShow(t, false, "class"), at10...)
}

// classCounters reads the bytes and packets each HTB class of ifindex has
// sent.
func classCounters(t *testing.T, conn *tcConn, ifindex uint32) map[uint32]Stats {
	t.Helper()
	classes, err := conn.Class().Get(&tc.Msg{Family: unix.AF_UNSPEC, Ifindex: ifindex})
	if err != nil {
		t.Fatalf("failed to read classes: %v", err)
	}
	out := make(map[uint32]Stats)
	for _, c := range classes {
		if c.Stats != nil {
			out[c.Handle] = statsFromTC(c.Stats)
		}
	}
	return out
}

// TestHTBSplitClassifies sends IPv4 and IPv6 datagrams just below and at
// the size limit and checks which class sent them, and that the root
// qdisc's counters are the two classes' together.
func TestHTBSplitClassifies(t *testing.T) {
	l := newHTBLink(t)
	for _, e := range []struct{ end testEnd }{{l.router}, {l.peer}} {
		addr := "fd00:9::1/64"
		if e.end == l.peer {
			addr = "fd00:9::2/64"
		}
		runCmd(t, "ip", "-n", e.end.NS, "addr", "add", addr, "dev", e.end.Dev, "nodad")
	}
	conn := testTC(t, l.ns)
	h := newHTB(conn, Framing{})
	createSplit(t, h, l.ifindex, 20_000_000)
	v4, v6 := l.peer.IP()+":9", "[fd00:9::2]:9"
	l.resolve(t, v4, v6)

	for _, tt := range []struct {
		name  string
		dst   string
		size  int // UDP payload
		class uint32
	}{
		// IPv4: 20 + 8 + 227 = 255 bytes of total length.
		{"IPv4 255 bytes", v4, 227, htbSparseClass},
		{"IPv4 256 bytes", v4, 228, htbBulkClass},
		{"IPv4 64 bytes", v4, 36, htbSparseClass},
		{"IPv4 1500 bytes", v4, 1472, htbBulkClass},
		// IPv6: payload length 8 + 247 = 255 bytes.
		{"IPv6 payload 255 bytes", v6, 247, htbSparseClass},
		{"IPv6 payload 256 bytes", v6, 248, htbBulkClass},
		{"IPv6 payload 1000 bytes", v6, 992, htbBulkClass},
	} {
		t.Run(tt.name, func(t *testing.T) {
			const n = 20
			before := classCounters(t, conn, l.ifindex)
			rootBefore, err := h.Stats(l.ifindex)
			if err != nil {
				t.Fatalf("Stats: %v", err)
			}
			sendUDP(t, l.ns, tt.dst, n, tt.size, time.Millisecond)
			var after map[uint32]Stats
			var root Stats
			// The root counts what both classes sent, and a packet that
			// passed is counted at both.
			ok := eventually(func() bool {
				after = classCounters(t, conn, l.ifindex)
				root, err = h.Stats(l.ifindex)
				sent := after[htbSparseClass].Packets + after[htbBulkClass].Packets -
					before[htbSparseClass].Packets - before[htbBulkClass].Packets
				return err == nil && sent >= n && root.Backlog == 0 &&
					root.Packets-rootBefore.Packets == sent &&
					root.Bytes-rootBefore.Bytes == after[htbSparseClass].Bytes+after[htbBulkClass].Bytes-
						before[htbSparseClass].Bytes-before[htbBulkClass].Bytes
			})
			if !ok {
				t.Fatalf("root %+v (before %+v), classes %+v (before %+v), err %v: want %d packets more, counted alike",
					root, rootBefore, after, before, err, n)
			}
			other := htbBulkClass
			if tt.class == htbBulkClass {
				other = htbSparseClass
			}
			// Besides the datagrams, an occasional packet of the
			// namespace's own (neighbour discovery, MLD, ARP).
			const stray = 2
			if got := after[tt.class].Packets - before[tt.class].Packets; got < n || got > n+stray {
				t.Errorf("class %s sent %d packets, want %d", handleString(tt.class), got, n)
			}
			if got := after[other].Packets - before[other].Packets; got > stray {
				t.Errorf("class %s sent %d packets, want none of the %d", handleString(other), got, n)
			}
		})
	}
}

// TestHTBSplitBacklog fills both leaves of a slow split and checks that the
// root qdisc's backlog, which the daemon reads, is what they hold together.
func TestHTBSplitBacklog(t *testing.T) {
	l := newHTBLink(t)
	conn := testTC(t, l.ns)
	h := newHTB(conn, Framing{})
	// ARP first, unshaped: at this rate its request would hold the
	// datagrams back in the neighbour table.
	l.resolve(t, l.peer.IP()+":9")
	// 8 kbit/s: a full frame takes a second, so the leaves stay full
	// while they are read.
	createSplit(t, h, l.ifindex, 8000)
	// More than the classes' bursts (a frame each) let through at once.
	sendUDP(t, l.ns, l.peer.IP()+":9", 30, 100, 0)
	sendUDP(t, l.ns, l.peer.IP()+":9", 6, 1000, 0)
	var root, sparse, bulk tc.Stats
	for range 5 {
		// One dump: the root and its leaves from the same moment, unless
		// a packet leaves in between; then read again.
		qdiscs, err := conn.Qdisc().Get()
		if err != nil {
			t.Fatalf("failed to read qdiscs: %v", err)
		}
		for _, q := range qdiscs {
			if q.Ifindex != l.ifindex || q.Stats == nil {
				continue
			}
			switch q.Handle {
			case htbRootHandle:
				root = *q.Stats
			case htbSparseLeaf:
				sparse = *q.Stats
			case htbBulkLeaf:
				bulk = *q.Stats
			}
		}
		if root.Backlog == sparse.Backlog+bulk.Backlog {
			break
		}
	}
	if sparse.Backlog == 0 || bulk.Backlog == 0 || root.Backlog != sparse.Backlog+bulk.Backlog {
		t.Errorf("backlog: root %d bytes, sparse leaf %d, bulk leaf %d; want both leaves holding packets and the root their sum",
			root.Backlog, sparse.Backlog, bulk.Backlog)
	}
	s, err := h.Stats(l.ifindex)
	if err != nil || s.Backlog == 0 {
		t.Errorf("Stats = %+v, %v; want a backlog", s, err)
	}
}

// listenUDP opens a UDP socket in ns on addr, closed when t ends.
func listenUDP(t *testing.T, ns netns.NsHandle, addr string) *net.UDPConn {
	t.Helper()
	var conn *net.UDPConn
	err := inNS(ns, func() error {
		a, err := net.ResolveUDPAddr("udp4", addr)
		if err != nil {
			return err
		}
		conn, err = net.ListenUDP("udp4", a)
		return err
	})
	if err != nil {
		t.Fatalf("failed to listen on %s: %v", addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// startFlood sends datagrams of size bytes of payload from the router's
// end to a sink at the peer, perSecond of them a second in bursts every
// 5 ms, until the returned function is called.
func startFlood(t *testing.T, l htbLink, size int, perSecond float64) (stop func()) {
	t.Helper()
	sink := listenUDP(t, l.peerNS, l.peer.IP()+":0")
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, err := sink.Read(buf); err != nil {
				return
			}
		}
	}()
	src := listenUDP(t, l.ns, l.router.IP()+":0")
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		const every = 5 * time.Millisecond
		payload := make([]byte, size)
		tick := time.NewTicker(every)
		defer tick.Stop()
		start, sent := time.Now(), 0
		for {
			// As many as are due: a late tick does not lower the rate.
			for due := int(time.Since(start).Seconds() * perSecond); sent < due; sent++ {
				// Drops at a full queue are the point; errors are not.
				src.WriteToUDP(payload, sink.LocalAddr().(*net.UDPAddr))
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
	}
}

// probeUnderLoad floods the link from the router's end with 1400-byte
// datagrams at about twice rate bytes/s, and meanwhile sends n 64-byte UDP
// probes to an echo at the peer. It returns the probes' round-trip times,
// sorted, lost ones as an hour.
func probeUnderLoad(t *testing.T, l htbLink, rate float64, n int) []time.Duration {
	t.Helper()
	echo := listenUDP(t, l.peerNS, l.peer.IP()+":0")
	go func() {
		buf := make([]byte, 2048)
		for {
			k, from, err := echo.ReadFromUDP(buf)
			if err != nil {
				return
			}
			echo.WriteToUDP(buf[:k], from)
		}
	}()
	probe := listenUDP(t, l.ns, l.router.IP()+":0")
	defer startFlood(t, l, 1400, 2*rate/1400)()
	// Let the flood fill the queue before the first probe.
	time.Sleep(300 * time.Millisecond)

	rtts := make([]time.Duration, n)
	for i := range rtts {
		rtts[i] = time.Hour
	}
	var mu sync.Mutex
	sent := make([]time.Time, n)
	received := make(chan struct{})
	go func() {
		defer close(received)
		buf := make([]byte, 2048)
		for {
			k, err := probe.Read(buf)
			if err != nil {
				return
			}
			now := time.Now()
			if k != 64 {
				continue
			}
			i := int(binary.BigEndian.Uint32(buf))
			mu.Lock()
			if i < n && !sent[i].IsZero() {
				rtts[i] = now.Sub(sent[i])
			}
			mu.Unlock()
		}
	}()
	payload := make([]byte, 64)
	for i := range n {
		binary.BigEndian.PutUint32(payload, uint32(i))
		mu.Lock()
		sent[i] = time.Now()
		mu.Unlock()
		if _, err := probe.WriteToUDP(payload, echo.LocalAddr().(*net.UDPAddr)); err != nil {
			t.Fatalf("probe %d: %v", i, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Stragglers: more than the deepest queue takes to drain.
	time.Sleep(200 * time.Millisecond)
	probe.Close()
	<-received
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(rtts)
	return rtts
}

// TestHTBSplitShares floods a 2 Mbit/s link with bulk datagrams and small
// ones at 40 % of the rate together, as a download's ACKs would load a slow
// upload: the small ones all pass (more than a sparse class of R/8 would
// let through), and the bulk class keeps its eighth of the rate.
func TestHTBSplitShares(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping: sends for seconds")
	}
	const bps = 2_000_000
	rate := float64(bps / 8)
	l := newHTBLink(t)
	conn := testTC(t, l.ns)
	h := newHTB(conn, Framing{})
	createSplit(t, h, l.ifindex, bps)
	// Small frames: 64 bytes of payload, 106 on the wire.
	const smallFrame, bulkFrame = 64 + 8 + 20 + 14, 1400 + 8 + 20 + 14
	stopBulk := startFlood(t, l, 1400, 2*rate/bulkFrame)
	time.Sleep(200 * time.Millisecond)
	before := classCounters(t, conn, l.ifindex)
	stopSmall := startFlood(t, l, 64, 0.4*rate/smallFrame)
	const period = 2 * time.Second
	time.Sleep(period)
	stopSmall()
	after := classCounters(t, conn, l.ifindex)
	stopBulk()

	sparse, bulk := after[htbSparseClass], after[htbBulkClass]
	sparse.Packets -= before[htbSparseClass].Packets
	sparse.Bytes -= before[htbSparseClass].Bytes
	bulk.Bytes -= before[htbBulkClass].Bytes
	t.Logf("in %v: sparse class %d packets, %.0f kbit/s; bulk class %.0f kbit/s",
		period, sparse.Packets, float64(sparse.Bytes)*8/period.Seconds()/1000, float64(bulk.Bytes)*8/period.Seconds()/1000)
	// The sender's own timing varies; the class must have passed what
	// came, far more than R/8 (a quarter of what was sent), and dropped
	// next to nothing: none where the sender keeps its pace, a few per cent
	// on a kernel with one slow CPU (User-mode Linux), whose late ticks
	// send bursts larger than the sparse bfifo.
	if want := 0.4 * rate / smallFrame * period.Seconds() * 0.7; float64(sparse.Packets) < want {
		t.Errorf("the sparse class sent %d small packets, want at least %.0f", sparse.Packets, want)
	}
	if d := after[htbSparseClass].Drops; float64(d) > 0.05*float64(sparse.Packets+d) {
		t.Errorf("the sparse class dropped %d packets of %d, want at most 5 %%", d, sparse.Packets+d)
	}
	if want := rate / 8 * period.Seconds() * 0.8; float64(bulk.Bytes) < want {
		t.Errorf("the bulk class sent %d bytes, want at least %.0f (an eighth of the rate)", bulk.Bytes, want)
	}
}

// TestHTBSplitSparseDelay floods a 2 Mbit/s link with bulk datagrams and
// measures the delay of small probes through it: under the split they pass
// the bulk queue, through one bfifo of the same depth they wait behind it.
func TestHTBSplitSparseDelay(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping: measures delays for seconds")
	}
	const bps, probes = 2_000_000, 30
	rate := float64(bps / 8)
	l := newHTBLink(t)
	h := newHTB(testTC(t, l.ns), Framing{})
	createSplit(t, h, l.ifindex, bps)
	split := probeUnderLoad(t, l, rate, probes)
	stats, err := h.Stats(l.ifindex)
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	if stats.Drops == 0 {
		t.Errorf("Stats %+v: the flood dropped nothing, want it to have overfilled the bulk queue", stats)
	}

	// The same rate and bulk depth as one class with one bfifo, as the
	// backend built it before the split.
	if err := h.Remove(l.ifindex); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	depth := bulkFifoLimit(uint64(rate))
	tcDo := func(args ...string) {
		runCmd(t, "tc", append([]string{"-n", l.router.NS}, args...)...)
	}
	tcDo("qdisc", "add", "dev", l.router.Dev, "root", "handle", "1:", "htb", "default", "1")
	tcDo("class", "add", "dev", l.router.Dev, "parent", "1:", "classid", "1:1", "htb", "rate", "2mbit", "ceil", "2mbit")
	tcDo("qdisc", "add", "dev", l.router.Dev, "parent", "1:1", "handle", "10:", "bfifo", "limit", strconv.Itoa(int(depth)))
	fifo := probeUnderLoad(t, l, rate, probes)

	median := func(d []time.Duration) time.Duration { return d[len(d)/2] }
	t.Logf("probe RTTs under a flood at 2 Mbit/s: split median %v (max %v), one bfifo of %d bytes median %v",
		median(split), split[len(split)-1], depth, median(fifo))
	// The bfifo holds its depth at the rate: the load worked only if the
	// probes waited for a good part of it there.
	full := time.Duration(float64(depth) / rate * float64(time.Second))
	if median(fifo) < full/2 {
		t.Fatalf("through one bfifo the probes' median is %v, want at least %v: the flood did not fill the queue", median(fifo), full/2)
	}
	if lost := slices.Index(split, time.Hour); lost >= 0 && lost < probes*4/5 {
		t.Errorf("under the split %d of %d probes were lost", probes-lost, probes)
	}
	if median(split) > median(fifo)/2 {
		t.Errorf("probes' median RTT under the split %v, want less than half of %v through one bfifo", median(split), median(fifo))
	}
}

// TestHTBSetRateLeavesForeignLeaves: SetRate resizes only its own bfifo
// leaves, by a change the kernel applies only to the qdisc it names; a
// leaf someone put in their place, under another handle (EEXIST) or of
// another kind under the same one (EINVAL), keeps its settings, and the
// classes still get the rate.
func TestHTBSetRateLeavesForeignLeaves(t *testing.T) {
	l := newHTBLink(t)
	fqCodel, err := kerneltest.HasQdisc("fq_codel")
	if err != nil {
		t.Fatal(err)
	}
	h := newHTB(testTC(t, l.ns), Framing{})
	if err := h.Create(l.ifindex, 20_000_000, false); err != nil {
		t.Fatalf("Create: %v", err)
	}
	tcq := func(op string, args ...string) {
		runCmd(t, "tc", append([]string{"-n", l.router.NS, "qdisc", op, "dev", l.router.Dev}, args...)...)
	}
	var want []string
	if fqCodel {
		// One leaf, fq_codel 10: under a5:1 (another kind under the same
		// handle is TestHTBFqCodel's).
		tcq("replace", "parent", "a5:1", "handle", "20:", "pfifo", "limit", "77")
		want = []string{"qdisc pfifo 20: parent a5:1 limit 77p"}
	} else {
		// The split: bfifo 11: under a5:11, bfifo 12: under a5:12.
		tcq("replace", "parent", "a5:11", "handle", "20:", "pfifo", "limit", "77")
		tcq("del", "parent", "a5:12", "handle", "12:")
		tcq("add", "parent", "a5:12", "handle", "12:", "pfifo", "limit", "88")
		want = []string{"qdisc pfifo 20: parent a5:11 limit 77p", "qdisc pfifo 12: parent a5:12 limit 88p"}
	}
	from, wrote, err := h.SetRate(l.ifindex, 8_000_000)
	if err != nil || !wrote || from != 20_000_000 {
		t.Fatalf("SetRate = %d, %v, %v; want 20000000, true, nil", from, wrote, err)
	}
	if got, err := h.Rate(l.ifindex); err != nil || got != 8_000_000 {
		t.Errorf("Rate = %d, %v; want 8000000", got, err)
	}
	mustContain(t, "tc qdisc show", l.tcShow(t, false, "qdisc"), want...)
	if _, wrote, err := h.SetRate(l.ifindex, 8_000_000); err != nil || wrote {
		t.Errorf("SetRate to the rate held: wrote %v, %v; want nothing written", wrote, err)
	}
}
