package actuator

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/florianl/go-tc"
	"github.com/florianl/go-tc/core"
	"golang.org/x/sys/unix"
)

// The priority split is what the HTB backend builds where the kernel has no
// fq_codel: a drop-tail FIFO alone does not isolate flows, so TCP ACKs,
// latency probes and DNS would wait behind bulk data (on a slow upload, a
// download's ACKs then hold back the download). As in wondershaper and
// sqm-scripts' simple.qos, small packets go to a class of their own that
// HTB serves first:
//
//	root a5: htb default 0x12
//	└── class a5:1   rate R ceil R          (the rate autoshape owns)
//	    ├── class a5:11  prio 0, rate 7R/8 ceil R → bfifo 11: (sparse)
//	    └── class a5:12  prio 1, rate R/8  ceil R → bfifo 12: (bulk)
//	u32 filters on a5:, to a5:11: IPv4 total length < 256 (pref 1),
//	IPv6 payload length < 256 (pref 2)
//
// Everything else goes to the default class a5:12. HTB sends from a class
// within its own rate without asking the parent, and prio only orders
// borrowing, so it is the sparse class's large guaranteed rate, not its
// prio, that lets small packets pass a saturated bulk class at once. With
// the sparse class at R/8 instead, a download's ACKs on a 2.2 Mbit/s ADSL
// upload (about 700 a second, two ATM cells each: a quarter of the rate)
// were held to R/8 and the 17.6 Mbit/s download fell to a third of its
// rate; at 7R/8 it gets what ATM framing leaves. The bulk class keeps R/8
// however many small packets come, and both may borrow the whole rate.
const (
	htbSparseClass        = htbRootHandle | 0x11 // a5:11
	htbBulkClass          = htbRootHandle | 0x12 // a5:12
	htbSparseLeaf  uint32 = 0x0011_0000          // 11:
	htbBulkLeaf    uint32 = 0x0012_0000          // 12:
)

// Sizes and priorities of the split.
const (
	// htbSmallPacket is the IP length below which a packet counts as
	// sparse: pure TCP ACKs (52–92 bytes with options and SACK blocks),
	// ICMP echoes and most DNS queries. The filters test that the high
	// byte of the 16-bit length is zero.
	htbSmallPacket = 256
	// htbSparseFrame is the largest frame the filters send to the sparse
	// class, Ethernet header included (the kernel counts it on egress and
	// on an IFB).
	htbSparseFrame = htbSmallPacket + 14
	// htbBulkShare: the bulk class is guaranteed 1/htbBulkShare of the
	// rate, the sparse class the rest; each may borrow up to the whole
	// rate.
	htbBulkShare = 8
	// Filter preferences (priorities) of the two u32 filters.
	htbSparseIPv4Pref = 1
	htbSparseIPv6Pref = 2
	// tcU32Terminal (TC_U32_TERMINAL) makes a u32 node's match final:
	// without it a match only moves on to the next node.
	tcU32Terminal = 1
)

// htbSplitRates divides a rate of bytes/s between the sparse and the bulk
// class: 1/8 for the bulk class but at least minHTBRate (or half the rate
// when that is less), and the rest for the sparse class. Both sum to the
// rate: a class within its own rate sends without asking its parent, so
// children's rates above the parent's would let more than the rate through.
func htbSplitRates(bytes uint64) (sparse, bulk uint64) {
	bulk = max(bytes/htbBulkShare, min(minHTBRate/8, bytes/2))
	return bytes - bulk, bulk
}

// sparseFifoLimit is the sparse class's bfifo at a rate of bytes/s: 5 ms of
// the rate, at least 4 and at most 64 of the largest sparse frames. The
// controller's own probes wait in this queue: when the rate falls under what
// a download's ACKs need on the upload (on ATM about a third of 2.6 Mbit/s),
// a deeper queue would fill with ACKs and hold the probes for hundreds of
// milliseconds, which the controller would read as bloat and cut further.
// Dropped ACKs cost little: the next one acknowledges the same data.
func sparseFifoLimit(bytes uint64) uint32 {
	return uint32(min(max(bytes*5/1000, 4*htbSparseFrame), 64*htbSparseFrame))
}

// bulkFifoLimit is the bulk class's bfifo at a rate of bytes/s: 5 ms of the
// rate, at least 4 full frames (6056 bytes; 5 ms is more from 9.7 Mbit/s).
// A drop-tail queue keeps a link busy through TCP's window halvings when it
// holds about the path's bandwidth-delay product divided by the square root
// of the number of flows; at 2.2 Mbit/s over a 40 ms path with 4 flows
// that is 5.5 kB, about 4 frames, where the 2 frames of 5 ms hold half of
// it. Four frames are also the smallest window whose loss three duplicate
// ACKs can report, for fast retransmit instead of a timeout. Sparse packets
// do not wait in this queue, so its depth (22 ms at 2.2 Mbit/s) delays bulk
// data only, not ACKs or probes. In the namespace lab (0.05 ms between
// namespaces) 2, 4 and 8 frames kept a loaded 2.2 Mbit/s upload equally
// full: what held it back there was ACKs and data sharing one FIFO.
func bulkFifoLimit(bytes uint64) uint32 {
	return uint32(min(max(bytes*5/1000, 4*htbMTU), math.MaxUint32))
}

