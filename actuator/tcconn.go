package actuator

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"time"
	"unsafe"

	"github.com/florianl/go-tc"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// A tcConn is go-tc's traffic control connection together with a plain
// netlink socket in the same namespace, for what go-tc does not do or does
// at a cost: reading a single qdisc (go-tc only dumps every qdisc of the
// namespace, and decodes none of CAKE's statistics), listing, and the rate
// changes of a busy link (tcwire.go).
//
// The socket is outside the Go runtime's poller, like the probes' sockets:
// it is read and written with system calls that never wait, and the rare
// answer that is not there yet is waited for with poll(2). In the poller,
// every exchange on it left a write-readiness event that the scheduler
// then collected with an extra epoll_pwait on every tick.
type tcConn struct {
	*tc.Tc
	fd int // the socket's descriptor, non-blocking

	mu   sync.Mutex    // a request and its answer, whole
	seq  uint32        // the last request's sequence number
	buf  []byte        // answers are read into it
	wait time.Duration // how long an answer not yet there is waited for
}

// dialTC opens both connections in the network namespace netns (0: the
// calling thread's).
func dialTC(netns int) (*tcConn, error) {
	t, err := tc.Open(&tc.Config{NetNS: netns})
	if err != nil {
		return nil, err
	}
	fd, err := dialRaw(netns)
	if err != nil {
		t.Close()
		return nil, err
	}
	return &tcConn{Tc: t, fd: fd, seq: rand.Uint32(), buf: make([]byte, answerBuffer), wait: replyWait}, nil
}

