package probe

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/autoshape/autoshape/estimator"
	"go.uber.org/zap"
	"golang.org/x/net/icmp"
)

// Probe targets: the factory, the Auto fallback, and the bookkeeping that
// both socket targets (echo.go, timestamp.go) share.
//
// Every target keeps the probes whose fate it has not yet reported in a
// window: a ring in send order whose capacity is fixed when the target is
// made, deadline/interval + windowSlack probes. A probe leaves the window
// when it and every older probe are answered or past their deadline, so the
// window never holds more than the probes of one deadline plus the slack,
// whatever the loss and however long the target runs.
//
// Counters: Sent counts the probes tried, those the kernel refused to send
// included; a refused probe is lost at once (its Result comes without
// waiting for the deadline). Sent = Answered + Lost + the probes in flight
// (or given up when Run ended).
// Results are numbered (Result.Seq) from 0 in send order, per target; the
// 16-bit sequence numbers on the wire are the low bits.

// Defaults and bounds for targets.
const (
	// DefaultAutoMisses is how many timestamp probes in a row the Auto method
	// lets go unanswered, none ever having been answered, before it probes
	// that reflector with echo for good.
	DefaultAutoMisses = 5
	// MaxProbesInFlight bounds deadline/interval: a target refuses a deadline
	// of more probe intervals than this.
	MaxProbesInFlight = 1 << 14

	// windowSlack is how many probes a window holds beyond one deadline's
	// worth: room for the time between a probe's deadline and the report of
	// its fate.
	windowSlack = 16
)

// An EchoSocket is the kind of socket that echo probes use.
type EchoSocket int

// Echo socket kinds.
const (
	// EchoSocketAuto uses a raw socket where the process may open one
	// (CAP_NET_RAW) and a datagram ("ping") socket otherwise. The choice is
	// made once, when the target is made, in the network namespace of the
	// calling thread.
	EchoSocketAuto EchoSocket = iota
	// EchoSocketRaw uses a raw ICMP socket (needs CAP_NET_RAW). The kernel
	// passes it only the echo replies that carry its identifier (a BPF
	// filter), and for IPv4 only those from the reflector.
	EchoSocketRaw
	// EchoSocketDatagram uses an unprivileged ICMP datagram socket. The
	// kernel allows it only to the groups in net.ipv4.ping_group_range (for
	// IPv6 too), which is "1 0" (nobody) by default; it picks the
	// identifier itself and passes the socket only its own replies.
	EchoSocketDatagram
)

// TargetOptions tune the targets that a factory from NewTargetFactory makes.
// The zero value is what NewTarget uses.
type TargetOptions struct {
	// Logger receives socket errors (once per outage, and their end); nil
	// means no logging.
	Logger *zap.Logger
	// EchoSocket chooses the kind of socket for echo probes.
	EchoSocket EchoSocket
	// AutoMisses is how many timestamp probes in a row the Auto method lets
	// go unanswered before it falls back to echo; 0 means DefaultAutoMisses.
	AutoMisses int
	// Device is the network interface the probes go out of and their
	// answers come in on (SO_BINDTODEVICE, Linux only), whatever the
	// routes say; "" leaves the sockets unbound. A link-local reflector
	// needs no zone then; one with a zone must name this device.
	Device string
	// Pacer polls the targets (see Pacer); nil means that each target
	// polls itself every 10 ms.
	Pacer *Pacer
}

// NewTarget makes a Target for addr with the zero TargetOptions: echo
// through a raw socket where allowed, no logging. It is a TargetFactory.
//
// Echo probes addr with ICMP or ICMPv6 echo requests. Timestamp probes it
// with ICMP timestamp requests and needs an IPv4 address and a raw socket.
// Auto uses timestamps for IPv4 reflectors where raw sockets are allowed and
// falls back to echo for good once DefaultAutoMisses timestamp probes in a
// row have gone unanswered with none ever answered; it uses echo for IPv6.
func NewTarget(addr netip.Addr, method Method, interval, deadline time.Duration) (Target, error) {
	return NewTargetFactory(TargetOptions{})(addr, method, interval, deadline)
}

var _ TargetFactory = NewTarget

