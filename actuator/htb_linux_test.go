//go:build linux

package actuator

import (
	"errors"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netns"
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

func TestHTBLifecycle(t *testing.T) {
	l := newHTBLink(t)
	h := newHTB(testTC(t, l.ns), Framing{})

	if err := h.Create(l.ifindex, 20_000_000); err != nil {
		t.Fatalf("Create: %v", err)
	}
	mustContain(t, "tc class show", l.tcShow(t, false, "class"), "class htb 1:1 root", "rate 20Mbit ceil 20Mbit")
	// This kernel lacks fq_codel: the leaf is a bfifo of 5 ms at 20 Mbit/s.
	mustContain(t, "tc qdisc show", l.tcShow(t, false, "qdisc"),
		"qdisc htb 1: root", "default 0x1", "qdisc bfifo 10: parent 1:1 limit 12500b")
	if err := h.Create(l.ifindex, 20_000_000); !errors.Is(err, fs.ErrExist) {
		t.Errorf("second Create: got %v, want an error wrapping fs.ErrExist", err)
	}

	for _, step := range []struct {
		bps      uint64
		class    string
		bfifo    string
		wantRate uint64
	}{
		{10_000_000, "rate 10Mbit ceil 10Mbit", "limit 6250b", 10_000_000},
		// The same rate again: nothing to write, Rate unchanged.
		{10_000_000, "rate 10Mbit ceil 10Mbit", "limit 6250b", 10_000_000},
		{123_000, "rate 123Kbit ceil 123Kbit", "limit 3028b", 123_000},
		{20_000_000, "rate 20Mbit ceil 20Mbit", "limit 12500b", 20_000_000},
	} {
		if err := h.SetRate(l.ifindex, step.bps); err != nil {
			t.Fatalf("SetRate(%d): %v", step.bps, err)
		}
		mustContain(t, "tc class show", l.tcShow(t, false, "class"), step.class)
		mustContain(t, "tc qdisc show", l.tcShow(t, false, "qdisc"), "bfifo 10: parent 1:1 "+step.bfifo)
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
	if err := h.Remove(l.ifindex); err != nil {
		t.Errorf("second Remove: %v", err)
	}
	if _, err := h.Rate(l.ifindex); !errors.Is(err, ErrNoQdisc) {
		t.Errorf("Rate after Remove: got %v, want ErrNoQdisc", err)
	}
	if err := h.SetRate(l.ifindex, 1_000_000); !errors.Is(err, ErrNoQdisc) {
		t.Errorf("SetRate after Remove: got %v, want ErrNoQdisc", err)
	}
	if _, err := h.Stats(l.ifindex); !errors.Is(err, ErrNoQdisc) {
		t.Errorf("Stats after Remove: got %v, want ErrNoQdisc", err)
	}
}

func TestHTBDrops(t *testing.T) {
	l := newHTBLink(t)
	h := newHTB(testTC(t, l.ns), Framing{})
	// 1 Mbit/s with a 3028-byte bfifo: a burst of 100 datagrams overflows.
	if err := h.Create(l.ifindex, 1_000_000); err != nil {
		t.Fatalf("Create: %v", err)
	}
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
			if err := h.Create(l.ifindex, tt.bps); err != nil {
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
			if err := h.SetRate(l.ifindex, tt.bps/2); err != nil {
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
	if got, err := h.Rate(l.ifindex); err != nil || got != 5_000_000 {
		t.Fatalf("Rate = %d, %v; want 5000000", got, err)
	}
	if err := h.SetRate(l.ifindex, 8_000_000); err != nil {
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
			err := h.Create(l.ifindex, tt.bps)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Create: got %v, want an error containing %q", err, tt.want)
			}
			if got := l.tcShow(t, false, "qdisc"); strings.Contains(got, "htb") {
				t.Errorf("tc qdisc show after a failed Create:\n%s", got)
			}
		})
	}

	h := newHTB(testTC(t, l.ns), Framing{})
	if err := h.Create(l.ifindex+1000, 1_000_000); err == nil || !strings.Contains(err.Error(), "ifindex") {
		t.Errorf("Create on a missing interface: got %v, want an error naming the ifindex", err)
	}
	// Another kind of root qdisc is neither used nor deleted.
	runCmd(t, "tc", "-n", l.router.NS, "qdisc", "add", "dev", l.router.Dev, "root", "handle", "2:", "tbf",
		"rate", "1mbit", "burst", "10kb", "latency", "50ms")
	if err := h.Create(l.ifindex, 1_000_000); !errors.Is(err, fs.ErrExist) {
		t.Errorf("Create over a tbf: got %v, want an error wrapping fs.ErrExist", err)
	}
	if err := h.Remove(l.ifindex); err == nil {
		t.Errorf("Remove of a tbf root: got nil, want an error")
	}
	mustContain(t, "tc qdisc show", l.tcShow(t, false, "qdisc"), "qdisc tbf 2: root")
}