// htbChildOptions are a class's options at rate bytes/s, borrowing up to
// ceil bytes/s, with the framing of spec: buffers of one burst at each.
func htbChildOptions(rate, ceil uint64, spec tc.RateSpec, quantum, prio uint32) *tc.Htb {
	r, c := spec, spec
	r.Rate = uint32(min(rate, math.MaxUint32))
	c.Rate = uint32(min(ceil, math.MaxUint32))
	opts := &tc.Htb{Parms: &tc.HtbOpt{
		Rate: r, Ceil: c,
		Buffer:  core.XmitTime(rate, burstBytes(rate)),
		Cbuffer: core.XmitTime(ceil, burstBytes(ceil)),
		Quantum: quantum, Prio: prio,
	}}
	// Rates of 2^32 bytes/s and more go in 64-bit attributes, with the
	// 32-bit fields saturated (as tc sends them).
	if rate > math.MaxUint32 {
		opts.Rate64 = &rate
	}
	if ceil > math.MaxUint32 {
		opts.Ceil64 = &ceil
	}
	return opts
}

// An htbChild is one class of the split and its leaf at a given rate.
type htbChild struct {
	name        string // for messages: "sparse", "bulk"
	class, leaf uint32
	prio        uint32
	rate        uint64 // bytes/s; the ceiling is the parent's rate
	fifoLimit   uint32 // the leaf bfifo's size in bytes
}

// htbSplit is the split's classes under a rate of bytes/s, sparse first.
func htbSplit(bytes uint64) [2]htbChild {
	sparse, bulk := htbSplitRates(bytes)
	return [2]htbChild{
		{name: "sparse", class: htbSparseClass, leaf: htbSparseLeaf, prio: 0, rate: sparse, fifoLimit: sparseFifoLimit(bytes)},
		{name: "bulk", class: htbBulkClass, leaf: htbBulkLeaf, prio: 1, rate: bulk, fifoLimit: bulkFifoLimit(bytes)},
	}
}

// buildSplit adds root a5: with default class a5:12, class a5:1 at
// bytes/s, the split under it and the filters. On any failure it deletes
// the root again, and with it whatever it had added.
func (h *htb) buildSplit(ifindex uint32, bytes uint64) error {
	if err := h.addRoot(ifindex, htbBulkClass, false); err != nil {
		return err
	}
	spec := htbRateSpec(h.framing)
	if err := h.addClass(ifindex, htbClassHandle, htbRootHandle, htbClassOptions(bytes, spec, htbQuantum(bytes), 0)); err != nil {
		return h.undo(ifindex, fmt.Errorf("failed to add class %s: %w", handleString(htbClassHandle), err))
	}
	for _, c := range htbSplit(bytes) {
		opts := htbChildOptions(c.rate, bytes, spec, htbQuantum(c.rate), c.prio)
		if err := h.addClass(ifindex, c.class, htbClassHandle, opts); err != nil {
			return h.undo(ifindex, fmt.Errorf("failed to add %s class %s: %w", c.name, handleString(c.class), err))
		}
		err := h.conn.Qdisc().Add(&tc.Object{
			Msg:       tc.Msg{Family: unix.AF_UNSPEC, Ifindex: ifindex, Handle: c.leaf, Parent: c.class},
			Attribute: tc.Attribute{Kind: "bfifo", Bfifo: &tc.FifoOpt{Limit: c.fifoLimit}},
		})
		if err != nil {
			return h.undo(ifindex, fmt.Errorf("failed to add bfifo leaf %s: %w", handleString(c.leaf), err))
		}
	}
	for _, s := range sparseFilterSpecs {
		if err := h.conn.Filter().Add(s.object(ifindex)); err != nil {
			return h.undo(ifindex, fmt.Errorf("failed to add the %s filter to %s: %w", s.name, handleString(htbSparseClass), err))
		}
	}
	return nil
}

