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
	"sync/atomic"
	"testing"
	"time"

	"github.com/autoshape/autoshape/estimator"
	"github.com/vishvananda/netns"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// Root tests of the echo target, and the namespace lab that all root probe
// tests share. Each test builds its own pair of network namespaces, joined
// by a veth pair, and sends packets only inside them:
//
//	router ns:    rt0 10.77.0.1/24 fd77::1/64  (targets run here)
//	reflector ns: rf0 10.77.0.2/24 fd77::2/64  (its kernel answers)

// A probeLab is a router and a reflector namespace joined by a veth pair.
type probeLab struct {
	router, reflector string
	routerNS          netns.NsHandle
	// v4 and v6 are the reflector's addresses.
	v4, v6 netip.Addr
}

// Devices of a probeLab.
const (
	labRouterDev    = "rt0"
	labReflectorDev = "rf0"
	labRouterMAC    = "02:77:00:00:00:01"
	labReflectorMAC = "02:77:00:00:00:02"
)

var probeLabSeq atomic.Int64

// requireProbeRoot skips tb unless it runs as root with iproute2.
func requireProbeRoot(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("skipping: needs root to create network namespaces and open raw icmp sockets")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		tb.Skip("skipping: needs iproute2's ip to build test namespaces")
	}
}

// newProbeLab builds a probeLab, removed when tb ends. It skips tb unless
// root.
func newProbeLab(tb testing.TB) *probeLab {
	tb.Helper()
	requireProbeRoot(tb)
	id := probeLabSeq.Add(1)
	l := &probeLab{
		router:    fmt.Sprintf("autoshape-probe-%d-%d-r", os.Getpid(), id),
		reflector: fmt.Sprintf("autoshape-probe-%d-%d-x", os.Getpid(), id),
		v4:        netip.MustParseAddr("10.77.0.2"),
		v6:        netip.MustParseAddr("fd77::2"),
	}
	for _, ns := range []string{l.router, l.reflector} {
		labCmd(tb, "ip", "netns", "add", ns)
		tb.Cleanup(func() {
			if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
				tb.Errorf("failed to delete namespace %s: %v: %s", ns, err, out)
			}
		})
		labCmd(tb, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	labCmd(tb, "ip", "-n", l.router, "link", "add", labRouterDev, "address", labRouterMAC, "type", "veth",
		"peer", "name", labReflectorDev, "address", labReflectorMAC, "netns", l.reflector)
	type end struct{ ns, dev, v4, v6 string }
	router := end{l.router, labRouterDev, "10.77.0.1", "fd77::1"}
	reflector := end{l.reflector, labReflectorDev, "10.77.0.2", "fd77::2"}
	for _, e := range []struct {
		end
		peer    end
		peerMAC string
	}{{router, reflector, labReflectorMAC}, {reflector, router, labRouterMAC}} {
		labCmd(tb, "ip", "-n", e.ns, "addr", "add", e.v4+"/24", "dev", e.dev)
		// No duplicate address detection: the address works at once.
		labCmd(tb, "ip", "-n", e.ns, "addr", "add", e.v6+"/64", "dev", e.dev, "nodad")
		// Nor neighbour discovery, whose first solicitation may go out
		// before the other end listens, and whose retry comes a second
		// later.
		for _, ip := range []string{e.peer.v4, e.peer.v6} {
			labCmd(tb, "ip", "-n", e.ns, "neigh", "add", ip, "lladdr", e.peerMAC, "dev", e.dev, "nud", "permanent")
		}
		labCmd(tb, "ip", "-n", e.ns, "link", "set", e.dev, "up")
	}
	ns, err := netns.GetFromName(l.router)
	if err != nil {
		tb.Fatalf("failed to open namespace %s: %v", l.router, err)
	}
	tb.Cleanup(func() { ns.Close() })
	l.routerNS = ns
	return l
}

// blackhole makes the reflector drop everything it sends (a bfifo of no
// bytes as its root qdisc): probes reach it, and their answers are lost
// silently, as on a path that drops them.
func (l *probeLab) blackhole(tb testing.TB) {
	tb.Helper()
	labCmd(tb, "tc", "-n", l.reflector, "qdisc", "replace", "dev", labReflectorDev, "root", "bfifo", "limit", "0")
}

// linkDown takes the reflector's link down. The router's kernel may then
// refuse the probes (IPv6 sends fail with ENOBUFS) or drop them silently
// (IPv4).
func (l *probeLab) linkDown(tb testing.TB) {
	tb.Helper()
	labCmd(tb, "ip", "-n", l.reflector, "link", "set", labReflectorDev, "down")
}

// labCmd runs a command and returns its standard output; it fails tb when
// the command fails.
func labCmd(tb testing.TB, name string, args ...string) string {
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

// A reported is a Result and when the sink got it.
type reported struct {
	Result
	At time.Time
}

// run runs tg.Run on a thread in the router namespace until d has passed,
// and returns what it reported and its error. While it runs, watch (if not
// nil) is called every 5 ms.
func (l *probeLab) run(tb testing.TB, tg Target, d time.Duration, watch func()) ([]reported, error) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(tb.Context(), d)
	defer cancel()
	var (
		mu  sync.Mutex
		got []reported
	)
	errc := make(chan error, 1)
	go func() {
		// The thread stays in the router namespace: locked, it ends with
		// this goroutine.
		runtime.LockOSThread()
		if err := netns.Set(l.routerNS); err != nil {
			errc <- fmt.Errorf("failed to enter namespace %s: %w", l.router, err)
			return
		}
		errc <- tg.Run(ctx, func(r Result) {
			mu.Lock()
			got = append(got, reported{r, time.Now()})
			mu.Unlock()
		})
	}()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-errc:
			mu.Lock()
			defer mu.Unlock()
			return got, err
		case <-tick.C:
			if watch != nil {
				watch()
			}
		}
	}
}

