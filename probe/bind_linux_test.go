//go:build linux

package probe

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/autoshape/autoshape/estimator"
	"github.com/vishvananda/netns"
)

// Root tests of targets bound to a device (TargetOptions.Device), on a
// router with two WANs. Each test builds its own three namespaces and sends
// packets only inside them:
//
//	router ns: wan1 10.71.0.1/24 fd71::1/64  ──  isp1 ns: isp 10.71.0.2/24 fd71::2/64
//	           wan2 10.72.0.1/24 fd72::1/64  ──  isp2 ns: isp 10.72.0.2/24 fd72::2/64 fe80::79
//	                fe80::72:1                           lo  10.79.0.1 fd79::1 (the reflector)
//
// Both WANs have a default route, wan1's preferred (metric 10 against 20),
// as on a multi-WAN router. The reflector is only behind wan2: a probe that
// follows the default route goes to isp1 and is never answered.

// A twoWANLab is a router namespace with two WANs to two ISP namespaces.
type twoWANLab struct {
	router, isp1, isp2 string
	routerNS           netns.NsHandle
}

// Addresses and devices of a twoWANLab.
var (
	bindReflector4  = netip.MustParseAddr("10.79.0.1")
	bindReflector6  = netip.MustParseAddr("fd79::1")
	bindReflectorLL = netip.MustParseAddr("fe80::79")
)

const (
	bindWAN1, bindWAN2 = "wan1", "wan2"
	bindISPDev         = "isp"
)

// newTwoWANLab builds a twoWANLab, removed when tb ends. It skips tb unless
// root.
func newTwoWANLab(tb testing.TB) *twoWANLab {
	tb.Helper()
	requireProbeRoot(tb)
	id := probeLabSeq.Add(1)
	name := func(s string) string { return fmt.Sprintf("autoshape-bind-%d-%d-%s", os.Getpid(), id, s) }
	l := &twoWANLab{router: name("r"), isp1: name("i1"), isp2: name("i2")}
	for _, ns := range []string{l.router, l.isp1, l.isp2} {
		labCmd(tb, "ip", "netns", "add", ns)
		tb.Cleanup(func() {
			if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
				tb.Errorf("failed to delete namespace %s: %v: %s", ns, err, out)
			}
		})
		labCmd(tb, "ip", "-n", ns, "link", "set", "lo", "up")
		// Addresses work at once, without duplicate address detection.
		labCmd(tb, "ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv6.conf.default.accept_dad=0")
	}
	// The replies via wan2 come from an address that the router routes via
	// wan1: strict reverse-path filtering would drop them (a multi-WAN
	// router filters loosely). The namespace may have inherited it.
	labCmd(tb, "ip", "netns", "exec", l.router, "sysctl", "-q", "-w", "net.ipv4.conf.all.rp_filter=2")
	labCmd(tb, "ip", "netns", "exec", l.router, "sysctl", "-q", "-w", "net.ipv4.ping_group_range=0 2147483647")
	labCmd(tb, "ip", "-n", l.isp2, "addr", "add", bindReflector4.String()+"/32", "dev", "lo")
	labCmd(tb, "ip", "-n", l.isp2, "addr", "add", bindReflector6.String()+"/128", "dev", "lo")
	l.addWAN(tb, 1)
	l.addWAN(tb, 2)
	ns, err := netns.GetFromName(l.router)
	if err != nil {
		tb.Fatalf("failed to open namespace %s: %v", l.router, err)
	}
	tb.Cleanup(func() { ns.Close() })
	l.routerNS = ns
	return l
}

