//go:build !linux

package probe

import (
	"errors"
	"net"
	"time"

	"golang.org/x/net/icmp"
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
