//go:build !linux

package probe

import (
	"errors"
	"net"
	"net/netip"
	"syscall"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/sys/unix"
)

// errNoBind is the error for a device to bind to where the system cannot.
var errNoBind = errors.New("binding probe sockets to a device needs Linux")

// bindToDevice fails: SO_BINDTODEVICE is Linux's.
func bindToDevice(int, string) error { return errNoBind }

// listenDatagram opens an ICMP datagram socket, network "udp4" or "udp6",
// on the wildcard address; it cannot bind it to a device.
func listenDatagram(network, device string) (net.PacketConn, error) {
	if device != "" {
		return nil, errNoBind
	}
	laddr := "0.0.0.0"
	if network == "udp6" {
		laddr = "::"
	}
	return icmp.ListenPacket(network, laddr)
}

// deviceGone is false: no socket is bound to a device.
func deviceGone(int) bool { return false }

// stampReceives does nothing: packets are timed when they are read.
func stampReceives(int) error { return nil }

// receiveStamp is the zero Time: there are no kernel timestamps.
func receiveStamp([]byte) time.Time { return time.Time{} }

// recvmsg reads one packet from fd into p, and its control messages into
// oob; fd does not wait.
func recvmsg(fd int, p, oob []byte) (n, oobn int, from netip.Addr, err error) {
	n, oobn, _, sa, err := syscall.Recvmsg(fd, p, oob, 0)
	switch a := sa.(type) {
	case *syscall.SockaddrInet4:
		from = netip.AddrFrom4(a.Addr)
	case *syscall.SockaddrInet6:
		from = netip.AddrFrom16(a.Addr).Unmap()
	}
	return n, oobn, from, err
}

// sendto sends b to sa from fd; fd does not wait.
func sendto(fd int, b []byte, sa unix.Sockaddr) error { return unix.Sendto(fd, b, 0, sa) }