// newLabTarget makes a target with the factory's defaults, failing tb on
// error.
func newLabTarget(tb testing.TB, addr netip.Addr, method Method, interval, deadline time.Duration) Target {
	tb.Helper()
	tg, err := NewTargetFactory(TargetOptions{Logger: labLogger(tb)})(addr, method, interval, deadline)
	if err != nil {
		tb.Fatal(err)
	}
	return tg
}

// labLogger logs warnings and errors to tb.
func labLogger(tb testing.TB) *zap.Logger {
	return zaptest.NewLogger(tb, zaptest.Level(zapcore.WarnLevel))
}

// checkAnswered checks that results are answered probes numbered from 0
// in order, with n samples each of the given kinds, each delay within
// (lo, hi).
func checkAnswered(tb testing.TB, results []reported, min int, kinds []estimator.Kind, lo, hi time.Duration) {
	tb.Helper()
	// On a busy machine the very first probes of a new namespace may go
	// unanswered; after them every probe must be.
	first := 0
	for first < len(results) && first < 3 && results[first].Lost {
		first++
	}
	if len(results)-first < min {
		tb.Fatalf("got %d results (%d lost at the start), want at least %d answered", len(results), first, min)
	}
	for i, r := range results {
		if i < first {
			continue
		}
		if r.Seq != i || r.Lost || r.N != len(kinds) {
			tb.Fatalf("result %d: %+v, want probe %d answered with %d samples", i, r.Result, i, len(kinds))
		}
		for j, k := range kinds {
			s := r.Samples[j]
			if s.Kind != k || s.Reflector != r.Reflector.String() || !s.Sent.Equal(r.Sent) || s.Delay <= lo || s.Delay >= hi {
				tb.Errorf("result %d sample %d: %+v, want %v with delay in (%v, %v)", i, j, s, k, lo, hi)
			}
		}
	}
}

