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
	socketTarget
	privileged bool
	// id is the identifier of the requests: random on a raw socket; on a
	// datagram socket the kernel replaces it with its own, and checks it
	// on the replies itself.
	id uint16
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
		socketTarget: newSocketTarget("echo", addr, interval, deadline, device, pacer, log),
		privileged:   privileged,
		id:           uint16(rand.Uint32()),
	}
}

// Stats returns the target's counters.
func (e *echoTarget) Stats() TargetStats { return e.stats(Echo) }

// Run probes until ctx ends (see socketTarget.run).
func (e *echoTarget) Run(ctx context.Context, sink func(Result)) error {
	sock := newProbeSocket(e.device, e.addr, e.privileged && e.addr.Is4(),
		func() (net.PacketConn, error) { return listenEcho(e.addr, e.privileged, e.id, e.device) })
	return e.run(ctx, sink, sock, func(now time.Time) (int, []byte) { return e.prepare(now, rand.Uint64()) }, e.receive)
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
