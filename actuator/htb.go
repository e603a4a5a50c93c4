package actuator

import (
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/florianl/go-tc"
	"github.com/florianl/go-tc/core"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Handles of the HTB tree autoshape builds, as tc prints them: the root
// qdisc a5: (OwnRootHandle), the class a5:1 that holds the rate and, where
// the kernel has fq_codel, the leaf qdisc 10: under that class. Without
// fq_codel class a5:1 has the priority split's classes a5:11 and a5:12
// under it instead (see htbsplit.go); a tree with a bfifo leaf 10: is what
// earlier versions built there, and SetRate still resizes it.
const (
	htbRootHandle         = OwnRootHandle // a5:
	htbClassHandle        = OwnHTBClass   // a5:1
	htbLeafHandle  uint32 = 0x0010_0000   // 10:
)

// Sizes in bytes that the HTB tree is built from.
const (
	// htbMTU is one full Ethernet frame, the smallest burst and quantum
	// that lets a class send a whole packet at once.
	htbMTU = 1514
	// htbMaxQuantum is the largest quantum HTB takes without complaint.
	htbMaxQuantum = 200_000
	// htbR2Q is the root's rate-to-quantum divisor (tc's default).
	htbR2Q = 10
	// htbFqCodelLimit is fq_codel's packet limit (the kernel's default).
	htbFqCodelLimit = 10240
)

// minHTBRate is the lowest rate HTB is given, in bit/s: below it one
// frame's transmit time no longer fits the kernel's 32-bit tick counts.
const minHTBRate = 8000

// Link layers in a tc_ratespec (TC_LINKLAYER_*).
const (
	tcLinkLayerEthernet uint8 = 1
	tcLinkLayerATM      uint8 = 2
)

// clockOnce reads the kernel's packet scheduler clock (/proc/net/psched)
// once: HTB's burst sizes are written in its ticks.
var (
	clockOnce sync.Once
	clockErr  error
)

// InitClock reads the packet scheduler's clock into go-tc's core package,
// once per process. Everything in the process that converts times to ticks
// with go-tc's core (core.XmitTime) must call it, and nothing may call
// core.InitializeClock itself: that writes the package's globals, and a
// second writer races with every reader.
func InitClock() error { return initClock() }

func initClock() error {
	clockOnce.Do(func() {
		if err := core.InitializeClock(); err != nil {
			clockErr = fmt.Errorf("failed to read the packet scheduler clock: %w", err)
		}
	})
	return clockErr
}

// An htb is the fallback backend: a root HTB qdisc a5: whose class a5:1
// holds the rate. Where the kernel has fq_codel, a5:1 is the default class
// and fq_codel its leaf 10:, which isolates flows by itself. Where it has
// not, a5:1 is the parent of a priority split (htbsplit.go): small packets
// (TCP ACKs, probes, DNS) go by u32 filters to class a5:11, guaranteed 7/8
// of the rate, with a bfifo of its own; the rest to the default class a5:12,
// guaranteed 1/8, whose bfifo holds 5 ms of the rate and at least 4 full
// frames. Both borrow up to the rate, and SetRate scales all three classes.
// On someone else's HTB X: (attach mode) only its class X:1 is changed.
// Every change and delete first checks that the root is still the HTB it
// works on.
//
// HTB knows Ethernet and ATM framing. PTM (VDSL2's 64/65 coding) is not an
// HTB link layer: with PTM framing the rate given to the kernel is scaled by
// 64/65 and Rate scales it back, so a PTM line is shaped as if its rate were
// 64/65 of the sync rate, which is what the coding leaves for packets.
//
// An htb serialises its own calls; its connection must not be used by
// anything else at the same time.
type htb struct {
	mu      sync.Mutex
	conn    *tcConn
	framing Framing
	// root is the root qdisc's handle: htbRootHandle for the tree
	// autoshape builds, someone else's in attach mode.
	root uint32
}

var _ backend = (*htb)(nil)

// newHTB returns an HTB backend that talks to the kernel over conn and
// builds classes with framing f. It turns on extended acknowledgements on
// conn so that errors carry the kernel's message.
func newHTB(conn *tcConn, f Framing) *htb {
	// Best effort: without extended acks errors still carry the errno.
	_ = conn.SetOption(netlink.ExtendedAcknowledge, true)
	return &htb{conn: conn, framing: f, root: htbRootHandle}
}

// topClass is the class that holds the rate: X:1 under the root X:.
func (h *htb) topClass() uint32 { return h.root&0xffff_0000 | 1 }

// Kind returns "htb".
func (h *htb) Kind() string { return "htb" }

// Create builds root qdisc a5:, class a5:1 at bps and the fq_codel leaf 10:
// on ifindex, or the priority split where the kernel has no fq_codel. The
// kernel refuses it when the interface has a root qdisc other than its
// default one, and the error then wraps fs.ErrExist (unix.EEXIST), unless
// replace is set: then the new root takes that one's place. On any failure
// it deletes what it had built.
func (h *htb) Create(ifindex uint32, bps uint64, replace bool) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	const op = "create HTB"
	if err := h.framing.checkHTB(); err != nil {
		return opErr(op, ifindex, err)
	}
	if err := initClock(); err != nil {
		return opErr(op, ifindex, err)
	}
	bytes, err := htbBytesPerSecond(bps, h.framing.LinkLayer)
	if err != nil {
		return opErr(op, ifindex, err)
	}
	err = h.buildFqCodel(ifindex, bytes, replace)
	if errors.Is(err, errNoFqCodel) {
		// HTB's default class is fixed when the root is made, and it
		// differs between the two trees: build the root again.
		err = h.buildSplit(ifindex, bytes)
	}
	if err != nil {
		return opErr(op, ifindex, err)
	}
	return nil
}

