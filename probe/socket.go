package probe

import (
	"context"
	"errors"
	"net"
	"syscall"
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

// A probeSocket is a target's socket, opened again when the device it is
// bound to has gone, and the goroutine that reads it.
type probeSocket struct {
	device string
	// open opens the socket, bound to device, with its filters on.
	open func() (net.PacketConn, error)
	// read reads from conn until it is closed, and then returns nil.
	read func(conn net.PacketConn) error

	// conn is nil while the socket is closed.
	conn net.PacketConn
	// done receives what the reader returns; one reader runs at a time.
	done chan error
}

// newProbeSocket returns a closed socket that open opens and read reads.
func newProbeSocket(device string, open func() (net.PacketConn, error), read func(net.PacketConn) error) *probeSocket {
	return &probeSocket{device: device, open: open, read: read, done: make(chan error, 1)}
}

// start opens the socket and starts its reader. It returns an error for
// which gone holds when the device is missing.
func (s *probeSocket) start() error {
	conn, err := s.open()
	if err != nil {
		return err
	}
	s.conn = conn
	go func() { s.done <- s.read(conn) }()
	return nil
}

// stop closes the socket, if open, and waits for its reader.
func (s *probeSocket) stop() {
	if s.conn == nil {
		return
	}
	s.conn.Close()
	<-s.done
	s.conn = nil
}

// readFailed closes the socket after its reader has returned (on done).
func (s *probeSocket) readFailed() {
	s.conn.Close()
	s.conn = nil
}

// gone reports whether err, from opening the socket, says that the
// device to bind it to is missing.
func (s *probeSocket) gone(err error) bool {
	return s.device != "" && errors.Is(err, syscall.ENODEV)
}

// writeTo sends b to dst, opening the socket first when it is closed, and
// again when the device it was bound to has gone.
func (s *probeSocket) writeTo(b []byte, dst net.Addr) error {
	if s.conn == nil {
		if err := s.start(); err != nil {
			return err
		}
	}
	_, err := s.conn.WriteTo(b, dst)
	if err == nil || s.device == "" || !boundDeviceGone(s.conn) {
		return err
	}
	s.stop()
	if err := s.start(); err != nil {
		return err
	}
	_, err = s.conn.WriteTo(b, dst)
	return err
}
