package probe

import (
	"errors"
	"net"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// bindToDevice binds socket fd to device (SO_BINDTODEVICE).
func bindToDevice(fd int, device string) error {
	if err := unix.BindToDevice(fd, device); err != nil {
		return os.NewSyscallError("setsockopt SO_BINDTODEVICE "+device, err)
	}
	return nil
}

// listenDatagram opens an ICMP datagram ("ping") socket, network "udp4" or
// "udp6", on the wildcard address, bound to device unless it is empty.
func listenDatagram(network, device string) (net.PacketConn, error) {
	family, proto := unix.AF_INET, unix.IPPROTO_ICMP
	var sa unix.Sockaddr = &unix.SockaddrInet4{}
	if network == "udp6" {
		family, proto, sa = unix.AF_INET6, unix.IPPROTO_ICMPV6, &unix.SockaddrInet6{}
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	if device != "" {
		if err := bindToDevice(fd, device); err != nil {
			unix.Close(fd)
			return nil, err
		}
	}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return nil, os.NewSyscallError("bind", err)
	}
	// The net package takes a copy of the descriptor, as a *net.UDPConn.
	f := os.NewFile(uintptr(fd), "icmp datagram socket")
	defer f.Close()
	return net.FilePacketConn(f)
}

// boundDeviceGone reports whether the device that conn is bound to is gone.
func boundDeviceGone(conn net.PacketConn) bool {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var gone bool
	rc.Control(func(fd uintptr) {
		_, err := unix.GetsockoptString(int(fd), unix.SOL_SOCKET, unix.SO_BINDTODEVICE)
		gone = errors.Is(err, unix.ENODEV)
	})
	return gone
}