// errNoFqCodel says that the kernel lacks fq_codel, and that buildFqCodel
// has deleted what it had built.
var errNoFqCodel = errors.New("the kernel has no fq_codel")

// buildFqCodel adds root a5: with default class a5:1 (in place of the
// root there with replace), class a5:1 at bytes/s and the fq_codel leaf
// 10:. On any failure it deletes the root again; it returns errNoFqCodel
// when the kernel has no fq_codel and the root is gone.
func (h *htb) buildFqCodel(ifindex uint32, bytes uint64, replace bool) error {
	if err := h.addRoot(ifindex, htbClassHandle, replace); err != nil {
		return err
	}
	spec := htbRateSpec(h.framing)
	if err := h.addClass(ifindex, htbClassHandle, htbRootHandle, htbClassOptions(bytes, spec, htbQuantum(bytes), 0)); err != nil {
		return h.undo(ifindex, fmt.Errorf("failed to add class %s: %w", handleString(htbClassHandle), err))
	}
	msg := tc.Msg{Family: unix.AF_UNSPEC, Ifindex: ifindex, Handle: htbLeafHandle, Parent: htbClassHandle}
	limit, ecn := uint32(htbFqCodelLimit), uint32(1)
	err := h.conn.Qdisc().Add(&tc.Object{Msg: msg, Attribute: tc.Attribute{
		Kind: "fq_codel", FqCodel: &tc.FqCodel{Limit: &limit, ECN: &ecn},
	}})
	switch {
	case err == nil:
		return nil
	// A kernel without the kind answers ENOENT ("Specified qdisc kind is
	// unknown"); anything else is a real failure.
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.EOPNOTSUPP):
		if derr := h.deleteRoot(ifindex); derr != nil {
			return fmt.Errorf("the kernel has no fq_codel, and failed to delete the HTB to build it again without: %w", derr)
		}
		return errNoFqCodel
	}
	return h.undo(ifindex, fmt.Errorf("failed to add fq_codel leaf 10: %w", err))
}

