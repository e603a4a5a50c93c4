package probe

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/autoshape/autoshape/estimator"
	"go.uber.org/zap"
	"golang.org/x/net/bpf"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// ICMP echo probes, IPv4 and IPv6, on the project's own sockets.
//
// Matching. A reply counts only when it comes from the reflector's address
// and carries the target's identifier, the sequence number of a probe
// remembered and that probe's payload, a random 64-bit tag drawn per probe;
// anything else is a stray. The source is checked before anything is
// counted: a forged copy of a reply from elsewhere, right identifier,
// sequence and payload and all, arriving before the genuine one, is a
// stray, and the genuine reply still counts (matched first and checked
// after, it would have turned every genuine reply into a duplicate).
//
// Sockets. One socket per target, opened by Run in the network namespace
// of the calling thread, bound to the link's device if given (socket.go).
// On a raw socket (CAP_NET_RAW) the identifier is random and two kernel
// filters keep the socket's share to its own replies: ICMP_FILTER
// (ICMPv6: ICMP6_FILTER) passes only echo replies, a BPF program only our
// identifier, and, for IPv4, whose IP header it sees, only the reflector's
// source address. On a datagram ("ping") socket the
// kernel picks the identifier and passes the socket only replies that
// carry it; the source is checked here.
//
// Memory. The target's only bookkeeping is its window (target.go), of
// fixed capacity.
//
// Clocks. Round trips are timed on the monotonic clock, from just before
// the send to the read, so a step of the wall clock (NTP at boot, on a
// router without a real-time clock) never moves them: echo needs none of
// the timestamps' step handling.

// echoTagLen is the length of an echo probe's payload: its tag.
const echoTagLen = 8

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
	privileged bool
	// device is what the socket is bound to; "" for none.
	device string
	pacer  *Pacer // nil: the target paces itself
	log    *zap.Logger
	now    func() time.Time
	// id is the identifier of the requests: random on a raw socket; on a
	// datagram socket the kernel replaces it with its own, and checks it
	// on the replies itself.
	id uint16

	mu      sync.Mutex
	w       *window
	running bool
	// failing is set while sends fail, to log an outage once.
	failing bool

	// req is the request being sent, reused from poll to poll.
	req []byte
}

var _ Target = (*echoTarget)(nil)

// newEchoTarget returns a target that probes addr with echo every
// interval, each answer awaited up to deadline, through a raw socket if
// privileged and a datagram socket if not, bound to device unless it is
// empty, polled by pacer (by itself if nil).
func newEchoTarget(addr netip.Addr, interval, deadline time.Duration, privileged bool, device string, pacer *Pacer, log *zap.Logger) *echoTarget {
	return &echoTarget{
		addr:       addr,
		interval:   interval,
		privileged: privileged,
		device:     device,
		pacer:      pacer,
		log:        log,
		now:        time.Now,
		id:         uint16(rand.Uint32()),
		w:          newWindow(addr, interval, deadline),
	}
}

// Stats returns the target's counters.
func (e *echoTarget) Stats() TargetStats {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.w.stats
	s.Method = Echo
	return s
}

// Run probes until ctx ends, polled by the target's Pacer (or every
// selfPace without one). It opens its socket in the network namespace
// of the calling thread and returns an error only when it cannot open it
// (a device to bind to that is missing is waited for) or cannot read from
// it; a send the kernel refuses makes a lost probe.
// When ctx ends, it reports the fates known then; probes still awaiting an
// answer get no Result.
func (e *echoTarget) Run(ctx context.Context, sink func(Result)) error {
	e.mu.Lock()
	if e.running {
		e.mu.Unlock()
		return fmt.Errorf("echo target for reflector %s is already running", e.addr)
	}
	e.running = true
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.w.reset()
		e.running = false
		e.mu.Unlock()
	}()

	rep := newReporter(&e.mu, e.w, e.now)
	sock := newProbeSocket(e.device, e.addr, e.privileged && e.addr.Is4(),
		func() (net.PacketConn, error) { return listenEcho(e.addr, e.privileged, e.id, e.device) })
	if err := sock.start(); err != nil && !sock.gone(err) {
		return fmt.Errorf("failed to open echo socket for reflector %s: %w", e.addr, err)
	}
	defer func() {
		sock.stop()
		// The fates known by now are reported; those of the probes still
		// awaiting an answer never will be.
		rep.report(sink, false)
	}()
	failed := make(chan error, 1)
	turn := turns{interval: e.interval, early: e.pacer.early(e.interval)}
	buf := make([]byte, 512)
	return pace(ctx, e.pacer, e.interval, failed, func(time.Time) {
		if err := e.poll(sock, &turn, rep, buf, sink); err != nil {
			select {
			case failed <- fmt.Errorf("failed to read echo replies from reflector %s: %w", e.addr, err):
			default:
			}
		}
	})
}

