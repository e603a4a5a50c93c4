package probe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Probe sockets bound to a device.
//
// With several links, a target bound to its link's device
// (TargetOptions.Device, SO_BINDTODEVICE) sends out of that device whatever
// the default route, routed by the device's own routes (or, with none, as
// if the reflector were on the link), and receives only what arrives on
// it. Each socket is bound once, when it is opened: since Linux 5.7 that
// needs no privilege (only changing a binding needs CAP_NET_RAW), so a
// datagram socket opened without CAP_NET_RAW is bound too; before 5.7,
// binding needed CAP_NET_RAW.
//
// The kernel keeps the device's index, not its name: once the device goes
// away, as a PPPoE interface does on every reconnect, every send fails
// (IPv4 with ENODEV, IPv6 with ENETUNREACH), even after a new device of
// the same name is up. After a failed send the socket is asked for its
// device; when that is gone, the socket is opened again, bound by name to
// the device that has it now. While none has, the probes count as unsent.
//
// Paced sockets. A target reads its socket only when it is paced (see
// Pacer): the socket is left out of the Go runtime's poller, so an answer
// arriving wakes nobody, and each answer is timed by the kernel's receive
// timestamp (SO_TIMESTAMPNS), not by when it is read.

// listenICMP opens an ICMP socket of network ("ip4:icmp", "ip6:ipv6-icmp",
// "udp4" or "udp6") on the wildcard address in the network namespace of
// the calling thread, bound to device unless it is empty.
func listenICMP(network, device string) (net.PacketConn, error) {
	switch network {
	case "udp4", "udp6":
		return listenDatagram(network, device)
	}
	laddr := "0.0.0.0"
	if network == "ip6:ipv6-icmp" {
		laddr = "::"
	}
	var lc net.ListenConfig
	if device != "" {
		lc.Control = func(_, _ string, c syscall.RawConn) error {
			var err error
			if cerr := c.Control(func(fd uintptr) { err = bindToDevice(int(fd), device) }); cerr != nil {
				return cerr
			}
			return err
		}
	}
	return lc.ListenPacket(context.Background(), network, laddr)
}

// A probeSocket is a target's socket, outside the runtime's poller, opened
// again when the device it is bound to has gone.
type probeSocket struct {
	device string
	// open opens the socket, bound to device, with its filters on.
	open func() (net.PacketConn, error)
	// to is where the probes go; ipHeader says that what the socket reads
	// starts with an IPv4 header (a raw IPv4 socket).
	to       netip.Addr
	ipHeader bool

	// fd is -1 while the socket is closed; sa is to as a socket address,
	// its zone resolved when the socket was opened.
	fd  int
	sa  unix.Sockaddr
	oob []byte
}

// newProbeSocket returns a closed socket that open opens, for probes to
// to; ipHeader says that it reads IPv4 headers.
func newProbeSocket(device string, to netip.Addr, ipHeader bool, open func() (net.PacketConn, error)) *probeSocket {
	return &probeSocket{device: device, open: open, to: to, ipHeader: ipHeader, fd: -1, oob: make([]byte, 64)}
}

// start opens the socket. It returns an error for which gone holds when
// the device is missing.
func (s *probeSocket) start() error {
	sa, err := sockaddr(s.to)
	if err != nil {
		return err
	}
	conn, err := s.open()
	if err != nil {
		return err
	}
	fd, err := detach(conn)
	if err != nil {
		return err
	}
	if err := stampReceives(fd); err != nil {
		unix.Close(fd)
		return err
	}
	s.fd, s.sa = fd, sa
	return nil
}

// stop closes the socket, if open.
func (s *probeSocket) stop() {
	if s.fd >= 0 {
		unix.Close(s.fd)
		s.fd = -1
	}
}

// gone reports whether err, from opening the socket, says that the
// device to bind it to is missing.
func (s *probeSocket) gone(err error) bool {
	return s.device != "" && errors.Is(err, syscall.ENODEV)
}