// addRoot adds the root HTB qdisc a5: with default class defcls; with
// replace it takes the place of the root there.
func (h *htb) addRoot(ifindex, defcls uint32, replace bool) error {
	root := tc.Object{
		Msg: tc.Msg{Family: unix.AF_UNSPEC, Ifindex: ifindex, Handle: htbRootHandle, Parent: tc.HandleRoot},
		Attribute: tc.Attribute{Kind: "htb", Htb: &tc.Htb{
			Init: &tc.HtbGlob{Version: 3, Rate2Quantum: htbR2Q, Defcls: defcls & 0xffff},
		}},
	}
	if replace {
		return h.conn.Qdisc().Replace(&root)
	}
	// Add, not Replace: the kernel itself refuses to override a root qdisc
	// that is not the default one, with no window between check and write.
	if err := h.conn.Qdisc().Add(&root); err != nil {
		if errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("the interface already has a root qdisc: %w", err)
		}
		return err
	}
	return nil
}

// addClass adds HTB class handle under parent with opts.
func (h *htb) addClass(ifindex, handle, parent uint32, opts *tc.Htb) error {
	return h.conn.Class().Add(&tc.Object{
		Msg:       tc.Msg{Family: unix.AF_UNSPEC, Ifindex: ifindex, Handle: handle, Parent: parent},
		Attribute: tc.Attribute{Kind: "htb", Htb: opts},
	})
}

// undo deletes a half-built tree after err.
func (h *htb) undo(ifindex uint32, err error) error {
	if derr := h.deleteRoot(ifindex); derr != nil {
		return fmt.Errorf("%w (and failed to delete the partial HTB: %v)", err, derr)
	}
	return err
}

// Rate reads the rate of the class that holds it (a5:1 in autoshape's
// tree), in bit/s.
func (h *htb) Rate(ifindex uint32) (uint64, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	class, err := h.class(ifindex)
	if err != nil {
		return 0, opErr("read HTB rate", ifindex, err)
	}
	return bpsFromKernel(classRate(class.Htb), h.framing.LinkLayer), nil
}

// SetRate changes the top class's rate and ceiling to bps, keeping its
// link layer, overhead, MPU, quantum and priority as the kernel holds them,
// so that it also works on a class someone else built, and returns the
// rate the class held. Under autoshape's priority split it also changes
// both children (their shares of bps, bps as ceiling) and resizes the bulk
// bfifo; under a bfifo leaf 10: it resizes that. It writes nothing when the
// kernel already holds what it would write.
func (h *htb) SetRate(ifindex uint32, bps uint64) (uint64, bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	const op = "change HTB rate"
	if err := initClock(); err != nil {
		return 0, false, opErr(op, ifindex, err)
	}
	bytes, err := htbBytesPerSecond(bps, h.framing.LinkLayer)
	if err != nil {
		return 0, false, opErr(op, ifindex, err)
	}
	if _, err := h.conn.getRoot(ifindex, h.root, "htb"); err != nil {
		return 0, false, opErr(op, ifindex, err)
	}
	classes, err := h.classes(ifindex)
	if err != nil {
		return 0, false, opErr(op, ifindex, err)
	}
	class, err := findClass(classes, h.topClass())
	if err != nil {
		return 0, false, opErr(op, ifindex, err)
	}
	from := bpsFromKernel(classRate(class.Htb), h.framing.LinkLayer)
	opts := keptOptions(class.Htb, bytes, bytes)
	if children, ok := findSplit(classes, class.Handle); ok {
		wrote, err := h.setSplitRate(ifindex, bytes, class, opts, children)
		if err != nil {
			return from, false, opErr(op, ifindex, err)
		}
		return from, wrote, nil
	}
	if sameClassRate(class.Htb, opts) {
		return from, false, nil
	}
	// The leaf first, so that a retry after a failed class write finds the
	// old rate and does both again. A leaf class reports its qdisc's
	// handle in tcm_info; only a leaf autoshape made can be its bfifo.
	var leaves []leafSize
	if class.Info == htbLeafHandle {
		leaves = append(leaves, leafSize{htbLeafHandle, class.Handle, bfifoLimit(bytes)})
	}
	w, err := htbClassWrite(ifindex, class.Handle, class.Parent, opts)
	if err != nil {
		return from, false, opErr(op, ifindex, err)
	}
	if err := h.write(ifindex, leaves, []tcWrite{w}); err != nil {
		return from, false, opErr(op, ifindex, err)
	}
	return from, true, nil
}

