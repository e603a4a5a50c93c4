package estimator

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"

	probing "github.com/prometheus-community/pro-bing"
	"github.com/vishvananda/netns"
	"go.uber.org/zap"
)

// ICMP echo probes through pro-bing, IPv4 and IPv6.
//
// Memory. A pro-bing Pinger remembers every sequence number it sent and has
// not had answered (awaitingSequences, one map per 65 536 probes, and a
// tracker UUID per map; see pro-bing PR #162): under total loss it grows for
// as long as it runs. So a target runs its pingers in batches of echoBatch
// probes (more when one deadline spans more probes): each Pinger sends its
// batch, the next Pinger takes over one interval after the last send, and
// the old one is stopped once the last probe's deadline (plus a quarter)
// has passed, which drops all its state. Since a batch spans more than a
// deadline, at most two pingers live at once, each remembering at most one
// batch (a map of 1024 ints, some 40 KB at worst); a handover costs a
// socket, once every 1024 probes. The target's own bookkeeping is its
// window (target.go). RecordRtts and RecordTTLs are off.
//
// Matching. pro-bing passes a reply on only when it carries the pinger's
// identifier (a BPF filter on raw sockets; the kernel on datagram sockets),
// the pinger's random UUID in the payload and a sequence number still
// awaited; a repeated one goes to OnDuplicateRecv. It does not check the
// source address (it allows for broadcast pings): the target does, and
// counts a reply from elsewhere as stray. Replies with a foreign identifier
// or UUID never reach the target and are not counted. pro-bing keeps
// awaiting a lost probe's sequence number, so a late answer reaches OnRecv:
// the target's window knows it is late. Round trips are timed by the
// target on the monotonic clock (see onRecv), not taken from pro-bing.
//
// Sockets and namespaces. pro-bing opens its socket inside Run, on the
// calling goroutine. Each Pinger runs on its own goroutine, locked to its
// thread and moved into the network namespace of the thread that called
// the target's Run until the socket is open (OnSetup), so a target started
// from a thread in another namespace probes from there.
//
// Logging. pro-bing's Logger.Fatalf does not mean fatal: pro-bing calls it
// for a failed send or a malformed packet and carries on. The adapter
// (probingLogger) logs Fatalf and Errorf at debug level and returns; the
// target logs send failures itself, once per outage.

// echoBatch is how many probes a Pinger sends before the next one takes
// over.
const echoBatch = 1024

// echoPrivileged decides whether echo probes to addr use a raw socket, by
// kind: for EchoSocketAuto, a raw socket where one can be opened in the
// network namespace of the calling thread, else a datagram socket where one
// can be opened.
func echoPrivileged(addr netip.Addr, kind EchoSocket) (bool, error) {
	raw, dgram := "ip4:icmp", "udp4"
	if !addr.Is4() {
		raw, dgram = "ip6:ipv6-icmp", "udp6"
	}
	switch kind {
	case EchoSocketRaw:
		return true, nil
	case EchoSocketDatagram:
		return false, nil
	case EchoSocketAuto:
	default:
		return false, fmt.Errorf("reflector %s: unknown echo socket kind %d", addr, int(kind))
	}
	rawErr := canListen(raw)
	if rawErr == nil {
		return true, nil
	}
	if !errors.Is(rawErr, os.ErrPermission) {
		return false, fmt.Errorf("reflector %s: failed to open a raw icmp socket: %w", addr, rawErr)
	}
	if err := canListen(dgram); err != nil {
		return false, fmt.Errorf("reflector %s: raw icmp sockets need CAP_NET_RAW (%v) and icmp datagram sockets a group in net.ipv4.ping_group_range: %w", addr, rawErr, err)
	}
	return false, nil
}

// An echoTarget probes one reflector with ICMP or ICMPv6 echo requests.
type echoTarget struct {
	addr       netip.Addr
	interval   time.Duration
	deadline   time.Duration
	privileged bool
	// batch is how many probes a Pinger sends.
	batch int
	log   *zap.Logger
	now   func() time.Time

	mu sync.Mutex
	// room is signalled when probes leave the window or the target stops.
	room    *sync.Cond
	w       *window
	running bool
	// stopped tells the hooks of pingers still running, when Run returns,
	// to drop what they see: the probes sent then are not recorded.
	stopped bool
	failing bool
	// live counts the pingers running.
	live int
	rep  *reporter
}

