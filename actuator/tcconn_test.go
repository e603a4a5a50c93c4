package actuator

import (
	"encoding/binary"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// nlmsg encodes one netlink message, padded to 4 bytes.
func nlmsg(typ netlink.HeaderType, flags netlink.HeaderFlags, seq uint32, data []byte) []byte {
	b := make([]byte, nlmsgHeaderLen, nlmsgHeaderLen+len(data)+3)
	binary.NativeEndian.PutUint32(b, uint32(nlmsgHeaderLen+len(data)))
	binary.NativeEndian.PutUint16(b[4:], uint16(typ))
	binary.NativeEndian.PutUint16(b[6:], uint16(flags))
	binary.NativeEndian.PutUint32(b[8:], seq)
	b = append(b, data...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func TestSplitMessages(t *testing.T) {
	two := append(nlmsg(unix.RTM_NEWQDISC, 0, 7, []byte{1, 2, 3}), nlmsg(netlink.Error, 0, 8, make([]byte, 20))...)
	tests := []struct {
		name    string
		b       []byte
		seqs    []uint32
		lens    []int
		wantErr bool
	}{
		{name: "one", b: nlmsg(unix.RTM_NEWQDISC, 0, 7, make([]byte, 20)), seqs: []uint32{7}, lens: []int{20}},
		{name: "two, the first padded", b: two, seqs: []uint32{7, 8}, lens: []int{3, 20}},
		{name: "none", b: nil},
		{name: "length past the end", b: nlmsg(unix.RTM_NEWQDISC, 0, 7, make([]byte, 20))[:30], wantErr: true},
		{name: "length under a header", b: func() []byte {
			b := nlmsg(unix.RTM_NEWQDISC, 0, 7, nil)
			binary.NativeEndian.PutUint32(b, 8)
			return b
		}(), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msgs, err := splitMessages(tt.b)
			if (err != nil) != tt.wantErr {
				t.Fatalf("splitMessages: %v, want error %v", err, tt.wantErr)
			}
			if len(msgs) != len(tt.seqs) {
				t.Fatalf("%d messages, want %d", len(msgs), len(tt.seqs))
			}
			for i, m := range msgs {
				if m.Header.Sequence != tt.seqs[i] || len(m.Data) != tt.lens[i] {
					t.Errorf("message %d: sequence %d, %d bytes; want %d, %d", i, m.Header.Sequence, len(m.Data), tt.seqs[i], tt.lens[i])
				}
			}
		})
	}
}

func TestReplyError(t *testing.T) {
	req := nlmsg(unix.RTM_GETQDISC, netlink.Request, 9, make([]byte, 20)) // the request, echoed
	errmsg := func(code int32, flags netlink.HeaderFlags, echo []byte, attrs []byte) netlink.Message {
		data := binary.NativeEndian.AppendUint32(nil, uint32(code))
		data = append(append(data, echo...), attrs...)
		return netlink.Message{Header: netlink.Header{Type: netlink.Error, Flags: flags, Sequence: 9}, Data: data}
	}
	ae := netlink.NewAttributeEncoder()
	ae.String(unix.NLMSGERR_ATTR_MSG, "Invalid qdisc name")
	ae.Uint32(unix.NLMSGERR_ATTR_OFFS, 36)
	attrs, err := ae.Encode()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		m     netlink.Message
		errno error // nil: an acknowledgement
		msg   string
		off   int
	}{
		{name: "acknowledgement", m: errmsg(0, 0, req, nil)},
		{name: "errno", m: errmsg(-int32(unix.ENOENT), 0, req, nil), errno: unix.ENOENT},
		{name: "extended, whole request", m: errmsg(-int32(unix.EINVAL), netlink.AcknowledgeTLVs, req, attrs), errno: unix.EINVAL, msg: "Invalid qdisc name", off: 36},
		{name: "extended, capped", m: errmsg(-int32(unix.EINVAL), netlink.AcknowledgeTLVs|netlink.Capped, req[:nlmsgHeaderLen], attrs), errno: unix.EINVAL, msg: "Invalid qdisc name", off: 36},
		{name: "extended, cut short", m: errmsg(-int32(unix.EEXIST), netlink.AcknowledgeTLVs, req[:8], nil), errno: unix.EEXIST},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := replyError(tt.m)
			if tt.errno == nil {
				if err != nil {
					t.Fatalf("replyError = %v, want nil", err)
				}
				return
			}
			var oe *netlink.OpError
			if !errors.As(err, &oe) || !errors.Is(err, tt.errno) || oe.Message != tt.msg || oe.Offset != tt.off || oe.Sequence != 9 {
				t.Errorf("replyError = %#v, want an OpError of %v with %q at %d", err, tt.errno, tt.msg, tt.off)
			}
		})
	}
	if err := replyError(netlink.Message{Header: netlink.Header{Type: netlink.Error}, Data: []byte{1}}); err == nil {
		t.Error("replyError accepted an error message of one byte")
	}
}

// TestReceiveWaits: an answer that is not in the socket yet is waited for,
// up to the connection's wait, without the netlink package's reader.
func TestReceiveWaits(t *testing.T) {
	c, err := dialTC(0)
	if err != nil {
		t.Skipf("skipping: no netlink socket here: %v", err)
	}
	defer c.Close()
	c.wait = 100 * time.Millisecond
	start := time.Now()
	if n, err := c.receive(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("receive on an empty socket = %d, %v; want the deadline exceeded", n, err)
	}
	if waited := time.Since(start); waited < c.wait {
		t.Errorf("receive gave up after %v, before its wait of %v", waited, c.wait)
	}

	// A request sent while receive waits: its answer (the kernel's
	// error: loopback's root is not a cake a5:) ends the wait.
	c.wait = 10 * time.Second
	req := nlmsg(unix.RTM_GETQDISC, netlink.Request|netlink.Echo, 42, func() []byte {
		b := make([]byte, tcmsgLen)
		binary.NativeEndian.PutUint32(b[4:], 1) // lo
		binary.NativeEndian.PutUint32(b[8:], OwnRootHandle)
		binary.NativeEndian.PutUint32(b[12:], 0xFFFF_FFFF)
		ae := netlink.NewAttributeEncoder()
		ae.String(tcaKind, "cake")
		attrs, _ := ae.Encode()
		return append(b, attrs...)
	}())
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		time.Sleep(50 * time.Millisecond)
		if err := c.send(req); err != nil {
			t.Errorf("send: %v", err)
		}
	}()
	n, err := c.receive()
	<-sent
	if err != nil {
		t.Fatalf("receive while a request is sent: %v", err)
	}
	msgs, err := splitMessages(c.buf[:n])
	if err != nil || len(msgs) != 1 || msgs[0].Header.Sequence != 42 || msgs[0].Header.Type != netlink.Error {
		t.Fatalf("the answer: %+v, %v; want the kernel's error for request 42", msgs, err)
	}
	if err := replyError(msgs[0]); !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		t.Errorf("the kernel's answer: %v, want EINVAL or ENOENT (no cake a5: on loopback)", err)
	}
}