// updateOwn changes the top class's rate in place when the class holds
// the backend's framing (HTB's qdisc itself takes no change): SetRate keeps
// the class's framing and the tree under it.
func (h *htb) updateOwn(ifindex uint32, bps uint64) (bool, error) {
	h.mu.Lock()
	if err := h.framing.checkHTB(); err != nil {
		h.mu.Unlock()
		return false, err
	}
	class, err := h.class(ifindex)
	h.mu.Unlock()
	if err != nil {
		return false, err
	}
	have, want := class.Htb.Parms.Rate, htbRateSpec(h.framing)
	if have.Linklayer != want.Linklayer || have.Overhead != want.Overhead || have.Mpu != want.Mpu {
		return false, nil
	}
	_, _, err = h.SetRate(ifindex, bps)
	return true, err
}

// keptOptions are the options that give class c the rate and ceiling (in
// bytes/s), keeping its link layer, overhead, MPU, quantum and priority as
// the kernel holds them.
func keptOptions(c *tc.Htb, rate, ceil uint64) *tc.Htb {
	old := c.Parms
	quantum := old.Quantum
	if quantum == 0 {
		quantum = htbQuantum(rate)
	}
	return htbChildOptions(rate, ceil, old.Rate, quantum, old.Prio)
}

// A leafSize is a bfifo leaf's handle, its class and its size in bytes.
type leafSize struct{ handle, parent, limit uint32 }

// write resizes each bfifo leaf and then makes the class writes, all in
// one batch, in that order, and returns the first class write's error. A
// leaf is resized without reading it first: the kernel changes a qdisc
// only when it is the one the request names, the bfifo with the handle
// under the class, and otherwise refuses (EINVAL for another kind with
// that handle, EEXIST for another handle, ENOENT for the kernel's default
// leaf), changing nothing; such a leaf is left alone. A leaf that fails
// for another reason is reported, but the classes after it in the batch
// are written all the same: its size is set again at the next rate change.
func (h *htb) write(ifindex uint32, leaves []leafSize, classes []tcWrite) error {
	writes := make([]tcWrite, 0, len(leaves)+len(classes))
	for _, l := range leaves {
		writes = append(writes, bfifoWrite(ifindex, l.handle, l.parent, l.limit))
	}
	writes = append(writes, classes...)
	errs, err := h.conn.exec(writes)
	if err != nil {
		return err
	}
	for i, err := range errs {
		switch {
		case err == nil:
		case i < len(leaves) && (errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EEXIST) || errors.Is(err, unix.ENOENT)):
			// another kind of leaf, or none
		case i < len(leaves):
			l := leaves[i]
			return fmt.Errorf("failed to resize bfifo leaf %s to %d bytes: %w", handleString(l.handle), l.limit, err)
		default:
			return fmt.Errorf("failed to change class %s: %w", handleString(writes[i].handle), err)
		}
	}
	return nil
}

// Stats reads the root HTB qdisc's counters, with one request for that
// qdisc alone. The kernel counts at the root every packet that passes any
// of its leaves, and its backlog is what all leaves hold; the root's drops
// include those of the leaves (a full bfifo, fq_codel's AQM), which the top
// class's do not. Another root gives an error wrapping ErrNoQdisc.
func (h *htb) Stats(ifindex uint32) (Stats, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	q, err := h.conn.getRoot(ifindex, h.root, "htb")
	if err != nil {
		return Stats{}, opErr("read HTB stats", ifindex, err)
	}
	if q.Counters == nil {
		return Stats{}, opErr("read HTB stats", ifindex, errors.New("the kernel sent no statistics"))
	}
	st := *q.Counters
	st.WireBytes = h.framing.WireTotal(st.Bytes, st.Packets)
	return st, nil
}