// checkLost checks that results are lost probes numbered from 0 in order,
// each reported no earlier than its deadline.
func checkLost(tb testing.TB, results []reported, min int, deadline time.Duration) {
	tb.Helper()
	if len(results) < min {
		tb.Fatalf("got %d results, want at least %d", len(results), min)
	}
	for i, r := range results {
		if r.Seq != i || !r.Lost || r.N != 0 {
			tb.Fatalf("result %d: %+v, want probe %d lost", i, r.Result, i)
		}
		if waited := r.At.Sub(r.Sent); waited < deadline {
			tb.Errorf("probe %d reported lost after %v, before its deadline %v", i, waited, deadline)
		}
	}
}

func TestEchoAnswered(t *testing.T) {
	tests := []struct {
		name string
		v6   bool
	}{
		{name: "IPv4"},
		{name: "IPv6", v6: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newProbeLab(t)
			addr := l.v4
			if tt.v6 {
				addr = l.v6
			}
			tg := newLabTarget(t, addr, Echo, 10*time.Millisecond, 500*time.Millisecond)
			e := tg.(*echoTarget)
			if !e.privileged {
				t.Fatal("echo target as root uses a datagram socket, want raw")
			}
			// Long enough that a first probe lost on a busy machine (its
			// deadline holds back the results behind it) cannot empty the
			// run.
			got, err := l.run(t, tg, 1500*time.Millisecond, nil)
			if err != nil {
				t.Fatalf("Run() = %v", err)
			}
			checkAnswered(t, got, 20, []estimator.Kind{estimator.RTT}, 0, 100*time.Millisecond)
			s := tg.Stats()
			// A probe answered behind one still awaiting its answer when
			// Run ended was counted, not reported.
			if s.Answered+s.Lost < uint64(len(got)) || s.Lost > 3 || s.Stray != 0 || s.Late != 0 || s.Duplicates != 0 || s.Method != Echo {
				t.Errorf("Stats() = %+v, want at least %d answered (at most 3 lost at the start) and nothing else", s, len(got))
			}
		})
	}
}

func TestEchoDatagramSocket(t *testing.T) {
	tests := []struct {
		name string
		v6   bool
		// widen opens net.ipv4.ping_group_range in the router namespace.
		widen   bool
		wantErr string
	}{
		{name: "IPv4", widen: true},
		{name: "IPv6", v6: true, widen: true},
		{name: "IPv4 not allowed", wantErr: "failed to open echo socket for reflector 10.77.0.2: socket: permission denied"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newProbeLab(t)
			if tt.widen {
				labCmd(t, "ip", "netns", "exec", l.router, "sysctl", "-q", "-w", "net.ipv4.ping_group_range=0 2147483647")
			}
			addr := l.v4
			if tt.v6 {
				addr = l.v6
			}
			tg, err := NewTargetFactory(TargetOptions{Logger: labLogger(t), EchoSocket: EchoSocketDatagram})(addr, Echo, 10*time.Millisecond, 500*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			// Long enough for a first probe lost on a busy machine (see
			// TestEchoAnswered).
			got, err := l.run(t, tg, 1500*time.Millisecond, nil)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("Run() = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Run() = %v", err)
			}
			checkAnswered(t, got, 15, []estimator.Kind{estimator.RTT}, 0, 100*time.Millisecond)
		})
	}
}

func TestEchoLost(t *testing.T) {
	tests := []struct {
		name string
		v6   bool
		// linkDown takes the link down instead of dropping the answers.
		linkDown bool
	}{
		{name: "IPv4 answers dropped"},
		{name: "IPv6 answers dropped", v6: true},
		{name: "IPv4 link down", linkDown: true},
		{name: "IPv6 link down", v6: true, linkDown: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newProbeLab(t)
			if tt.linkDown {
				l.linkDown(t)
			} else {
				l.blackhole(t)
			}
			addr := l.v4
			if tt.v6 {
				addr = l.v6
			}
			const deadline = 100 * time.Millisecond
			tg := newLabTarget(t, addr, Echo, 10*time.Millisecond, deadline)
			got, err := l.run(t, tg, 500*time.Millisecond, nil)
			if err != nil {
				t.Fatalf("Run() = %v", err)
			}
			if tt.linkDown {
				// Probes the kernel refuses are lost at once.
				checkLost(t, got, 20, 0)
			} else {
				checkLost(t, got, 20, deadline)
			}
			if s := tg.Stats(); s.Lost < uint64(len(got)) || s.Answered != 0 || s.Method != Echo {
				t.Errorf("Stats() = %+v, want at least %d lost, none answered", s, len(got))
			}
		})
	}
}