// write sends b, opening the socket first when it is closed, and again
// when the device it was bound to has gone.
func (s *probeSocket) write(b []byte) error {
	if s.fd < 0 {
		if err := s.start(); err != nil {
			return err
		}
	}
	err := s.send(b)
	if err == nil || s.device == "" || !deviceGone(s.fd) {
		return err
	}
	s.stop()
	if err := s.start(); err != nil {
		return err
	}
	return s.send(b)
}

// send sends b once; a full send buffer is an error (EAGAIN), not a wait.
func (s *probeSocket) send(b []byte) error {
	for {
		err := sendto(s.fd, b, s.sa)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return os.NewSyscallError("sendto", err)
		}
		return nil
	}
}

// read hands each packet queued on the socket to each, with its source
// and arrival on now's monotonic clock, while more reports that an answer
// is still awaited and some packet is left. A closed socket has none.
// Once every probe has its answer, strays and late duplicates wait for the
// next read: a read that finds nothing is a system call too.
func (s *probeSocket) read(buf []byte, now time.Time, more func() bool, each func(b []byte, from netip.Addr, arrival time.Time)) error {
	if s.fd < 0 {
		return nil
	}
	for more() {
		n, oobn, from, err := recvmsg(s.fd, buf, s.oob)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return nil
		case err != nil:
			return os.NewSyscallError("recvmsg", err)
		}
		b := buf[:n]
		if s.ipHeader {
			if b = stripIPv4Header(b); b == nil {
				continue
			}
		}
		each(b, from, arrivalAt(now, receiveStamp(s.oob[:oobn])))
	}
	return nil
}

// maxStampAge bounds how long before it is read a packet may have
// arrived by the kernel's timestamp, which is wall-clock time: a step of
// the wall clock since its arrival shows as an age out of bounds, and the
// packet is then timed at its read.
const maxStampAge = 2 * time.Second

// arrivalAt is when a packet that the kernel stamped at stamp (wall clock,
// zero for none) arrived, on the monotonic clock of now, the time it is
// read.
func arrivalAt(now, stamp time.Time) time.Time {
	if stamp.IsZero() {
		return now
	}
	age := now.Round(0).Sub(stamp)
	if age < 0 || age > maxStampAge {
		return now
	}
	return now.Add(-age)
}

// stripIPv4Header returns the payload of IPv4 packet b, nil if b is too
// short to be one.
func stripIPv4Header(b []byte) []byte {
	if len(b) < 20 || b[0]>>4 != 4 {
		return nil
	}
	hl := int(b[0]&0x0f) * 4
	if hl < 20 || len(b) < hl {
		return nil
	}
	return b[hl:]
}

// sockaddr is addr as a socket address, its zone (an interface's name or
// index) resolved to the index.
func sockaddr(addr netip.Addr) (unix.Sockaddr, error) {
	if addr.Is4() {
		return &unix.SockaddrInet4{Addr: addr.As4()}, nil
	}
	sa := &unix.SockaddrInet6{Addr: addr.As16()}
	if z := addr.Zone(); z != "" {
		if i, err := strconv.ParseUint(z, 10, 32); err == nil {
			sa.ZoneId = uint32(i)
		} else if ifi, err := net.InterfaceByName(z); err == nil {
			sa.ZoneId = uint32(ifi.Index)
		} else {
			return nil, fmt.Errorf("reflector %s: zone %s: %w", addr, z, err)
		}
	}
	return sa, nil
}

// detach takes conn's socket out of the runtime's poller: it returns a
// duplicate of its descriptor (still non-blocking) and closes conn, which
// removes conn's own from the poller.
func detach(conn net.PacketConn) (int, error) {
	defer conn.Close()
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return -1, fmt.Errorf("probe socket %T has no descriptor", conn)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd, derr := -1, error(nil)
	if err := rc.Control(func(f uintptr) { fd, derr = unix.FcntlInt(f, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return -1, err
	}
	if derr != nil {
		return -1, os.NewSyscallError("fcntl F_DUPFD_CLOEXEC", derr)
	}
	return fd, nil
}