var _ Target = (*echoTarget)(nil)

// newEchoTarget returns a target that probes addr with echo every
// interval, each answer awaited up to deadline, through a raw socket if
// privileged and a datagram socket if not.
func newEchoTarget(addr netip.Addr, interval, deadline time.Duration, privileged bool, log *zap.Logger) *echoTarget {
	e := &echoTarget{
		addr:       addr,
		interval:   interval,
		deadline:   deadline,
		privileged: privileged,
		batch:      max(echoBatch, windowCap(interval, deadline)),
		log:        log,
		now:        time.Now,
		w:          newWindow(addr, interval, deadline),
	}
	e.room = sync.NewCond(&e.mu)
	return e
}

// Stats returns the target's counters.
func (e *echoTarget) Stats() TargetStats {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.w.stats
	s.Method = Echo
	return s
}

// Run probes until ctx ends. Its pingers open their sockets in the network
// namespace of the calling thread. It returns an error only when the first
// socket cannot be opened; a send the kernel refuses makes a lost probe.
// When ctx ends, it stops its pingers and reports the fates known then;
// probes still awaiting an answer get no Result.
func (e *echoTarget) Run(ctx context.Context, sink func(Result)) error {
	e.mu.Lock()
	if e.running {
		e.mu.Unlock()
		return fmt.Errorf("echo target for reflector %s is already running", e.addr)
	}
	e.running, e.stopped = true, false
	rep := newReporter(&e.mu, e.w, e.now)
	rep.room = e.room
	e.rep = rep
	e.mu.Unlock()

	ns, err := netns.Get()
	if err != nil {
		// No namespaces here (not Linux): the pingers' threads are where
		// this one is.
		ns = netns.None()
	}
	defer ns.Close()

	ctx, cancel := context.WithCancel(ctx)
	var pingers sync.WaitGroup
	batchErr := make(chan error, 1)
	pingers.Add(1)
	go func() {
		defer pingers.Done()
		batchErr <- e.batches(ctx, ns, &pingers)
	}()
	defer func() {
		cancel()
		e.mu.Lock()
		e.stopped = true
		e.room.Broadcast()
		e.mu.Unlock()
		pingers.Wait()
		rep.timer.Stop()
		// The fates known by now are reported; those of the probes still
		// awaiting an answer never will be.
		rep.report(sink, false)
		e.mu.Lock()
		e.w.reset()
		e.running = false
		e.mu.Unlock()
	}()

	for {
		select {
		case <-ctx.Done():
			return nil
		case <-rep.wakeup:
			rep.report(sink, false)
		case <-rep.timer.C:
			rep.report(sink, false)
		case err := <-batchErr:
			if err != nil {
				return err
			}
		}
	}
}

// An echoRun is one Pinger's share of the probes.
type echoRun struct {
	gen   uint64
	count int
	// sent counts the probes this pinger sent; last is when the last of its
	// count probes left, and done is closed then. Guarded by the target's mu.
	sent int
	last time.Time
	done chan struct{}
}

// tag is the window tag of this pinger's probe with sequence number seq:
// it grows with the target's sequence numbers.
func (r *echoRun) tag(seq int) uint64 { return r.gen<<16 | uint64(uint16(seq)) }