// checkBounded runs tg, made for interval and deadline, against a
// blackholed reflector for d and checks that the probes held never exceed
// one deadline's worth and a little; extra checks more on each watch.
func checkBounded(t *testing.T, l *probeLab, tg Target, w *window, mu *sync.Mutex, interval, deadline, d time.Duration, extra func()) {
	t.Helper()
	l.blackhole(t)
	maxHeld := 0
	got, err := l.run(t, tg, d, func() {
		mu.Lock()
		maxHeld = max(maxHeld, w.held())
		mu.Unlock()
		if extra != nil {
			extra()
		}
	})
	if err != nil {
		t.Fatalf("Run() = %v", err)
	}
	// The window's capacity (deadline/interval + windowSlack) bounds what it
	// holds however long the target runs and whatever it loses: one
	// deadline's worth and the probes sent while the report of the oldest
	// lags (a few under load, reported here; a bound on them would time the
	// scheduler, and one run of the race-enabled suite held 59 at a 1 ms
	// interval and a 50 ms deadline). Nor may the ring grow past it.
	bound := windowCap(interval, deadline)
	t.Logf("%d probes, %d reported lost, at most %d held (one deadline: %d, capacity %d)",
		tg.Stats().Sent, len(got), maxHeld, int(deadline/interval), bound)
	if maxHeld > bound || len(w.ring) != bound {
		t.Errorf("held up to %d probes in a ring of %d, want at most the window's capacity %d", maxHeld, len(w.ring), bound)
	}
	if min := int(d / interval / 2); len(got) < min {
		t.Errorf("got %d results, want at least %d", len(got), min)
	}
	for i, r := range got {
		if r.Seq != i || !r.Lost {
			t.Fatalf("result %d: %+v, want probe %d lost", i, r.Result, i)
		}
	}
}

func TestEchoMemoryBounded(t *testing.T) {
	l := newProbeLab(t)
	const interval, deadline = time.Millisecond, 50 * time.Millisecond
	tg := newLabTarget(t, l.v4, Echo, interval, deadline)
	e := tg.(*echoTarget)
	checkBounded(t, l, tg, e.w, &e.mu, interval, deadline, 3*time.Second, nil)
}

// A forgedReflector answers the echo requests that reach the reflector
// namespace itself (its kernel's answers are turned off), twice: first a
// forged copy from another address of that namespace, with the right
// identifier, sequence number and payload, then the genuine answer.
type forgedReflector struct {
	genuine, forger *icmp.PacketConn
	v6              bool
	// forged counts the forged copies sent.
	forged atomic.Int64
}

// newForgedReflector opens its sockets in the reflector namespace: the
// genuine answers come from addr, the forged ones from forgedFrom, which it
// adds to the reflector's link.
func newForgedReflector(tb testing.TB, l *probeLab, addr, forgedFrom netip.Addr) *forgedReflector {
	tb.Helper()
	f := &forgedReflector{v6: addr.Is6()}
	network, prefix := "ip4:icmp", "/24"
	if f.v6 {
		network, prefix = "ip6:ipv6-icmp", "/64"
		labCmd(tb, "ip", "netns", "exec", l.reflector, "sysctl", "-q", "-w", "net.ipv6.icmp.echo_ignore_all=1")
		labCmd(tb, "ip", "-n", l.reflector, "addr", "add", forgedFrom.String()+prefix, "dev", labReflectorDev, "nodad")
	} else {
		labCmd(tb, "ip", "netns", "exec", l.reflector, "sysctl", "-q", "-w", "net.ipv4.icmp_echo_ignore_all=1")
		labCmd(tb, "ip", "-n", l.reflector, "addr", "add", forgedFrom.String()+prefix, "dev", labReflectorDev)
	}
	ns, err := netns.GetFromName(l.reflector)
	if err != nil {
		tb.Fatal(err)
	}
	defer ns.Close()
	errc := make(chan error, 1)
	go func() {
		// The thread ends with this goroutine, in the reflector namespace.
		runtime.LockOSThread()
		if err := netns.Set(ns); err != nil {
			errc <- err
			return
		}
		if f.genuine, err = icmp.ListenPacket(network, addr.String()); err != nil {
			errc <- err
			return
		}
		f.forger, err = icmp.ListenPacket(network, forgedFrom.String())
		errc <- err
	}()
	if err := <-errc; err != nil {
		tb.Fatalf("failed to open the reflector's sockets: %v", err)
	}
	tb.Cleanup(func() {
		f.genuine.Close()
		f.forger.Close()
	})
	go f.serve()
	return f
}