// dialRaw opens a NETLINK_ROUTE socket in netns with extended
// acknowledgements (best effort: with them the kernel says which check
// failed, "Invalid handle"), and returns a duplicate of its descriptor,
// taken out of the runtime's poller.
func dialRaw(netns int) (int, error) {
	raw, err := netlink.Dial(unix.NETLINK_ROUTE, &netlink.Config{NetNS: netns})
	if err != nil {
		return -1, err
	}
	defer raw.Close() // which takes raw's own descriptor out of the poller
	_ = raw.SetOption(netlink.ExtendedAcknowledge, true)
	rc, err := raw.SyscallConn()
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

// answerBuffer is the size of the buffer answers are read into. The
// largest answer, a CAKE qdisc in diffserv8 with its eight tins'
// statistics, is under 3 KiB.
const answerBuffer = 32 << 10

// Close closes both connections.
func (c *tcConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var err error
	if c.fd >= 0 {
		err = os.NewSyscallError("close", unix.Close(c.fd))
		c.fd = -1
	}
	return errors.Join(c.Tc.Close(), err)
}

// getRoot reads ifindex's root qdisc, when it is the qdisc of the kind with
// the handle (see getQdisc).
func (c *tcConn) getRoot(ifindex, handle uint32, kind string) (qdiscMessage, error) {
	return c.getQdisc(ifindex, tc.HandleRoot, handle, kind)
}

// getQdisc reads one qdisc with one RTM_GETQDISC for it alone: ifindex's
// root (parent tc.HandleRoot) or the leaf of class parent, when it is the
// qdisc of the kind with the handle. The kernel itself checks both and
// answers EINVAL for another qdisc (ENOENT for none), which gives an error
// wrapping ErrNoQdisc. A dump costs as much as the namespace holds qdiscs,
// and more to decode; this costs the same whatever else is there.
func (c *tcConn) getQdisc(ifindex, parent, handle uint32, kind string) (qdiscMessage, error) {
	ae := netlink.NewAttributeEncoder()
	ae.String(tcaKind, kind)
	attrs, err := ae.Encode()
	if err != nil {
		return qdiscMessage{}, err
	}
	// struct tcmsg: family AF_UNSPEC and padding, ifindex, handle, parent,
	// info.
	data := make([]byte, tcmsgLen, tcmsgLen+len(attrs))
	binary.NativeEndian.PutUint32(data[4:], ifindex)
	binary.NativeEndian.PutUint32(data[8:], handle)
	binary.NativeEndian.PutUint32(data[12:], parent)
	data = append(data, attrs...)
	// Older kernels answer a GET with a notification that they send to
	// the asker only with NLM_F_ECHO (and to RTNLGRP_TC's listeners in
	// any case); newer ones answer the asker alone, echo or not. Either
	// way the answer is the qdisc or an error.
	q, err := c.get(netlink.Request|netlink.Echo, data)
	where := "the root qdisc"
	if parent != tc.HandleRoot {
		where = "the qdisc of class " + handleString(parent)
	}
	switch {
	case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
		return qdiscMessage{}, fmt.Errorf("%s is not the %s %s (%w): %w", where, kind, handleString(handle), err, ErrNoQdisc)
	case err != nil:
		return qdiscMessage{}, fmt.Errorf("failed to read %s: %w", where, err)
	case q == nil:
		return qdiscMessage{}, fmt.Errorf("the kernel sent no %s %s as %s: %w", kind, handleString(handle), where, ErrNoQdisc)
	}
	return *q, nil
}

// get sends one RTM_GETQDISC request, header flags and payload data, and
// returns the qdisc the kernel answers with.
//
// The kernel answers a GET within the send: its reply, or an error, is in
// the socket when the send returns. So get asks for no acknowledgement and
// reads the one answer without peeking at its size first, into a buffer
// of the connection's own: two system calls, where the netlink package's
// Send and Receive take five (a peek before each read, and the
// acknowledgement's). They are made as raw system calls, which cannot
// block (the socket does not wait), so that the Go scheduler does not hand
// its processor over while the kernel answers. An answer that is not there
// yet is waited for, up to c.wait.
func (c *tcConn) get(flags netlink.HeaderFlags, data []byte) (*qdiscMessage, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	seq := c.seq
	if err := c.send(appendNlmsg(nil, unix.RTM_GETQDISC, flags, seq, data)); err != nil {
		return nil, &netlink.OpError{Op: "send", Err: err}
	}
	var got *qdiscMessage
	err := c.answers(func(m netlink.Message) (bool, error) {
		if m.Header.Sequence != seq {
			return false, nil // left from a request that failed half-way
		}
		switch m.Header.Type {
		case netlink.Error:
			return true, replyError(m) // nil: an acknowledgement alone
		case unix.RTM_NEWQDISC:
			// The buffer is the connection's: what is returned must
			// not point into it.
			q, err := decodeQdiscMessage(bytes.Clone(m.Data))
			got = &q
			return true, err
		}
		return false, nil
	})
	if err != nil {
		return nil, err
	}
	return got, nil
}

// answers reads datagrams and hands their messages, in order, to take,
// until take says it is done or fails; its error is returned as it is.
func (c *tcConn) answers(take func(m netlink.Message) (done bool, err error)) error {
	for {
		n, err := c.receive()
		if err != nil {
			return &netlink.OpError{Op: "receive", Err: err}
		}
		msgs, err := splitMessages(c.buf[:n])
		if err != nil {
			return &netlink.OpError{Op: "receive", Err: err}
		}
		for _, m := range msgs {
			if done, err := take(m); done || err != nil {
				return err
			}
		}
	}
}

// replyWait bounds the wait for an answer that was not in the socket when
// its request was sent.
const replyWait = 10 * time.Second

// send sends one request; a full buffer is an error, not a wait.
func (c *tcConn) send(b []byte) error {
	for {
		_, _, e := unix.RawSyscall6(unix.SYS_SENDTO, uintptr(c.fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), unix.MSG_DONTWAIT, 0, 0)
		switch e {
		case 0:
			return nil
		case unix.EINTR:
			continue
		}
		return os.NewSyscallError("sendto", e)
	}
}

// receive reads one datagram into c.buf and returns its length, waiting
// (up to c.wait, then os.ErrDeadlineExceeded) only when none is there.
func (c *tcConn) receive() (int, error) {
	deadline := time.Now().Add(c.wait)
	for {
		r, _, e := unix.RawSyscall6(unix.SYS_RECVFROM, uintptr(c.fd), uintptr(unsafe.Pointer(&c.buf[0])), uintptr(len(c.buf)), unix.MSG_DONTWAIT|unix.MSG_TRUNC, 0, 0)
		switch {
		case e == unix.EINTR:
			continue
		case e == unix.EAGAIN:
			left := time.Until(deadline)
			if left <= 0 {
				return 0, os.ErrDeadlineExceeded
			}
			// A blocking call, made as one: the scheduler hands the
			// processor over meanwhile.
			ms := int((left + time.Millisecond - 1) / time.Millisecond)
			if _, err := unix.Poll([]unix.PollFd{{Fd: int32(c.fd), Events: unix.POLLIN}}, ms); err != nil && err != unix.EINTR {
				return 0, os.NewSyscallError("poll", err)
			}
			continue
		case e != 0:
			return 0, os.NewSyscallError("recvfrom", e)
		case int(r) > len(c.buf):
			return 0, fmt.Errorf("a netlink answer of %d bytes, larger than the %d-byte buffer", r, len(c.buf))
		}
		return int(r), nil
	}
}

// nlmsgHeaderLen is the size of struct nlmsghdr.
const nlmsgHeaderLen = 16

// splitMessages splits a datagram into its netlink messages.
func splitMessages(b []byte) ([]netlink.Message, error) {
	var msgs []netlink.Message
	for len(b) >= nlmsgHeaderLen {
		l := int(binary.NativeEndian.Uint32(b))
		if l < nlmsgHeaderLen || l > len(b) {
			return nil, fmt.Errorf("a netlink message of %d bytes in %d", l, len(b))
		}
		msgs = append(msgs, netlink.Message{
			Header: netlink.Header{
				Length:   uint32(l),
				Type:     netlink.HeaderType(binary.NativeEndian.Uint16(b[4:])),
				Flags:    netlink.HeaderFlags(binary.NativeEndian.Uint16(b[6:])),
				Sequence: binary.NativeEndian.Uint32(b[8:]),
				PID:      binary.NativeEndian.Uint32(b[12:]),
			},
			Data: b[nlmsgHeaderLen:l],
		})
		b = b[min(len(b), (l+3)&^3):] // NLMSG_ALIGN
	}
	return msgs, nil
}

// replyError is the error an NLMSG_ERROR message carries, nil for an
// acknowledgement, as the netlink package gives it: an *netlink.OpError
// wrapping the errno, with the kernel's extended acknowledgement message.
func replyError(m netlink.Message) error {
	if len(m.Data) < 4 {
		return &netlink.OpError{Op: "receive", Err: errors.New("not enough data for netlink error code")}
	}
	code := int32(binary.NativeEndian.Uint32(m.Data))
	if code == 0 {
		return nil
	}
	oerr := &netlink.OpError{Op: "receive", Err: unix.Errno(-code), Sequence: m.Header.Sequence}
	if m.Header.Flags&netlink.AcknowledgeTLVs == 0 {
		return oerr
	}
	// After the errno, the request's header and, unless capped, its
	// payload; then the attributes.
	off := 4 + nlmsgHeaderLen
	if m.Header.Flags&netlink.Capped == 0 && len(m.Data) >= off {
		off = 4 + int(binary.NativeEndian.Uint32(m.Data[4:]))
	}
	if off > len(m.Data) {
		return oerr
	}
	ad, err := netlink.NewAttributeDecoder(m.Data[off:])
	if err != nil {
		return oerr
	}
	for ad.Next() {
		switch ad.Type() {
		case unix.NLMSGERR_ATTR_MSG:
			oerr.Message = ad.String()
		case unix.NLMSGERR_ATTR_OFFS:
			oerr.Offset = int(ad.Uint32())
		}
	}
	return oerr
}
