package actuator

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/florianl/go-tc"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// The rate changes of a busy link, and the class listing they start from,
// go over the tcConn's own socket rather than through go-tc: go-tc sends one
// request at a time and reads each answer in four system calls (a peek and
// a read for the answer, the same for its acknowledgement), where a rate
// change of the priority split is five requests. Here a change is one
// datagram of requests and one read of the acknowledgement of the last,
// and a listing one request and, for a handful of classes, one read.

// A tcWrite is one request of a batch (tcConn.exec): an RTM_NEWQDISC or
// RTM_NEWTCLASS for the object with the handle under parent on ifindex, of
// the kind, with the options as the kind's TCA_OPTIONS carry them.
type tcWrite struct {
	// typ is unix.RTM_NEWQDISC or unix.RTM_NEWTCLASS; flags are the
	// request's beyond netlink.Request: none to change a qdisc in place
	// (tc qdisc change), netlink.Create to change a class (tc class
	// replace, which creates it when it is not there).
	typ                     uint16
	flags                   netlink.HeaderFlags
	ifindex, handle, parent uint32
	kind                    string
	options                 []byte
}

// append appends the request's payload, struct tcmsg and attributes, to b.
func (w tcWrite) append(b []byte) []byte {
	b = appendTcmsg(b, w.ifindex, w.handle, w.parent)
	b = appendAttr(b, tcaKind, append([]byte(w.kind), 0))
	return appendAttr(b, tcaOptions, w.options)
}

// appendTcmsg appends struct tcmsg: family AF_UNSPEC and padding, ifindex,
// handle, parent and info 0, in the host's byte order.
func appendTcmsg(b []byte, ifindex, handle, parent uint32) []byte {
	b = append(b, 0, 0, 0, 0)
	b = binary.NativeEndian.AppendUint32(b, ifindex)
	b = binary.NativeEndian.AppendUint32(b, handle)
	b = binary.NativeEndian.AppendUint32(b, parent)
	return binary.NativeEndian.AppendUint32(b, 0)
}