// NewTargetFactory returns a TargetFactory that makes targets as NewTarget
// does, tuned by opts.
func NewTargetFactory(opts TargetOptions) TargetFactory {
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	misses := opts.AutoMisses
	if misses <= 0 {
		misses = DefaultAutoMisses
	}
	return func(addr netip.Addr, method Method, interval, deadline time.Duration) (Target, error) {
		if !addr.IsValid() {
			return nil, errors.New("invalid reflector address")
		}
		addr = addr.Unmap()
		if err := checkTiming(interval, deadline); err != nil {
			return nil, fmt.Errorf("reflector %s: %w", addr, err)
		}
		if z := addr.Zone(); z != "" && opts.Device != "" && z != opts.Device {
			return nil, fmt.Errorf("reflector %s: its zone is not %s, the device its probes are bound to", addr, opts.Device)
		}
		log := log.With(zap.String("reflector", addr.String()))
		echo := func() (Target, error) {
			privileged, err := echoPrivileged(addr, opts.EchoSocket)
			if err != nil {
				return nil, err
			}
			return newEchoTarget(addr, interval, deadline, privileged, opts.Device, opts.Pacer, log.With(zap.String("method", "echo"))), nil
		}
		timestamp := func() (*timestampTarget, error) {
			if !addr.Is4() {
				return nil, fmt.Errorf("reflector %s: icmp timestamps need an IPv4 address", addr)
			}
			if err := canListen("ip4:icmp"); err != nil {
				return nil, fmt.Errorf("reflector %s: icmp timestamps need a raw socket: %w", addr, err)
			}
			return newTimestampTarget(addr, interval, deadline, opts.Device, opts.Pacer, log.With(zap.String("method", "timestamp"))), nil
		}
		switch method {
		case Echo:
			return echo()
		case Timestamp:
			return timestamp()
		case Auto:
			e, err := echo()
			if err != nil {
				return nil, err
			}
			if !addr.Is4() {
				return e, nil
			}
			t, err := timestamp()
			if errors.Is(err, os.ErrPermission) {
				// No raw sockets here: echo runs on a datagram socket.
				return e, nil
			}
			if err != nil {
				return nil, err
			}
			return newFallbackTarget(t, func() (Target, error) { return e, nil }, misses), nil
		}
		return nil, fmt.Errorf("reflector %s: unknown probe method %v", addr, method)
	}
}

// checkTiming validates a target's interval and deadline.
func checkTiming(interval, deadline time.Duration) error {
	switch {
	case interval <= 0:
		return fmt.Errorf("probe interval %v is not positive", interval)
	case deadline <= 0:
		return fmt.Errorf("probe deadline %v is not positive", deadline)
	case deadline/interval >= MaxProbesInFlight:
		return fmt.Errorf("probe deadline %v is %d or more intervals of %v", deadline, MaxProbesInFlight, interval)
	}
	return nil
}

// canListen opens and closes an ICMP socket of network ("ip4:icmp",
// "udp6", ...), to learn whether this process may open one in the network
// namespace of the calling thread.
func canListen(network string) error {
	c, err := icmp.ListenPacket(network, "")
	if err != nil {
		return err
	}
	return c.Close()
}

// A fallbackTarget runs its first target until that target has missed
// misses probes in a row without ever having been answered, then runs the
// target that then makes, for good. It is how Auto leaves timestamps for
// echo: reflectors behind CGNAT or Starlink never answer timestamps, while
// one that answered once and then falls silent is more likely down, and
// stays on timestamps.
//
// The first target's probes still in flight when it is stopped get no
// Result; the second target's sequence numbers follow the first's.
type fallbackTarget struct {
	then   func() (Target, error)
	misses int

	mu       sync.Mutex
	cur      Target
	switched bool
	// before holds the first target's counters once it has been left.
	before TargetStats
	// seqBase is added to the sequence numbers of the second target.
	seqBase int
}

// newFallbackTarget returns a target that runs first, and the target that
// then makes once first has missed misses probes in a row with none ever
// answered.
func newFallbackTarget(first Target, then func() (Target, error), misses int) *fallbackTarget {
	return &fallbackTarget{cur: first, then: then, misses: misses}
}