// addWAN (re)creates WAN n (1 or 2): the veth pair, the addresses, the
// neighbours and the router's default routes through it.
func (l *twoWANLab) addWAN(tb testing.TB, n int) {
	tb.Helper()
	dev, isp := bindWAN1, l.isp1
	if n == 2 {
		dev, isp = bindWAN2, l.isp2
	}
	rtrMAC, ispMAC := fmt.Sprintf("02:7%d:00:00:00:01", n), fmt.Sprintf("02:7%d:00:00:00:02", n)
	rtr4, isp4 := fmt.Sprintf("10.7%d.0.1", n), fmt.Sprintf("10.7%d.0.2", n)
	rtr6, isp6 := fmt.Sprintf("fd7%d::1", n), fmt.Sprintf("fd7%d::2", n)
	rtrLL, ispLL := fmt.Sprintf("fe80::7%d:1", n), bindReflectorLL.String()
	labCmd(tb, "ip", "-n", l.router, "link", "add", dev, "address", rtrMAC, "type", "veth",
		"peer", "name", bindISPDev, "address", ispMAC, "netns", isp)
	type end struct{ ns, dev, v4, v6, ll, peerMAC, peer4, peer6, peerLL string }
	for _, e := range []end{
		{l.router, dev, rtr4, rtr6, rtrLL, ispMAC, isp4, isp6, ispLL},
		{isp, bindISPDev, isp4, isp6, ispLL, rtrMAC, rtr4, rtr6, rtrLL},
	} {
		ip := func(args ...string) { labCmd(tb, "ip", append([]string{"-n", e.ns}, args...)...) }
		// One link-local address each, the one given, and no neighbour
		// discovery, whose first solicitation may go out before the other
		// end listens.
		ip("link", "set", e.dev, "addrgenmode", "none")
		ip("addr", "add", e.v4+"/24", "dev", e.dev)
		ip("addr", "add", e.v6+"/64", "dev", e.dev)
		ip("addr", "add", e.ll+"/64", "dev", e.dev)
		for _, a := range []string{e.peer4, e.peer6, e.peerLL} {
			ip("neigh", "add", a, "lladdr", e.peerMAC, "dev", e.dev, "nud", "permanent")
		}
		ip("link", "set", e.dev, "up")
	}
	metric := fmt.Sprint(n * 10)
	labCmd(tb, "ip", "-n", l.router, "route", "add", "default", "via", isp4, "dev", dev, "metric", metric)
	labCmd(tb, "ip", "-n", l.router, "-6", "route", "add", "default", "via", isp6, "dev", dev, "metric", metric)
}

// probeLab returns a probeLab whose router is this lab's, for its run.
func (l *twoWANLab) probeLab() *probeLab {
	return &probeLab{router: l.router, routerNS: l.routerNS}
}

// bindCase is a target to run in a twoWANLab.
type bindCase struct {
	name     string
	addr     netip.Addr
	method   Method
	datagram bool
}

// bindCases are the sockets a target may open, each kind of reflector
// address, and timestamps.
var bindCases = []bindCase{
	{name: "echo IPv4 raw", addr: bindReflector4, method: Echo},
	{name: "echo IPv4 datagram", addr: bindReflector4, method: Echo, datagram: true},
	{name: "echo IPv6 raw", addr: bindReflector6, method: Echo},
	{name: "echo IPv6 datagram", addr: bindReflector6, method: Echo, datagram: true},
	{name: "echo link-local raw", addr: bindReflectorLL, method: Echo},
	{name: "echo link-local datagram", addr: bindReflectorLL, method: Echo, datagram: true},
	{name: "echo link-local with zone", addr: bindReflectorLL.WithZone(bindWAN2), method: Echo},
	{name: "timestamp", addr: bindReflector4, method: Timestamp},
}

// target makes c's target, bound to device.
func (c bindCase) target(tb testing.TB, device string, deadline time.Duration) Target {
	tb.Helper()
	opts := TargetOptions{Logger: labLogger(tb), Device: device}
	if c.datagram {
		opts.EchoSocket = EchoSocketDatagram
	}
	tg, err := NewTargetFactory(opts)(c.addr, c.method, 10*time.Millisecond, deadline)
	if err != nil {
		tb.Fatal(err)
	}
	return tg
}

// kinds are the samples an answer to c gives.
func (c bindCase) kinds() []estimator.Kind {
	if c.method == Timestamp {
		return []estimator.Kind{estimator.OWDUp, estimator.OWDDown}
	}
	return []estimator.Kind{estimator.RTT}
}

