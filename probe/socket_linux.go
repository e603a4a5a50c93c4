package probe

import (
	"encoding/binary"
	"errors"
	"net"
	"os"
	"time"

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

// deviceGone reports whether the device that socket fd is bound to is
// gone.
func deviceGone(fd int) bool {
	_, err := unix.GetsockoptString(fd, unix.SOL_SOCKET, unix.SO_BINDTODEVICE)
	return errors.Is(err, unix.ENODEV)
}

// stampReceives has the kernel stamp each packet that socket fd receives
// with its arrival time (SO_TIMESTAMPNS).
func stampReceives(fd int) error {
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1); err != nil {
		return os.NewSyscallError("setsockopt SO_TIMESTAMPNS", err)
	}
	return nil
}

// receiveStamp is the kernel's receive timestamp in a packet's control
// messages, the zero Time if they have none.
func receiveStamp(oob []byte) time.Time {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return time.Time{}
	}
	for _, m := range msgs {
		if m.Header.Level != unix.SOL_SOCKET || m.Header.Type != unix.SCM_TIMESTAMPNS {
			continue
		}
		// struct timespec: two longs, of the platform's word size.
		switch len(m.Data) {
		case 16:
			return time.Unix(int64(binary.NativeEndian.Uint64(m.Data)), int64(binary.NativeEndian.Uint64(m.Data[8:])))
		case 8:
			return time.Unix(int64(int32(binary.NativeEndian.Uint32(m.Data))), int64(int32(binary.NativeEndian.Uint32(m.Data[4:]))))
		}
	}
	return time.Time{}
}