// Run runs the current target until ctx ends, switching to the second
// target when the first has failed.
func (f *fallbackTarget) Run(ctx context.Context, sink func(Result)) error {
	f.mu.Lock()
	cur, switched, base := f.cur, f.switched, f.seqBase
	f.mu.Unlock()
	if switched {
		return cur.Run(ctx, offsetSeq(sink, base))
	}

	firstCtx, stop := context.WithCancel(ctx)
	defer stop()
	missed, answered, giveUp := 0, false, false
	err := cur.Run(firstCtx, func(r Result) {
		if giveUp {
			return
		}
		if r.Lost {
			missed++
		} else {
			answered, missed = true, 0
		}
		sink(r)
		if !answered && missed >= f.misses {
			giveUp = true
			stop()
		}
	})
	if !giveUp || ctx.Err() != nil {
		return err
	}

	next, err := f.then()
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.before = cur.Stats()
	f.seqBase = int(f.before.Sent)
	f.cur, f.switched = next, true
	base = f.seqBase
	f.mu.Unlock()
	return next.Run(ctx, offsetSeq(sink, base))
}

// offsetSeq returns a sink that adds base to the sequence numbers of the
// results it passes to sink.
func offsetSeq(sink func(Result), base int) func(Result) {
	return func(r Result) {
		r.Seq += base
		sink(r)
	}
}

// Stats returns the counters of both targets together, and the method in
// use now.
func (f *fallbackTarget) Stats() TargetStats {
	f.mu.Lock()
	cur, before := f.cur, f.before
	f.mu.Unlock()
	s := cur.Stats()
	s.Sent += before.Sent
	s.Answered += before.Answered
	s.Lost += before.Lost
	s.Late += before.Late
	s.Duplicates += before.Duplicates
	s.Stray += before.Stray
	s.Inconsistent += before.Inconsistent
	return s
}

// probeState is the fate of a probe in a window.
type probeState uint8

// Probe states.
const (
	awaiting probeState = iota
	answered
	lost
)

// A probe is a window's record of one probe.
type probe struct {
	sent time.Time
	// tag is what, besides the sequence number, identifies the answer:
	// the originate timestamp for timestamps, a random payload for echo.
	tag   uint64
	state probeState
	// unsent marks a probe the kernel refused to send.
	unsent bool
	// inconsistent marks an answer that contradicted itself.
	inconsistent bool
	n            int
	samples      [2]estimator.Sample
}

// A window remembers a target's latest probes in a ring of fixed capacity,
// indexed by sequence number: the probes whose fate is not yet reported, in
// send order, and as many reported ones as the rest of the ring holds (so
// that a second answer to a reported probe still counts as a duplicate, not
// a stray). It keeps the target's counters. It does no locking and reads no
// clock: its owner does both.
type window struct {
	addr      netip.Addr
	reflector string
	deadline  time.Duration
	ring      []probe
	// first is the sequence number of the oldest probe whose fate is not
	// reported; next is the sequence number of the next probe.
	first, next int
	stats       TargetStats
}

// newWindow returns an empty window for probes sent to addr every interval,
// each waiting up to deadline for an answer.
func newWindow(addr netip.Addr, interval, deadline time.Duration) *window {
	return &window{
		addr:      addr,
		reflector: addr.String(),
		deadline:  deadline,
		ring:      make([]probe, windowCap(interval, deadline)),
	}
}

// windowCap is the capacity of a window for probes sent every interval,
// each waiting up to deadline.
func windowCap(interval, deadline time.Duration) int {
	return int((deadline+interval-1)/interval) + windowSlack
}

// held is how many probes await the report of their fate.
func (w *window) held() int { return w.next - w.first }

// expecting reports whether some probe still awaits its answer.
func (w *window) expecting() bool {
	for seq := w.first; seq < w.next; seq++ {
		if w.lookup(seq).state == awaiting {
			return true
		}
	}
	return false
}

// full reports whether the window has no room for another probe.
func (w *window) full() bool { return w.held() == len(w.ring) }

// oldest is the sequence number of the oldest probe remembered.
func (w *window) oldest() int { return max(0, w.next-len(w.ring)) }

// lookup returns the record of the probe with sequence number seq, or nil
// when the window no longer (or not yet) remembers it.
func (w *window) lookup(seq int) *probe {
	if seq < w.oldest() || seq >= w.next {
		return nil
	}
	return &w.ring[seq%len(w.ring)]
}

// add records a probe sent at sent and returns its sequence number. The
// window must not be full.
func (w *window) add(sent time.Time, tag uint64) int {
	if w.full() {
		panic("estimator: probe window overflow")
	}
	seq := w.next
	w.ring[seq%len(w.ring)] = probe{sent: sent, tag: tag}
	w.next++
	w.stats.Sent++
	return seq
}