// batches runs one Pinger after the other until ctx ends. It returns an
// error only when the first Pinger cannot open its socket.
func (e *echoTarget) batches(ctx context.Context, ns netns.NsHandle, pingers *sync.WaitGroup) error {
	opened := false
	for gen := uint64(0); ; gen++ {
		run := &echoRun{gen: gen, count: e.batch, done: make(chan struct{})}
		p := e.newPinger(run)
		pctx, stop := context.WithCancel(ctx)
		setup := make(chan struct{})
		exited := make(chan error, 1)
		e.mu.Lock()
		e.live++
		e.mu.Unlock()
		pingers.Add(1)
		go func() {
			defer pingers.Done()
			defer stop()
			err := e.runPinger(pctx, p, ns, setup)
			e.mu.Lock()
			e.live--
			e.mu.Unlock()
			exited <- err
		}()

		var next time.Time
		select {
		case <-ctx.Done():
			return nil
		case <-run.done:
			opened = true
			// Let the pinger take the answers to its last probes, then
			// drop it and all it remembers.
			time.AfterFunc(e.deadline+e.deadline/4, stop)
			e.mu.Lock()
			next = run.last.Add(e.interval)
			e.mu.Unlock()
		case err := <-exited:
			if ctx.Err() != nil {
				return nil
			}
			select {
			case <-setup:
				// It stopped before sending its batch: the failed send that
				// ended it (if any) is already a lost probe.
				opened = true
				if err != nil {
					e.log.Debug("echo pinger stopped", zap.Error(err))
				}
			default:
				if !opened {
					return fmt.Errorf("failed to open echo socket for reflector %s: %w", e.addr, err)
				}
				e.mu.Lock()
				if e.waitRoom() {
					e.w.addUnsent(e.now(), run.tag(0))
					e.sendFailed(err)
				}
				e.mu.Unlock()
				e.rep.wake()
			}
			next = e.now().Add(e.interval)
		}
		if !sleepUntil(ctx, next) {
			return nil
		}
	}
}

// sleepUntil waits until t or the end of ctx, and reports whether t came.
func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// newPinger returns a Pinger for one batch of probes, its hooks feeding
// the target's window.
func (e *echoTarget) newPinger(run *echoRun) *probing.Pinger {
	p := probing.New(e.addr.String())
	p.SetIPAddr(&net.IPAddr{IP: e.addr.AsSlice(), Zone: e.addr.Zone()})
	p.SetPrivileged(e.privileged)
	p.SetID(int(rand.Uint32N(1 << 16)))
	p.SetLogger(probingLogger{e.log.Sugar()})
	p.Interval = e.interval
	p.Count = run.count
	p.RecordRtts = false
	p.RecordTTLs = false
	p.OnSend = func(pkt *probing.Packet) { e.onSend(run, pkt) }
	p.OnSendError = func(pkt *probing.Packet, err error) { e.onSendError(run, pkt, err) }
	p.OnRecv = func(pkt *probing.Packet) { e.onRecv(run, pkt) }
	p.OnDuplicateRecv = func(*probing.Packet) {
		e.mu.Lock()
		if !e.stopped {
			e.w.stats.Duplicates++
		}
		e.mu.Unlock()
	}
	return p
}

// runPinger runs p on a thread in ns until its socket is open, then
// anywhere, until it stops; setup is closed once the socket is open.
func (e *echoTarget) runPinger(ctx context.Context, p *probing.Pinger, ns netns.NsHandle, setup chan struct{}) error {
	leave, err := enterNS(ns)
	if err != nil {
		return fmt.Errorf("failed to enter the network namespace of the caller: %w", err)
	}
	left := false
	p.OnSetup = func() {
		leave()
		left = true
		close(setup)
	}
	err = p.RunWithContext(ctx)
	if !left {
		leave()
	}
	return err
}

// enterNS locks the calling goroutine to its thread and moves the thread
// into ns (unless it is there, or ns is not open). leave moves it back and
// unlocks it; a thread that cannot move back stays locked, and the runtime
// ends it with its goroutine.
func enterNS(ns netns.NsHandle) (leave func(), err error) {
	if !ns.IsOpen() {
		return func() {}, nil
	}
	runtime.LockOSThread()
	cur, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	if cur.Equal(ns) {
		cur.Close()
		return runtime.UnlockOSThread, nil
	}
	if err := netns.Set(ns); err != nil {
		cur.Close()
		runtime.UnlockOSThread()
		return nil, err
	}
	return func() {
		defer cur.Close()
		if netns.Set(cur) == nil {
			runtime.UnlockOSThread()
		}
	}, nil
}

// waitRoom waits, with e.mu held, until the window has room for a probe,
// and reports false if the target stopped meanwhile. The wait is short:
// the window holds one deadline's worth of probes and some slack, and Run's
// goroutine reports the oldest once its deadline has passed.
func (e *echoTarget) waitRoom() bool {
	for e.w.full() && !e.stopped {
		e.room.Wait()
	}
	return !e.stopped
}