func TestBoundTargetProbesThroughItsDevice(t *testing.T) {
	l := newTwoWANLab(t)
	for _, c := range bindCases {
		t.Run(c.name, func(t *testing.T) {
			tg := c.target(t, bindWAN2, 500*time.Millisecond)
			got, err := l.probeLab().run(t, tg, 300*time.Millisecond, nil)
			if err != nil {
				t.Fatalf("Run() = %v", err)
			}
			lo := time.Duration(0)
			if c.method == Timestamp {
				lo = -time.Millisecond
			}
			checkAnswered(t, got, 15, c.kinds(), lo, 100*time.Millisecond)
			if s := tg.Stats(); s.Stray != 0 || s.Late != 0 || s.Duplicates != 0 {
				t.Errorf("Stats() = %+v, want nothing stray, late or duplicated", s)
			}
		})
	}
}

func TestBoundTargetWithIngressOnAnIFB(t *testing.T) {
	// The daemon shapes the download on an IFB that wan2's ingress is
	// redirected to: the IFB hands the answers back as wan2's, and the
	// socket bound to wan2 gets them.
	l := newTwoWANLab(t)
	ip := func(args ...string) { labCmd(t, "ip", append([]string{"-n", l.router}, args...)...) }
	tc := func(args ...string) { labCmd(t, "tc", append([]string{"-n", l.router}, args...)...) }
	ip("link", "add", "ifb4wan2", "type", "ifb")
	ip("link", "set", "ifb4wan2", "up")
	tc("qdisc", "add", "dev", bindWAN2, "handle", "ffff:", "ingress")
	tc("filter", "add", "dev", bindWAN2, "parent", "ffff:", "protocol", "all", "u32", "match", "u32", "0", "0",
		"action", "mirred", "egress", "redirect", "dev", "ifb4wan2")
	for _, c := range []bindCase{bindCases[0], bindCases[3], bindCases[7]} {
		t.Run(c.name, func(t *testing.T) {
			tg := c.target(t, bindWAN2, 500*time.Millisecond)
			got, err := l.probeLab().run(t, tg, 300*time.Millisecond, nil)
			if err != nil {
				t.Fatalf("Run() = %v", err)
			}
			checkAnswered(t, got, 15, c.kinds(), -time.Millisecond, 100*time.Millisecond)
		})
	}
	if out := labCmd(t, "tc", "-n", l.router, "-s", "filter", "show", "dev", bindWAN2, "ingress"); !strings.Contains(out, "Sent") || strings.Contains(out, "Sent 0 bytes") {
		t.Errorf("the redirect to the IFB saw no packets:\n%s", out)
	}
}

func TestUnboundTargetFollowsTheDefaultRoute(t *testing.T) {
	// The reflector is only behind wan2, and the default route goes out
	// of wan1: the probes of an unbound target never reach it.
	l := newTwoWANLab(t)
	for _, c := range bindCases {
		if c.addr.Zone() != "" || c.addr.IsLinkLocalUnicast() {
			continue // without a device, a link-local address needs a zone
		}
		t.Run(c.name, func(t *testing.T) {
			const deadline = 50 * time.Millisecond
			tg := c.target(t, "", deadline)
			got, err := l.probeLab().run(t, tg, 300*time.Millisecond, nil)
			if err != nil {
				t.Fatalf("Run() = %v", err)
			}
			checkLost(t, got, 10, deadline)
			if s := tg.Stats(); s.Answered != 0 {
				t.Errorf("Stats() = %+v, want none answered", s)
			}
		})
	}
}

func TestBoundAutoFallsBackToEcho(t *testing.T) {
	// Timestamp requests dropped on wan2: Auto leaves timestamps for an
	// echo target bound to the same device.
	l := newTwoWANLab(t)
	dropTimestampRequests(t, l.router, bindWAN2)
	const deadline = 50 * time.Millisecond
	tg := bindCase{addr: bindReflector4, method: Auto}.target(t, bindWAN2, deadline)
	got, err := l.probeLab().run(t, tg, 600*time.Millisecond, nil)
	if err != nil {
		t.Fatalf("Run() = %v", err)
	}
	if s := tg.Stats(); s.Method != Echo {
		t.Fatalf("Stats() = %+v, want method echo", s)
	}
	if len(got) < 20 {
		t.Fatalf("got %d results, want at least 20", len(got))
	}
	checkLost(t, got[:DefaultAutoMisses], DefaultAutoMisses, deadline)
	for i, r := range got[DefaultAutoMisses:] {
		if r.Lost || r.N != 1 || r.Samples[0].Kind != estimator.RTT {
			t.Fatalf("result %d after the switch: %+v, want an echo answer", i, r.Result)
		}
	}
}