// checkRoot returns ifindex's root qdisc when it is the HTB the backend
// works on; any other root gives an error wrapping ErrNoQdisc that names
// it.
func (h *htb) checkRoot(ifindex uint32) (tc.Object, error) {
	qdiscs, err := h.conn.qdiscs()
	if err != nil {
		return tc.Object{}, fmt.Errorf("failed to read qdiscs: %w", err)
	}
	for _, q := range qdiscs {
		if q.Ifindex != ifindex || q.Parent != tc.HandleRoot {
			continue
		}
		if q.Kind != "htb" || q.Handle != h.root {
			return q, fmt.Errorf("the root qdisc is %s %s, not the htb %s: %w", q.Kind, handleString(q.Handle), handleString(h.root), ErrNoQdisc)
		}
		return q, nil
	}
	return tc.Object{}, fmt.Errorf("no root qdisc: %w", ErrNoQdisc)
}

// statsFromTC converts the kernel's struct tc_stats.
func statsFromTC(s *tc.Stats) Stats {
	return Stats{
		Bytes:   s.Bytes,
		Packets: uint64(s.Packets),
		Drops:   uint64(s.Drops),
		Backlog: uint64(s.Backlog),
	}
}

// Remove deletes the root HTB qdisc the backend works on and everything
// under it. An interface with only its default root qdisc is left as it
// is; another root qdisc is an error wrapping ErrNoQdisc, and is not
// deleted.
func (h *htb) Remove(ifindex uint32) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	const op = "remove HTB"
	q, err := h.checkRoot(ifindex)
	switch {
	case err != nil && (q.Kind == "" || q.Handle == 0):
		// The kernel's default root, or none: nothing of ours.
		return nil
	case err != nil:
		return opErr(op, ifindex, err)
	}
	if err := h.deleteRoot(ifindex); err != nil {
		return opErr(op, ifindex, err)
	}
	return nil
}

// deleteRoot deletes the root qdisc if it is the backend's HTB: with the
// handle and the kind in the request, the kernel deletes no other.
func (h *htb) deleteRoot(ifindex uint32) error {
	return h.conn.Qdisc().Delete(&tc.Object{
		Msg:       tc.Msg{Family: unix.AF_UNSPEC, Ifindex: ifindex, Handle: h.root, Parent: tc.HandleRoot},
		Attribute: tc.Attribute{Kind: "htb", Htb: &tc.Htb{}},
	})
}

// class reads the top HTB class of ifindex.
func (h *htb) class(ifindex uint32) (tc.Object, error) {
	classes, err := h.classes(ifindex)
	if err != nil {
		return tc.Object{}, err
	}
	return findClass(classes, h.topClass())
}

// classes reads the traffic control classes of ifindex.
func (h *htb) classes(ifindex uint32) ([]tc.Object, error) {
	classes, err := h.conn.classes(ifindex)
	if err != nil {
		return nil, fmt.Errorf("failed to read classes: %w", err)
	}
	return classes, nil
}

// findClass returns the HTB class with the handle among classes.
func findClass(classes []tc.Object, handle uint32) (tc.Object, error) {
	for _, c := range classes {
		if c.Handle == handle && c.Kind == "htb" && c.Htb != nil && c.Htb.Parms != nil {
			return c, nil
		}
	}
	return tc.Object{}, fmt.Errorf("no HTB class %s: %w", handleString(handle), ErrNoQdisc)
}

// opErr wraps err with the operation and interface, and says which
// capability is missing when the kernel refused for lack of privilege.
func opErr(op string, ifindex uint32, err error) error {
	if errors.Is(err, unix.EPERM) {
		return fmt.Errorf("failed to %s on ifindex %d: %w (autoshape needs CAP_NET_ADMIN)", op, ifindex, err)
	}
	return fmt.Errorf("failed to %s on ifindex %d: %w", op, ifindex, err)
}

// checkHTB reports whether HTB can account for f.
func (f Framing) checkHTB() error {
	switch {
	case f.Overhead < 0 || f.Overhead > math.MaxUint16:
		return fmt.Errorf("overhead %d bytes out of HTB's range 0 to 65535", f.Overhead)
	case f.MPU > math.MaxUint16:
		return fmt.Errorf("MPU %d bytes out of HTB's range 0 to 65535", f.MPU)
	case f.LinkLayer != Ethernet && f.LinkLayer != ATM && f.LinkLayer != PTM:
		return fmt.Errorf("unknown link layer %d", f.LinkLayer)
	}
	return nil
}