// poll reads the replies that came, sends a probe if one is due and
// reports the fates known. It returns the socket's read error.
func (e *echoTarget) poll(sock *probeSocket, turn *turns, rep *reporter, buf []byte, sink func(Result)) error {
	now := e.now()
	e.mu.Lock()
	// With no probe awaiting its answer there is nothing to read but
	// strays, which can wait for the next one: a read is a system call.
	var err error
	if e.w.held() > 0 {
		err = sock.read(buf, now, e.receive)
	}
	e.mu.Unlock()
	if err != nil {
		return err
	}
	if turn.due(now) {
		// What is known first, to make room.
		rep.report(sink, true)
		e.mu.Lock()
		seq, req := e.prepare(e.now(), rand.Uint64())
		e.mu.Unlock()
		err := sock.write(req)
		e.mu.Lock()
		e.sent(seq, err)
		e.mu.Unlock()
	}
	rep.report(sink, false)
	return nil
}

// prepare records a probe sent at now with payload tag and returns its
// sequence number and request. The window must have room; e.mu is held.
func (e *echoTarget) prepare(now time.Time, tag uint64) (int, []byte) {
	seq := e.w.add(now, tag)
	typ := byte(ipv4.ICMPTypeEcho)
	if e.addr.Is6() {
		typ = byte(ipv6.ICMPTypeEchoRequest)
	}
	b := append(e.req[:0], typ, 0, 0, 0)
	b = binary.BigEndian.AppendUint16(b, e.id)
	b = binary.BigEndian.AppendUint16(b, uint16(seq))
	b = binary.BigEndian.AppendUint64(b, tag)
	// ICMPv6's checksum covers the IPv6 addresses: the kernel fills it in.
	if e.addr.Is4() {
		binary.BigEndian.PutUint16(b[2:], icmpChecksum(b))
	}
	e.req = b
	return seq, b
}

// sent notes how the send of probe seq went; e.mu is held.
func (e *echoTarget) sent(seq int, err error) {
	if err != nil {
		if p := e.w.lookup(seq); p != nil && p.state == awaiting {
			e.w.unsent(p)
		}
		if !e.failing {
			e.log.Warn("failed to send echo request; probes count as lost until sends work", zap.Error(err))
		}
		e.failing = true
		return
	}
	if e.failing {
		e.log.Info("echo requests are sent again")
		e.failing = false
	}
}

// receive matches a reply b from from that arrived at arrival with the
// probes remembered; e.mu is held. The source is checked first: nothing
// from another address is counted as an answer, a late one or a duplicate.
func (e *echoTarget) receive(b []byte, from netip.Addr, arrival time.Time) {
	if from.Unmap().WithZone("") != e.addr.WithZone("") {
		e.w.stats.Stray++
		return
	}
	echo, ok := e.parseReply(b)
	if !ok {
		e.w.stats.Stray++
		return
	}
	// The newest probe whose sequence number ends in echo.Seq: the window
	// is far shorter than the 16-bit sequence space.
	last := e.w.next - 1
	p := e.w.lookup(last - int(uint16(last)-uint16(echo.Seq)))
	if p == nil || p.unsent || len(echo.Data) < echoTagLen || binary.BigEndian.Uint64(echo.Data) != p.tag {
		e.w.stats.Stray++
		return
	}
	rtt := arrival.Sub(p.sent) // monotonic: no clock step moves it
	if e.w.accept(p, rtt) {
		e.w.addSample(p, estimator.RTT, rtt)
	}
}