func TestBoundTargetOutlivesItsDevice(t *testing.T) {
	// A PPPoE reconnect deletes the device and makes a new one of the
	// same name: the socket bound to the old one is reopened, bound to the
	// new one, and the answers come back without Run ending. While there
	// is no device, the probes are lost.
	tests := []struct {
		bindCase
		// missing deletes the device before the target starts.
		missing bool
	}{
		{bindCase: bindCases[0]},
		{bindCase: bindCases[1]},
		{bindCase: bindCases[2]},
		{bindCase: bindCases[3]},
		{bindCase: bindCases[7]},
		{bindCase: bindCase{name: "echo IPv4 raw, device missing at the start", addr: bindReflector4, method: Echo}, missing: true},
	}
	l := newTwoWANLab(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.missing {
				labCmd(t, "ip", "-n", l.router, "link", "del", bindWAN2)
			}
			const deadline = 100 * time.Millisecond
			tg := tt.target(t, bindWAN2, deadline)
			r := l.start(t, tg)
			if !tt.missing {
				r.waitFor(t, "5 answers", func(got []Result) bool { return answers(got) >= 5 })
				labCmd(t, "ip", "-n", l.router, "link", "del", bindWAN2)
			}
			before := r.count()
			r.waitFor(t, "5 probes lost without the device", func(got []Result) bool { return losses(got[before:]) >= 5 })
			l.addWAN(t, 2)
			back := r.count()
			r.waitFor(t, "5 answers on the new device", func(got []Result) bool { return answers(got[back:]) >= 5 })
			if err := r.stop(); err != nil {
				t.Fatalf("Run() = %v", err)
			}
			if s := tg.Stats(); s.Stray != 0 || s.Answered < 5 || s.Lost < 5 {
				t.Errorf("Stats() = %+v, want 5 or more answered and lost, none stray", s)
			}
		})
	}
}

// A running is a target running in the router namespace of a twoWANLab.
type running struct {
	cancel context.CancelFunc
	errc   chan error

	mu  sync.Mutex
	got []Result
}

// start runs tg in the router namespace until stop or the end of tb.
func (l *twoWANLab) start(tb testing.TB, tg Target) *running {
	ctx, cancel := context.WithCancel(tb.Context())
	r := &running{cancel: cancel, errc: make(chan error, 1)}
	go func() {
		// The thread stays in the router namespace: locked, it ends with
		// this goroutine.
		runtime.LockOSThread()
		if err := netns.Set(l.routerNS); err != nil {
			r.errc <- err
			return
		}
		r.errc <- tg.Run(ctx, func(res Result) {
			r.mu.Lock()
			r.got = append(r.got, res)
			r.mu.Unlock()
		})
	}()
	tb.Cleanup(func() { r.stop() })
	return r
}

// stop ends the run and returns Run's error. Calls after the first return
// nil.
func (r *running) stop() error {
	r.cancel()
	err, ok := <-r.errc
	if ok {
		close(r.errc)
	}
	return err
}

// count is the number of results so far.
func (r *running) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

// waitFor waits until cond holds for the results so far, and fails tb if
// it does not within 5 s or Run ends first.
func (r *running) waitFor(tb testing.TB, what string, cond func([]Result) bool) {
	tb.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(5 * time.Second)
	for {
		r.mu.Lock()
		ok := cond(r.got)
		n := len(r.got)
		r.mu.Unlock()
		if ok {
			return
		}
		select {
		case err := <-r.errc:
			close(r.errc)
			tb.Fatalf("Run() = %v before %s", err, what)
		case <-timeout:
			tb.Fatalf("no %s in 5 s (%d results)", what, n)
		case <-tick.C:
		}
	}
}

// answers counts the answered results.
func answers(rs []Result) int {
	n := 0
	for _, r := range rs {
		if !r.Lost {
			n++
		}
	}
	return n
}

// losses counts the lost results.
func losses(rs []Result) int { return len(rs) - answers(rs) }
