package actuator

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/florianl/go-tc"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// A tcConn is go-tc's traffic control connection together with a plain
// netlink connection in the same namespace, for the one request go-tc does
// not make: reading a single qdisc (go-tc only dumps every qdisc of the
// namespace, and decodes none of CAKE's statistics).
type tcConn struct {
	*tc.Tc
	mu  sync.Mutex // a request and its answers, whole
	raw *netlink.Conn
}

// dialTC opens both connections in the network namespace netns (0: the
// calling thread's).
func dialTC(netns int) (*tcConn, error) {
	t, err := tc.Open(&tc.Config{NetNS: netns})
	if err != nil {
		return nil, err
	}
	raw, err := netlink.Dial(unix.NETLINK_ROUTE, &netlink.Config{NetNS: netns})
	if err != nil {
		t.Close()
		return nil, err
	}
	// Best effort: with extended acknowledgements the kernel says which
	// check failed ("Invalid handle").
	_ = raw.SetOption(netlink.ExtendedAcknowledge, true)
	return &tcConn{Tc: t, raw: raw}, nil
}

// Close closes both connections.
func (c *tcConn) Close() error {
	return errors.Join(c.Tc.Close(), c.raw.Close())
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
	q, err := c.get(netlink.Message{
		// The kernel answers a GET with a notification that it sends to
		// the asker only with NLM_F_ECHO; the acknowledgement that follows
		// ends the wait even when it sends none.
		Header: netlink.Header{Type: unix.RTM_GETQDISC, Flags: netlink.Request | netlink.Echo | netlink.Acknowledge},
		Data:   data,
	})
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

// get sends req and returns the qdisc the kernel answers with, nil when it
// answered with an acknowledgement alone.
func (c *tcConn) get(req netlink.Message) (*qdiscMessage, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sent, err := c.raw.Send(req)
	if err != nil {
		return nil, err
	}
	var q *qdiscMessage
	for {
		msgs, err := c.raw.Receive()
		if err != nil {
			// An error from the kernel comes instead of the
			// acknowledgement: nothing of this request is left to read.
			return nil, err
		}
		for _, m := range msgs {
			if m.Header.Sequence != sent.Header.Sequence {
				continue // left from a request that failed half-way
			}
			switch m.Header.Type {
			case netlink.Error: // the acknowledgement: the last message
				return q, nil
			case unix.RTM_NEWQDISC:
				got, err := decodeQdiscMessage(m.Data)
				if err != nil {
					return nil, err
				}
				q = &got
			}
		}
	}
}