// appendAttr appends a netlink attribute and its padding to b.
func appendAttr(b []byte, typ uint16, data []byte) []byte {
	b = binary.NativeEndian.AppendUint16(b, uint16(4+len(data)))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, data...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// appendNlmsg appends a netlink message, header and payload, to b.
func appendNlmsg(b []byte, typ uint16, flags netlink.HeaderFlags, seq uint32, payload []byte) []byte {
	b = binary.NativeEndian.AppendUint32(b, uint32(nlmsgHeaderLen+len(payload)))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = binary.NativeEndian.AppendUint16(b, uint16(flags))
	b = binary.NativeEndian.AppendUint32(b, seq)
	b = binary.NativeEndian.AppendUint32(b, 0)
	b = append(b, payload...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// exec sends the writes in one datagram and returns each one's outcome:
// nil, or the kernel's error as the netlink package gives it (an
// *netlink.OpError wrapping the errno, with the kernel's message). The
// kernel carries them out in order, each whatever became of those before
// it, answers each failure with an error and, asked only by the last, one
// acknowledgement that tells that all are done. err is for the exchange
// itself failing: then what became of the writes is not known.
func (c *tcConn) exec(writes []tcWrite) (errs []error, err error) {
	if len(writes) == 0 {
		return nil, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	first := c.seq + 1
	var req []byte
	for i, w := range writes {
		c.seq++
		flags := netlink.Request | w.flags
		if i == len(writes)-1 {
			flags |= netlink.Acknowledge
		}
		req = appendNlmsg(req, w.typ, flags, c.seq, w.append(nil))
	}
	last := c.seq
	if err := c.send(req); err != nil {
		return nil, &netlink.OpError{Op: "send", Err: err}
	}
	errs = make([]error, len(writes))
	err = c.answers(func(m netlink.Message) (bool, error) {
		seq := m.Header.Sequence
		if seq-first > last-first || m.Header.Type != netlink.Error {
			return false, nil // left from a request that failed half-way
		}
		errs[seq-first] = replyError(m)
		return seq == last, nil
	})
	if err != nil {
		return nil, err
	}
	return errs, nil
}

// dump sends one dump request of the type with the payload and returns
// the payload of each message of the answer (copies, not the connection's
// buffer), until the kernel's NLMSG_DONE.
func (c *tcConn) dump(typ uint16, payload []byte) ([][]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	seq := c.seq
	if err := c.send(appendNlmsg(nil, typ, netlink.Request|netlink.Dump, seq, payload)); err != nil {
		return nil, &netlink.OpError{Op: "send", Err: err}
	}
	var out [][]byte
	err := c.answers(func(m netlink.Message) (bool, error) {
		if m.Header.Sequence != seq {
			return false, nil
		}
		switch m.Header.Type {
		case netlink.Error:
			return false, replyError(m)
		case netlink.Done:
			// NLMSG_DONE carries the dump's outcome, an int.
			if len(m.Data) >= 4 {
				if code := int32(binary.NativeEndian.Uint32(m.Data)); code < 0 {
					return true, &netlink.OpError{Op: "receive", Err: unix.Errno(-code)}
				}
			}
			return true, nil
		}
		out = append(out, bytes.Clone(m.Data))
		return false, nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// classes lists ifindex's traffic control classes; HTB classes come with
// their options (Htb.Parms, and Rate64 and Ceil64 where the kernel sends
// them), others with their kind alone.
func (c *tcConn) classes(ifindex uint32) ([]tc.Object, error) {
	msgs, err := c.dump(unix.RTM_GETTCLASS, appendTcmsg(nil, ifindex, 0, 0))
	if err != nil {
		return nil, err
	}
	classes := make([]tc.Object, 0, len(msgs))
	for _, m := range msgs {
		o, err := decodeClass(m)
		if err != nil {
			return nil, err
		}
		if o.Ifindex == ifindex {
			classes = append(classes, o)
		}
	}
	return classes, nil
}

// qdiscs lists the namespace's qdiscs, each with its interface, handle,
// parent and kind only: what tells whose a root is. It decodes neither
// options nor statistics, which go-tc's listing decodes for every qdisc.
func (c *tcConn) qdiscs() ([]tc.Object, error) {
	msgs, err := c.dump(unix.RTM_GETQDISC, appendTcmsg(nil, 0, 0, 0))
	if err != nil {
		return nil, err
	}
	qdiscs := make([]tc.Object, 0, len(msgs))
	for _, m := range msgs {
		q, err := decodeQdiscMessage(m)
		if err != nil {
			return nil, err
		}
		qdiscs = append(qdiscs, tc.Object{
			Msg:       tc.Msg{Ifindex: q.Ifindex, Handle: q.Handle, Parent: q.Parent},
			Attribute: tc.Attribute{Kind: q.Kind},
		})
	}
	return qdiscs, nil
}

// HTB's class options (TCA_HTB_*, include/uapi/linux/pkt_sched.h).
const (
	htbParms  = 1
	htbRate64 = 6
	htbCeil64 = 7
)

// htbOptLen is the size of struct tc_htb_opt: two struct tc_ratespec of 12
// bytes, then buffer, cbuffer, quantum, level and prio.
const htbOptLen = 44

// decodeClass decodes an RTM_NEWTCLASS message's payload.
func decodeClass(b []byte) (tc.Object, error) {
	if len(b) < tcmsgLen {
		return tc.Object{}, fmt.Errorf("class message of %d bytes is shorter than its %d-byte header", len(b), tcmsgLen)
	}
	o := tc.Object{Msg: tc.Msg{
		Family:  uint32(b[0]),
		Ifindex: binary.NativeEndian.Uint32(b[4:8]),
		Handle:  binary.NativeEndian.Uint32(b[8:12]),
		Parent:  binary.NativeEndian.Uint32(b[12:16]),
		Info:    binary.NativeEndian.Uint32(b[16:20]),
	}}
	ad, err := netlink.NewAttributeDecoder(b[tcmsgLen:])
	if err != nil {
		return o, fmt.Errorf("invalid class attributes: %w", err)
	}
	var options []byte
	for ad.Next() {
		switch ad.Type() {
		case tcaKind:
			o.Kind = ad.String()
		case tcaOptions:
			options = ad.Bytes()
		}
	}
	if err := ad.Err(); err != nil {
		return o, fmt.Errorf("invalid class attributes: %w", err)
	}
	if o.Kind != "htb" || options == nil {
		return o, nil
	}
	o.Htb = &tc.Htb{}
	ad, err = netlink.NewAttributeDecoder(options)
	if err != nil {
		return o, fmt.Errorf("invalid HTB class options: %w", err)
	}
	for ad.Next() {
		switch ad.Type() {
		case htbParms:
			p, err := decodeHtbOpt(ad.Bytes())
			if err != nil {
				return o, err
			}
			o.Htb.Parms = p
		case htbRate64:
			o.Htb.Rate64 = new(ad.Uint64())
		case htbCeil64:
			o.Htb.Ceil64 = new(ad.Uint64())
		}
	}
	if err := ad.Err(); err != nil {
		return o, fmt.Errorf("invalid HTB class options: %w", err)
	}
	return o, nil
}

// decodeHtbOpt decodes struct tc_htb_opt.
func decodeHtbOpt(b []byte) (*tc.HtbOpt, error) {
	if len(b) < htbOptLen {
		return nil, fmt.Errorf("TCA_HTB_PARMS of %d bytes is shorter than struct tc_htb_opt (%d)", len(b), htbOptLen)
	}
	u32 := func(off int) uint32 { return binary.NativeEndian.Uint32(b[off:]) }
	return &tc.HtbOpt{
		Rate: decodeRateSpec(b[0:12]), Ceil: decodeRateSpec(b[12:24]),
		Buffer: u32(24), Cbuffer: u32(28), Quantum: u32(32), Level: u32(36), Prio: u32(40),
	}, nil
}

// decodeRateSpec decodes struct tc_ratespec: cell_log and linklayer u8,
// overhead, cell_align and mpu u16, rate u32.
func decodeRateSpec(b []byte) tc.RateSpec {
	return tc.RateSpec{
		CellLog: b[0], Linklayer: b[1],
		Overhead:  binary.NativeEndian.Uint16(b[2:]),
		CellAlign: binary.NativeEndian.Uint16(b[4:]),
		Mpu:       binary.NativeEndian.Uint16(b[6:]),
		Rate:      binary.NativeEndian.Uint32(b[8:]),
	}
}

// appendRateSpec appends struct tc_ratespec.
func appendRateSpec(b []byte, r tc.RateSpec) []byte {
	b = append(b, r.CellLog, r.Linklayer)
	b = binary.NativeEndian.AppendUint16(b, r.Overhead)
	b = binary.NativeEndian.AppendUint16(b, r.CellAlign)
	b = binary.NativeEndian.AppendUint16(b, r.Mpu)
	return binary.NativeEndian.AppendUint32(b, r.Rate)
}

// htbClassWrite is the request that changes (or makes) HTB class handle
// under parent on ifindex to opts, as `tc class replace … htb` sends it:
// struct tc_htb_opt, and the 64-bit rate and ceiling where opts has them.
func htbClassWrite(ifindex, handle, parent uint32, opts *tc.Htb) (tcWrite, error) {
	if opts == nil || opts.Parms == nil {
		return tcWrite{}, errors.New("HTB class options without TCA_HTB_PARMS")
	}
	p := opts.Parms
	parms := appendRateSpec(nil, p.Rate)
	parms = appendRateSpec(parms, p.Ceil)
	for _, v := range []uint32{p.Buffer, p.Cbuffer, p.Quantum, p.Level, p.Prio} {
		parms = binary.NativeEndian.AppendUint32(parms, v)
	}
	o := appendAttr(nil, htbParms, parms)
	if opts.Rate64 != nil {
		o = appendAttr(o, htbRate64, binary.NativeEndian.AppendUint64(nil, *opts.Rate64))
	}
	if opts.Ceil64 != nil {
		o = appendAttr(o, htbCeil64, binary.NativeEndian.AppendUint64(nil, *opts.Ceil64))
	}
	return tcWrite{
		typ: unix.RTM_NEWTCLASS, flags: netlink.Create,
		ifindex: ifindex, handle: handle, parent: parent,
		kind: "htb", options: o,
	}, nil
}

// bfifoWrite is the request that sets the bfifo qdisc handle under class
// parent to limit bytes, as `tc qdisc change … bfifo limit` sends it: the
// kernel changes it only when it is that bfifo (see htb.resizeLeaves).
func bfifoWrite(ifindex, handle, parent, limit uint32) tcWrite {
	return tcWrite{
		typ: unix.RTM_NEWQDISC, ifindex: ifindex, handle: handle, parent: parent,
		kind: "bfifo", options: binary.NativeEndian.AppendUint32(nil, limit),
	}
}

// cakeRateWrite is the request that sets the root cake qdisc handle on
// ifindex to bytes/s and turns autorate-ingress off (see cakeRateChange).
func cakeRateWrite(ifindex, handle uint32, bytes uint64) tcWrite {
	return cakeAutorateWrite(ifindex, handle, bytes, false)
}

// cakeAutorateWrite is cakeRateWrite with autorate-ingress on or off: on,
// CAKE starts at bytes/s and sets its own rate from its estimate at the end
// of its next packet train (see cake.yield).
func cakeAutorateWrite(ifindex, handle uint32, bytes uint64, autorate bool) tcWrite {
	on := uint32(0)
	if autorate {
		on = 1
	}
	o := appendAttr(nil, cakeBaseRate64, binary.NativeEndian.AppendUint64(nil, bytes))
	o = appendAttr(o, cakeAutorate, binary.NativeEndian.AppendUint32(nil, on))
	return tcWrite{
		typ: unix.RTM_NEWQDISC, ifindex: ifindex, handle: handle, parent: tc.HandleRoot,
		kind: "cake", options: o,
	}
}