// findSplit returns the split's two classes among an interface's classes
// when autoshape built it under the top class X:1: classes X:11 and X:12
// whose leaves are 11: and 12:. Someone else's tree (sqm-scripts'
// simple.qos also numbers its classes 1:11 to 1:13, with leaves 110: to
// 130:) is not the split; ok is false then.
func findSplit(classes []tc.Object, top uint32) (children [2]tc.Object, ok bool) {
	major := top & 0xffff_0000
	want := [2]struct{ class, leaf uint32 }{{major | 0x11, htbSparseLeaf}, {major | 0x12, htbBulkLeaf}}
	found := 0
	for _, c := range classes {
		if c.Kind != "htb" || c.Htb == nil || c.Htb.Parms == nil || c.Parent != top {
			continue
		}
		for i, w := range want {
			// A leaf class reports its qdisc's handle in tcm_info.
			if c.Handle == w.class && c.Info == w.leaf {
				children[i] = c
				found++
			}
		}
	}
	return children, found == len(want)
}

// setSplitRate changes the split to a rate of bytes/s: the top class to top,
// both children to their shares with the rate as ceiling, and both bfifos
// to their sizes at the rate. Each keeps its link layer, overhead, MPU,
// quantum and priority as the kernel holds them, and only what differs is
// written, so that after a failure part-way the next SetRate does what is
// left. All go in one batch, leaves first, the top class last.
func (h *htb) setSplitRate(ifindex uint32, bytes uint64, class tc.Object, top *tc.Htb, children [2]tc.Object) (bool, error) {
	var writes []tcWrite
	add := func(handle, parent uint32, opts *tc.Htb) error {
		w, err := htbClassWrite(ifindex, handle, parent, opts)
		writes = append(writes, w)
		return err
	}
	split := htbSplit(bytes)
	for i, c := range split {
		want := keptOptions(children[i].Htb, c.rate, bytes)
		if sameClassRate(children[i].Htb, want) {
			continue
		}
		if err := add(children[i].Handle, class.Handle, want); err != nil {
			return false, err
		}
	}
	if !sameClassRate(class.Htb, top) {
		if err := add(class.Handle, class.Parent, top); err != nil {
			return false, err
		}
	}
	if len(writes) == 0 {
		return false, nil
	}
	// The leaves first, as in the single-class tree: the class writes
	// after them are the ones a retry finds undone.
	err := h.write(ifindex, []leafSize{
		{split[0].leaf, children[0].Handle, split[0].fifoLimit},
		{split[1].leaf, children[1].Handle, split[1].fifoLimit},
	}, writes)
	return true, err
}

// handleString writes a handle as tc prints it: "a5:11", "12:".
func handleString(h uint32) string {
	if h&0xffff == 0 {
		return fmt.Sprintf("%x:", h>>16)
	}
	return fmt.Sprintf("%x:%x", h>>16, h&0xffff)
}

// A sparseFilter is one of the u32 filters that send small packets to the
// sparse class.
type sparseFilter struct {
	name     string
	pref     uint16
	protocol uint16
	key      tc.U32Key
}

// sparseFilterSpecs are the filters on root a5:, as iproute2 writes them:
//
//	tc filter add dev DEV parent a5: protocol ip prio 1 u32 \
//		match u16 0 0xff00 at 2 flowid a5:11
//	tc filter add dev DEV parent a5: protocol ipv6 prio 2 u32 \
//		match u16 0 0xff00 at 4 flowid a5:11
//
// u32 offsets count from the network header, on an interface's egress and
// on an IFB alike. The keys are 32-bit words: IPv4's total length is the
// low half of the word at 0, IPv6's payload length the high half of the
// word at 4.
var sparseFilterSpecs = [2]sparseFilter{
	{name: "IPv4", pref: htbSparseIPv4Pref, protocol: unix.ETH_P_IP, key: u32Key(0, 0x0000ff00, 0)},
	{name: "IPv6", pref: htbSparseIPv6Pref, protocol: unix.ETH_P_IPV6, key: u32Key(4, 0xff000000, 0)},
}

// u32Key is a u32 match of the 32-bit word at off (bytes from the network
// header) under mask against val, both as the word reads in network byte
// order. The kernel's tc_u32_key holds mask and value in network byte
// order, and go-tc writes the struct in host order: the fields hold the
// big-endian bytes read as a host-order number.
func u32Key(off int32, mask, val uint32) tc.U32Key {
	be := func(v uint32) uint32 {
		return binary.NativeEndian.Uint32(binary.BigEndian.AppendUint32(nil, v))
	}
	return tc.U32Key{Mask: be(mask), Val: be(val), Off: uint32(off)}
}

// object is the filter for ifindex.
func (s sparseFilter) object(ifindex uint32) *tc.Object {
	class := htbSparseClass
	return &tc.Object{
		Msg: tc.Msg{
			Family: unix.AF_UNSPEC, Ifindex: ifindex, Parent: htbRootHandle,
			Info: core.FilterInfo(s.pref, s.protocol),
		},
		Attribute: tc.Attribute{Kind: "u32", U32: &tc.U32{
			ClassID: &class,
			Sel: &tc.U32Sel{
				Flags: tcU32Terminal,
				NKeys: 1,
				Keys:  []tc.U32Key{s.key},
			},
		}},
	}
}
