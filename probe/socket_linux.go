package probe

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"
	"unsafe"

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

// The probe sockets' reads and sends are raw system calls. The sockets do
// not wait (a read with nothing queued fails with EAGAIN), so a call
// cannot block, and a raw one keeps the Go scheduler out of it: a system
// call through the syscall package marks the goroutine as in a system
// call, and one that takes longer than the runtime's monitor thread's
// 20 µs check (on a small router, or a virtual machine, most do) has its
// processor handed over, after which the monitor thread keeps waking every
// 20 µs for a while. The unix package's Recvmsg also asks the socket for
// its protocol on every packet.

// recvmsg reads one packet from fd into p, and its control messages into
// oob, without waiting. It returns the packet's length (the part that fit
// in p), the control messages' length and the packet's source.
func recvmsg(fd int, p, oob []byte) (n, oobn int, from netip.Addr, err error) {
	var rsa syscall.RawSockaddrAny
	iov := syscall.Iovec{Base: &p[0]}
	iov.SetLen(len(p))
	msg := syscall.Msghdr{Name: (*byte)(unsafe.Pointer(&rsa)), Namelen: syscall.SizeofSockaddrAny, Iov: &iov, Iovlen: 1}
	if len(oob) > 0 {
		msg.Control = &oob[0]
		msg.SetControllen(len(oob))
	}
	r, _, e := syscall.RawSyscall(syscall.SYS_RECVMSG, uintptr(fd), uintptr(unsafe.Pointer(&msg)), syscall.MSG_DONTWAIT)
	if e != 0 {
		return 0, 0, netip.Addr{}, e
	}
	switch rsa.Addr.Family {
	case syscall.AF_INET:
		from = netip.AddrFrom4((*syscall.RawSockaddrInet4)(unsafe.Pointer(&rsa)).Addr)
	case syscall.AF_INET6:
		from = netip.AddrFrom16((*syscall.RawSockaddrInet6)(unsafe.Pointer(&rsa)).Addr).Unmap()
	}
	return min(int(r), len(p)), int(msg.Controllen), from, nil
}

// sendto sends b to sa from fd without waiting.
func sendto(fd int, b []byte, sa unix.Sockaddr) error {
	var raw unsafe.Pointer
	var l uintptr
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		rsa := unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: a.Addr}
		raw, l = unsafe.Pointer(&rsa), unix.SizeofSockaddrInet4
	case *unix.SockaddrInet6:
		rsa := unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: a.Addr, Scope_id: a.ZoneId}
		raw, l = unsafe.Pointer(&rsa), unix.SizeofSockaddrInet6
	default:
		return unix.EAFNOSUPPORT
	}
	_, _, e := syscall.RawSyscall6(syscall.SYS_SENDTO, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), syscall.MSG_DONTWAIT, uintptr(raw), l)
	if e != 0 {
		return e
	}
	return nil
}