// htbRateSpec is the rate spec's framing part for f; checkHTB has
// validated f.
func htbRateSpec(f Framing) tc.RateSpec {
	ll := tcLinkLayerEthernet
	if f.LinkLayer == ATM {
		ll = tcLinkLayerATM
	}
	return tc.RateSpec{Linklayer: ll, Overhead: uint16(f.Overhead), Mpu: uint16(f.MPU)}
}

// htbBytesPerSecond converts bps to the bytes/s HTB is given: PTM framing
// leaves 64 of every 65 bytes for packets.
func htbBytesPerSecond(bps uint64, ll LinkLayer) (uint64, error) {
	if bps < minHTBRate {
		return 0, fmt.Errorf("rate %d bit/s below HTB's minimum of %d bit/s", bps, minHTBRate)
	}
	if ll == PTM {
		// bps × 64/65 / 8, in one division so that bpsFromKernel can
		// find the bucket of rates that map to the same value.
		return bps/65*8 + bps%65*8/65, nil
	}
	return bps / 8, nil
}

// bpsFromKernel converts the bytes/s HTB holds back to bit/s. Several bit/s
// map to one bytes/s; it returns the whole kbit/s among them if there is one
// (autoshape writes whole kbit/s, so a rate read back equals the rate
// written), else the smallest.
func bpsFromKernel(bytes uint64, ll LinkLayer) uint64 {
	// The bit/s that map to bytes are [lo, hi].
	lo, hi := bytes*8, bytes*8+7
	if ll == PTM {
		// bytes = ⌊bps×8/65⌋ ⇔ bytes×65 ≤ bps×8 < (bytes+1)×65.
		lo = (bytes*65 + 7) / 8
		hi = ((bytes+1)*65+7)/8 - 1
	}
	if kbit := (lo + 999) / 1000 * 1000; kbit <= hi {
		return kbit
	}
	return lo
}

// htbClassOptions are the top class's options at bytes/s with the framing of
// spec: rate and ceiling equal, buffers of one burst.
func htbClassOptions(bytes uint64, spec tc.RateSpec, quantum, prio uint32) *tc.Htb {
	return htbChildOptions(bytes, bytes, spec, quantum, prio)
}

// sameClassRate reports whether the class the kernel holds already has the
// rate, ceiling and buffers of want.
func sameClassRate(have *tc.Htb, want *tc.Htb) bool {
	h, w := have.Parms, want.Parms
	return classRate(have) == classRate(want) && classCeil(have) == classCeil(want) &&
		h.Buffer == w.Buffer && h.Cbuffer == w.Cbuffer
}

// classRate is an HTB class's rate in bytes/s.
func classRate(o *tc.Htb) uint64 {
	if o.Rate64 != nil {
		return *o.Rate64
	}
	return uint64(o.Parms.Rate.Rate)
}

// classCeil is an HTB class's ceiling in bytes/s.
func classCeil(o *tc.Htb) uint64 {
	if o.Ceil64 != nil {
		return *o.Ceil64
	}
	return uint64(o.Parms.Ceil.Rate)
}

// burstBytes is the burst a class may send at once at bytes/s: 1 ms of the
// rate, at least one full frame.
func burstBytes(bytes uint64) uint32 {
	return uint32(min(max(bytes/1000, htbMTU), math.MaxUint32))
}

// htbQuantum is the class's DRR quantum at bytes/s: rate/r2q as HTB would
// pick it, bounded to what HTB accepts without warnings.
func htbQuantum(bytes uint64) uint32 {
	return uint32(min(max(bytes/htbR2Q, htbMTU), htbMaxQuantum))
}

// bfifoLimit is the size of a bfifo leaf 10: at bytes/s, as earlier versions
// built it: 5 ms of the rate, at least two full frames.
func bfifoLimit(bytes uint64) uint32 {
	return uint32(min(max(bytes*5/1000, 2*htbMTU), math.MaxUint32))
}