// onSend records a probe that a pinger of run sent.
func (e *echoTarget) onSend(run *echoRun, pkt *probing.Packet) {
	now := e.now()
	e.mu.Lock()
	if !e.waitRoom() {
		e.mu.Unlock()
		return
	}
	e.w.add(now, run.tag(pkt.Seq))
	if e.failing {
		e.log.Info("echo requests are sent again")
		e.failing = false
	}
	run.sent++
	if run.sent == run.count {
		run.last = now
		close(run.done)
	}
	e.mu.Unlock()
	e.rep.wake()
}

// onSendError records a probe that a pinger of run could not send.
func (e *echoTarget) onSendError(run *echoRun, pkt *probing.Packet, err error) {
	if probingRetries(err) {
		// pro-bing sends this one again.
		return
	}
	now := e.now()
	e.mu.Lock()
	if e.waitRoom() {
		e.w.addUnsent(now, run.tag(pkt.Seq))
		e.sendFailed(err)
	}
	e.mu.Unlock()
	e.rep.wake()
}

// sendFailed logs the first of a run of failed sends; e.mu is held.
func (e *echoTarget) sendFailed(err error) {
	if !e.failing {
		e.log.Warn("failed to send echo request; probes count as lost until sends work", zap.Error(err))
	}
	e.failing = true
}

// probingRetries reports whether pro-bing sends a probe again after err,
// by its own test.
func probingRetries(err error) bool {
	neterr, ok := err.(*net.OpError)
	return ok && neterr.Err == syscall.ENOBUFS
}

// onRecv matches a reply that a pinger of run took (its identifier, UUID
// and sequence checked) with the probes remembered.
//
// The round trip is measured on the monotonic clock, from onSend to
// onRecv, not taken from pkt.Rtt: pro-bing computes that from wall-clock
// times (one of them carried in the payload), so it jumps by however much
// the clock is stepped meanwhile (NTP at boot, on a router without a
// real-time clock, steps it by years), and nothing checks the payload on a
// raw socket. The hooks run right after the send and right after the
// receive, so the two differ by microseconds otherwise.
func (e *echoTarget) onRecv(run *echoRun, pkt *probing.Packet) {
	now := e.now()
	var from netip.Addr
	if pkt.IPAddr != nil {
		from, _ = netip.AddrFromSlice(pkt.IPAddr.IP)
	}
	e.mu.Lock()
	defer e.rep.wake()
	defer e.mu.Unlock()
	if e.stopped {
		// Run has returned: what its pingers send or see is not counted.
		return
	}
	if from.Unmap() != e.addr.WithZone("") {
		e.w.stats.Stray++
		return
	}
	_, p := e.w.findTag(run.tag(pkt.Seq))
	if p == nil {
		// pro-bing found our UUID in it: an answer to a probe reported
		// long ago.
		e.w.stats.Late++
		return
	}
	rtt := now.Sub(p.sent)
	if e.w.accept(p, rtt) {
		e.w.addSample(p, RTT, rtt)
	}
}

// probingLogger passes pro-bing's messages to zap. It never exits: pro-bing
// calls Fatalf for a failed send or a malformed packet and carries on, and
// so does the target, which logs failed sends itself.
type probingLogger struct{ l *zap.SugaredLogger }

var _ probing.Logger = probingLogger{}

// Fatalf logs at debug level and returns.
func (l probingLogger) Fatalf(format string, v ...any) { l.l.Debugf("pro-bing: "+format, v...) }

// Errorf logs at debug level.
func (l probingLogger) Errorf(format string, v ...any) { l.l.Debugf("pro-bing: "+format, v...) }

// Warnf logs at warn level.
func (l probingLogger) Warnf(format string, v ...any) { l.l.Warnf("pro-bing: "+format, v...) }

// Infof logs at info level.
func (l probingLogger) Infof(format string, v ...any) { l.l.Infof("pro-bing: "+format, v...) }

// Debugf logs at debug level.
func (l probingLogger) Debugf(format string, v ...any) { l.l.Debugf("pro-bing: "+format, v...) }