// parseReply decodes b as an echo reply to this target: the right type
// and, on a raw socket, identifier (a datagram socket's kernel checked the
// identifier it chose). ICMP's checksum is checked here; ICMPv6's, which
// covers the IPv6 addresses, the kernel checked.
func (e *echoTarget) parseReply(b []byte) (*icmp.Echo, bool) {
	proto, reply := 1, icmp.Type(ipv4.ICMPTypeEchoReply)
	if e.addr.Is6() {
		proto, reply = 58, ipv6.ICMPTypeEchoReply
	}
	if proto == 1 && icmpChecksum(b) != 0 {
		return nil, false
	}
	m, err := icmp.ParseMessage(proto, b)
	if err != nil || m.Type != reply || m.Code != 0 {
		return nil, false
	}
	echo, ok := m.Body.(*icmp.Echo)
	if !ok || (e.privileged && uint16(echo.ID) != e.id) {
		return nil, false
	}
	return echo, true
}

// listenEcho opens a socket for echo probes to addr in the network
// namespace of the calling thread, raw if privileged, bound to device
// unless it is empty. A raw socket receives only echo replies with
// identifier id (and, for IPv4, from addr).
func listenEcho(addr netip.Addr, privileged bool, id uint16, device string) (net.PacketConn, error) {
	if !privileged {
		network := "udp4"
		if addr.Is6() {
			network = "udp6"
		}
		return listenICMP(network, device)
	}
	if addr.Is4() {
		conn, err := listenICMP("ip4:icmp", device)
		if err != nil {
			return nil, err
		}
		pc := ipv4.NewPacketConn(conn)
		var f ipv4.ICMPFilter
		f.SetAll(true)
		f.Accept(ipv4.ICMPTypeEchoReply)
		if err := pc.SetICMPFilter(&f); err != nil {
			conn.Close()
			return nil, fmt.Errorf("failed to set icmp filter: %w", err)
		}
		if err := setBPF(conn, pc.SetBPF, echoFilter4(id, addr)); err != nil {
			conn.Close()
			return nil, err
		}
		return conn, nil
	}
	conn, err := listenICMP("ip6:ipv6-icmp", device)
	if err != nil {
		return nil, err
	}
	pc := ipv6.NewPacketConn(conn)
	var f ipv6.ICMPFilter
	f.SetAll(true)
	f.Accept(ipv6.ICMPTypeEchoReply)
	if err := pc.SetICMPFilter(&f); err != nil {
		conn.Close()
		return nil, fmt.Errorf("failed to set icmpv6 filter: %w", err)
	}
	if err := setBPF(conn, pc.SetBPF, echoFilter6(id)); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// setBPF attaches prog to conn with attach, then drains what came in
// before it.
func setBPF(conn net.PacketConn, attach func([]bpf.RawInstruction) error, prog []bpf.Instruction) error {
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return fmt.Errorf("failed to assemble bpf filter: %w", err)
	}
	if err := attach(raw); err != nil {
		return fmt.Errorf("failed to attach bpf filter: %w", err)
	}
	// What came in before the filters were on may be anything.
	return drain(conn)
}

// echoFilter4 is a BPF program for a raw IPv4 socket (which sees the IP
// header) that passes echo replies with identifier id from src.
func echoFilter4(id uint16, src netip.Addr) []bpf.Instruction {
	s := src.As4()
	return []bpf.Instruction{
		bpf.LoadAbsolute{Off: 12, Size: 4}, // IP source address
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: binary.BigEndian.Uint32(s[:]), SkipTrue: 6},
		bpf.LoadMemShift{Off: 0},          // X = IP header length
		bpf.LoadIndirect{Off: 0, Size: 1}, // ICMP type
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: uint32(ipv4.ICMPTypeEchoReply), SkipTrue: 3},
		bpf.LoadIndirect{Off: 4, Size: 2}, // identifier
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: uint32(id), SkipTrue: 1},
		bpf.RetConstant{Val: 0xffff},
		bpf.RetConstant{Val: 0},
	}
}

// echoFilter6 is a BPF program for a raw ICMPv6 socket (which sees the
// ICMPv6 message only) that passes echo replies with identifier id.
func echoFilter6(id uint16) []bpf.Instruction {
	return []bpf.Instruction{
		bpf.LoadAbsolute{Off: 0, Size: 1}, // ICMPv6 type
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: uint32(ipv6.ICMPTypeEchoReply), SkipTrue: 3},
		bpf.LoadAbsolute{Off: 4, Size: 2}, // identifier
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: uint32(id), SkipTrue: 1},
		bpf.RetConstant{Val: 0xffff},
		bpf.RetConstant{Val: 0},
	}
}