// unsent marks p, still awaiting, as refused by the kernel: lost.
func (w *window) unsent(p *probe) {
	p.unsent = true
	w.lose(p)
}

// lose marks p, still awaiting, as lost.
func (w *window) lose(p *probe) {
	p.state = lost
	w.stats.Lost++
}

// accept decides what an answer to p that came took after the probe means.
// It returns true when p was awaiting its answer and took is within the
// deadline: the caller then adds the samples. An answer to a probe already
// answered is counted as a duplicate, one after the deadline as late (the
// probe is lost, if it was not yet).
func (w *window) accept(p *probe, took time.Duration) bool {
	switch {
	case p.state == answered:
		w.stats.Duplicates++
		return false
	case p.state == lost:
		w.stats.Late++
		return false
	case took > w.deadline:
		w.lose(p)
		w.stats.Late++
		return false
	}
	p.state = answered
	w.stats.Answered++
	return true
}

// reject marks p, just accepted, as answered inconsistently: it gives no
// sample.
func (w *window) reject(p *probe) {
	p.inconsistent = true
	w.stats.Inconsistent++
}

// addSample adds a sample of kind and delay to p, just accepted.
func (w *window) addSample(p *probe, kind estimator.Kind, delay time.Duration) {
	p.samples[p.n] = estimator.Sample{Reflector: w.reflector, Kind: kind, Sent: p.sent, Delay: delay}
	p.n++
}

// expire marks the probes that have waited past their deadline at now as
// lost.
func (w *window) expire(now time.Time) {
	for seq := w.first; seq < w.next; seq++ {
		p := w.lookup(seq)
		if p.state != awaiting {
			continue
		}
		due := p.sent.Add(w.deadline)
		if due.After(now) {
			// Deadlines fall in send order: the later probes are not due.
			return
		}
		w.lose(p)
	}
}

// evictOldest marks the oldest probe not reported, if it still awaits, as
// lost, to make room when the reports lag behind the sending.
func (w *window) evictOldest() {
	if w.held() > 0 {
		if p := w.lookup(w.first); p.state == awaiting {
			w.lose(p)
		}
	}
}

// pop reports the oldest probes whose fate is known, up to the first that
// still awaits, appending their Results to dst.
func (w *window) pop(dst []Result) []Result {
	for ; w.first < w.next; w.first++ {
		p := w.lookup(w.first)
		if p.state == awaiting {
			break
		}
		dst = append(dst, Result{
			Reflector:    w.addr,
			Seq:          w.first,
			Sent:         p.sent,
			Lost:         p.state == lost,
			Inconsistent: p.inconsistent,
			Samples:      p.samples,
			N:            p.n,
		})
	}
	return dst
}

// reset gives up the probes not reported: their fate will not be, and an
// answer to one of them counts as late.
func (w *window) reset() {
	for ; w.first < w.next; w.first++ {
		if p := w.lookup(w.first); p.state == awaiting {
			p.state = lost
		}
	}
}

// A socketTarget is what the echo and timestamp targets share: the
// reflector, the window of its probes, the socket's life and the polls.
// The kind adds its requests and the matching of their replies.
type socketTarget struct {
	addr     netip.Addr
	interval time.Duration
	// device is what the socket is bound to; "" for none.
	device string
	pacer  *Pacer // nil: the target paces itself
	log    *zap.Logger
	now    func() time.Time
	// what names the requests in errors and logs.
	what string

	mu      sync.Mutex
	w       *window
	running bool
	// failing is set while sends fail, to log an outage once.
	failing bool
}

// newSocketTarget returns the shared part of a target that sends what
// requests to addr every interval, each answer awaited up to deadline,
// through a socket bound to device unless it is empty, polled by pacer (by
// itself if nil).
func newSocketTarget(what string, addr netip.Addr, interval, deadline time.Duration, device string, pacer *Pacer, log *zap.Logger) socketTarget {
	return socketTarget{addr: addr, interval: interval, device: device, pacer: pacer, log: log,
		now: time.Now, what: what, w: newWindow(addr, interval, deadline)}
}

// stats returns the target's counters, for method.
func (s *socketTarget) stats(method Method) TargetStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.w.stats
	st.Method = method
	return st
}