// serve answers every echo request until the sockets are closed.
func (f *forgedReflector) serve() {
	proto, reply := 1, icmp.Type(ipv4.ICMPTypeEchoReply)
	if f.v6 {
		proto, reply = 58, ipv6.ICMPTypeEchoReply
	}
	buf := make([]byte, 1500)
	for {
		n, from, err := f.genuine.ReadFrom(buf)
		if err != nil {
			return
		}
		m, err := icmp.ParseMessage(proto, buf[:n])
		if err != nil || (m.Type != ipv4.ICMPTypeEcho && m.Type != ipv6.ICMPTypeEchoRequest) {
			continue
		}
		b, err := (&icmp.Message{Type: reply, Body: m.Body}).Marshal(nil)
		if err != nil {
			continue
		}
		if _, err := f.forger.WriteTo(b, from); err == nil {
			f.forged.Add(1)
		}
		f.genuine.WriteTo(b, from)
	}
}

// A forged copy of a reply from another address, arriving before the
// genuine one with the right identifier, sequence number and payload, is a
// stray: the genuine reply still counts. (On a raw IPv4 socket the kernel's
// filter drops the copy before it is read.)
func TestEchoIgnoresForgedReply(t *testing.T) {
	tests := []struct {
		name       string
		v6         bool
		datagram   bool
		forgedFrom string
		// wantStray: the copies reach the target, which counts them.
		wantStray bool
	}{
		{name: "IPv4", forgedFrom: "10.77.0.3"},
		{name: "IPv6", v6: true, forgedFrom: "fd77::3", wantStray: true},
		{name: "IPv4 datagram socket", datagram: true, forgedFrom: "10.77.0.3", wantStray: true},
		{name: "IPv6 datagram socket", v6: true, datagram: true, forgedFrom: "fd77::3", wantStray: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newProbeLab(t)
			addr := l.v4
			if tt.v6 {
				addr = l.v6
			}
			f := newForgedReflector(t, l, addr, netip.MustParseAddr(tt.forgedFrom))
			opts := TargetOptions{Logger: labLogger(t)}
			if tt.datagram {
				labCmd(t, "ip", "netns", "exec", l.router, "sysctl", "-q", "-w", "net.ipv4.ping_group_range=0 2147483647")
				opts.EchoSocket = EchoSocketDatagram
			}
			tg, err := NewTargetFactory(opts)(addr, Echo, 10*time.Millisecond, 500*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			got, err := l.run(t, tg, 1500*time.Millisecond, nil)
			if err != nil {
				t.Fatalf("Run() = %v", err)
			}
			if f.forged.Load() == 0 {
				t.Fatal("no forged reply was sent")
			}
			checkAnswered(t, got, 20, []estimator.Kind{estimator.RTT}, 0, 100*time.Millisecond)
			if s := tg.Stats(); (tt.wantStray && s.Stray == 0) || s.Duplicates != 0 || s.Lost > 3 {
				t.Errorf("Stats() = %+v, want no duplicates, at most 3 lost at the start (and the forged replies counted as strays: %v)", s, tt.wantStray)
			}
		})
	}
}