// run probes until ctx ends, polled by the target's Pacer (or every
// selfPace without one), through sock. prepare records a probe sent at
// now in the window and returns its sequence number and request; receive
// matches a reply b from from that arrived at arrival with the probes
// remembered; both run with mu held. run opens the socket in the network
// namespace of the calling thread and returns an error only when it
// cannot open it (a device to bind to that is missing is waited for) or
// cannot read from it; a send the kernel refuses makes a lost probe. When
// ctx ends, it reports the fates known then; probes still awaiting an
// answer get no Result.
func (s *socketTarget) run(ctx context.Context, sink func(Result), sock *probeSocket,
	prepare func(now time.Time) (int, []byte), receive func(b []byte, from netip.Addr, arrival time.Time)) error {
	s.mu.Lock()
	if s.running {
		s.mu.Unlock()
		return fmt.Errorf("%s target for reflector %s is already running", s.what, s.addr)
	}
	s.running = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.w.reset()
		s.running = false
		s.mu.Unlock()
	}()

	rep := newReporter(&s.mu, s.w, s.now)
	if err := sock.start(); err != nil && !sock.gone(err) {
		return fmt.Errorf("failed to open %s socket for reflector %s: %w", s.what, s.addr, err)
	}
	defer func() {
		sock.stop()
		// The fates known by now are reported; those of the probes still
		// awaiting an answer never will be.
		rep.report(sink, false)
	}()
	failed := make(chan error, 1)
	turn := turns{interval: s.interval, early: s.pacer.early(s.interval)}
	buf := make([]byte, 512)
	return pace(ctx, s.pacer, s.interval, failed, func() {
		if err := s.poll(sock, &turn, rep, buf, sink, prepare, receive); err != nil {
			select {
			case failed <- fmt.Errorf("failed to read %s replies from reflector %s: %w", s.what, s.addr, err):
			default:
			}
		}
	})
}

// poll reads the replies that came, sends a probe if one is due and
// reports the fates known. It returns the socket's read error.
func (s *socketTarget) poll(sock *probeSocket, turn *turns, rep *reporter, buf []byte, sink func(Result),
	prepare func(now time.Time) (int, []byte), receive func(b []byte, from netip.Addr, arrival time.Time)) error {
	now := s.now()
	s.mu.Lock()
	// With no probe awaiting its answer there is nothing to read but
	// strays, which can wait: a read is a system call.
	err := sock.read(buf, now, s.w.expecting, receive)
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if turn.due(now) {
		// What is known first, to make room.
		rep.report(sink, true)
		s.mu.Lock()
		seq, req := prepare(s.now())
		s.mu.Unlock()
		err := sock.write(req)
		s.mu.Lock()
		s.sent(seq, err)
		s.mu.Unlock()
	}
	rep.report(sink, false)
	return nil
}

// sent notes how the send of probe seq went; mu is held.
func (s *socketTarget) sent(seq int, err error) {
	if err != nil {
		if p := s.w.lookup(seq); p != nil && p.state == awaiting {
			s.w.unsent(p)
		}
		if !s.failing {
			s.log.Warn("failed to send "+s.what+" request; probes count as lost until sends work", zap.Error(err))
		}
		s.failing = true
		return
	}
	if s.failing {
		s.log.Info(s.what + " requests are sent again")
		s.failing = false
	}
}

// A reporter passes the fates a window knows on to a sink. Targets share
// it: their polls change the window under mu and then report.
type reporter struct {
	mu  *sync.Mutex
	w   *window
	now func() time.Time
	// out is reused from one report to the next.
	out []Result
}

// newReporter returns a reporter for w, guarded by mu.
func newReporter(mu *sync.Mutex, w *window, now func() time.Time) *reporter {
	return &reporter{mu: mu, w: w, now: now}
}

// report expires the probes past their deadline and hands the known fates
// to sink. With makeRoom, it also frees the oldest slot if the window is
// still full. It must be called from one goroutine at a time, without mu
// held.
func (r *reporter) report(sink func(Result), makeRoom bool) {
	r.mu.Lock()
	r.w.expire(r.now())
	if makeRoom && r.w.full() {
		r.w.evictOldest()
	}
	r.out = r.w.pop(r.out[:0])
	r.mu.Unlock()
	for _, res := range r.out {
		sink(res)
	}
}
