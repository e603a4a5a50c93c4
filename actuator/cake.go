package actuator

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/florianl/go-tc"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// CAKE's link-layer modes (CAKE_ATM_*, include/uapi/linux/pkt_sched.h),
// checked against what iproute2 sends for noatm, atm and ptm.
const (
	cakeATMNone = 0
	cakeATMATM  = 1
	cakeATMPTM  = 2
)

// A cakeMode is one of the names a CAKE option accepts and the number the
// kernel takes for it.
type cakeMode struct {
	name  string
	value uint32
}

// cakeDiffServModes are CAKE_DIFFSERV_*, checked against iproute2.
var cakeDiffServModes = []cakeMode{
	{"diffserv3", 0}, {"diffserv4", 1}, {"diffserv8", 2},
	{"besteffort", 3}, {"precedence", 4},
}

// cakeFlowModes are CAKE_FLOW_*, checked against iproute2.
var cakeFlowModes = []cakeMode{
	{"flowblind", 0}, {"srchost", 1}, {"dsthost", 2}, {"hosts", 3},
	{"flows", 4}, {"dual-srchost", 5}, {"dual-dsthost", 6},
	{"triple-isolate", 7},
}

// cakeAckFilters are CAKE_ACK_*, checked against iproute2.
var cakeAckFilters = []cakeMode{
	{"no-ack-filter", 0}, {"ack-filter", 1}, {"ack-filter-aggressive", 2},
}

// lookupCakeMode finds name among modes; option names the setting in the
// error.
func lookupCakeMode(option, name string, modes []cakeMode) (uint32, error) {
	names := make([]string, 0, len(modes))
	for _, m := range modes {
		if m.name == name {
			return m.value, nil
		}
		names = append(names, m.name)
	}
	return 0, fmt.Errorf("invalid CAKE %s %q: want one of %s", option, name, strings.Join(names, ", "))
}

// cakeAttrs returns the CAKE options for creating a cake qdisc shaping at
// bps bit/s with framing f and options o. It sends what iproute2's tc sends
// for the equivalent command line (compared in the tests against captures in
// testdata/cake):
//   - the rate in bytes per second, and AUTORATE 0, which tc sends with every
//     "bandwidth";
//   - ATM always, since the framing is always known (Ethernet is noatm, the
//     kernel's default);
//   - OVERHEAD only when f.Overhead is not 0: 0 leaves CAKE in its raw mode
//     (the kernel's packet length, MAC header included), as a tc command
//     without an overhead keyword does;
//   - MPU only when not 0;
//   - RTT with TARGET = RTT/20 (at least 1 µs), as tc's "rtt" does;
//   - every other option only when set in o.
func cakeAttrs(bps uint64, f Framing, o CakeOptions) (*tc.Cake, error) {
	// Below 8 bit/s the rate in bytes/s is 0, which CAKE reads as unlimited.
	if bps < 8 {
		return nil, fmt.Errorf("invalid CAKE rate %d bit/s: want at least 8 bit/s (0 bytes/s would leave CAKE unlimited)", bps)
	}
	c := &tc.Cake{BaseRate: new(bps / 8), Autorate: new(uint32(0))}
	if o.AutorateIngress != nil && *o.AutorateIngress {
		c.Autorate = new(uint32(1))
	}

	switch f.LinkLayer {
	case Ethernet:
		c.Atm = new(uint32(cakeATMNone))
	case ATM:
		c.Atm = new(uint32(cakeATMATM))
	case PTM:
		c.Atm = new(uint32(cakeATMPTM))
	default:
		return nil, fmt.Errorf("invalid link layer %d: want Ethernet, ATM or PTM", f.LinkLayer)
	}

	if f.Overhead < -64 || f.Overhead > 256 {
		return nil, fmt.Errorf("invalid CAKE overhead %d bytes: want -64 to 256", f.Overhead)
	}
	if f.Overhead != 0 {
		// The kernel reads the attribute as a signed 32-bit number.
		c.Overhead = new(uint32(int32(f.Overhead)))
	}
	if f.MPU > 256 {
		return nil, fmt.Errorf("invalid CAKE mpu %d bytes: want 0 to 256", f.MPU)
	}
	if f.MPU != 0 {
		c.Mpu = new(f.MPU)
	}

	if o.RTT != 0 {
		us := o.RTT / time.Microsecond
		if us < 1 || us > math.MaxUint32 {
			return nil, fmt.Errorf("invalid CAKE rtt %v: want 1µs to %v", o.RTT, time.Duration(math.MaxUint32)*time.Microsecond)
		}
		rtt := uint32(us)
		c.Rtt = new(rtt)
		c.Target = new(max(rtt/20, 1))
	}
	if o.DiffServ != "" {
		v, err := lookupCakeMode("diffserv mode", o.DiffServ, cakeDiffServModes)
		if err != nil {
			return nil, err
		}
		c.DiffServMode = &v
	}
	if o.FlowMode != "" {
		v, err := lookupCakeMode("flow mode", o.FlowMode, cakeFlowModes)
		if err != nil {
			return nil, err
		}
		c.FlowMode = &v
	}
	if o.AckFilter != "" {
		v, err := lookupCakeMode("ack filter", o.AckFilter, cakeAckFilters)
		if err != nil {
			return nil, err
		}
		c.AckFilter = &v
	}
	c.Nat = cakeBool(o.NAT)
	c.Wash = cakeBool(o.Wash)
	c.Ingress = cakeBool(o.Ingress)
	c.SplitGso = cakeBool(o.SplitGSO)
	if o.Memory != 0 {
		c.Memory = new(o.Memory)
	}
	return c, nil
}

// cakeBool is a CAKE on/off option: nil sends nothing, else 0 or 1.
func cakeBool(b *bool) *uint32 {
	if b == nil {
		return nil
	}
	if *b {
		return new(uint32(1))
	}
	return new(uint32(0))
}

// cakeCreate is the request that creates a root cake qdisc with the given
// handle on ifindex.
func cakeCreate(ifindex, handle uint32, bps uint64, f Framing, o CakeOptions) (*tc.Object, error) {
	attrs, err := cakeAttrs(bps, f, o)
	if err != nil {
		return nil, err
	}
	return &tc.Object{
		Msg: tc.Msg{
			Family:  unix.AF_UNSPEC,
			Ifindex: ifindex,
			Handle:  handle,
			Parent:  tc.HandleRoot,
		},
		Attribute: tc.Attribute{Kind: "cake", Cake: attrs},
	}, nil
}

// cakeRateChange is the request that changes only the rate of ifindex's
// root cake qdisc with the given handle: CAKE's change applies just the
// options present, so the other settings stay. With the handle the kernel
// itself checks that the root is still that cake qdisc; a request without
// one, as "tc qdisc change dev X root cake" sends, makes it replace a root of
// another kind with a new cake qdisc. Like tc's change it sends AUTORATE 0
// with the rate: under autorate-ingress CAKE sets its own rate at the end of
// every packet train, so a rate sent alone would hold for one train (seen
// on the kernel's CAKE in User-mode Linux). The change takes the rate over.
func cakeRateChange(ifindex, handle uint32, bps uint64) (*tc.Object, error) {
	if bps < 8 {
		return nil, fmt.Errorf("invalid CAKE rate %d bit/s: want at least 8 bit/s (0 bytes/s would leave CAKE unlimited)", bps)
	}
	return &tc.Object{
		Msg: tc.Msg{
			Family:  unix.AF_UNSPEC,
			Ifindex: ifindex,
			Handle:  handle,
			Parent:  tc.HandleRoot,
		},
		Attribute: tc.Attribute{Kind: "cake", Cake: &tc.Cake{BaseRate: new(bps / 8), Autorate: new(uint32(0))}},
	}, nil
}

// cake is the CAKE backend: a cake qdisc at the root of the interface,
// written through go-tc; its statistics come from the project's own
// RTM_GETQDISC dump, since go-tc decodes none. It works on the root with
// its handle only, and leaves any other root alone.
type cake struct {
	// mu serialises the use of conn: go-tc sends a request and reads its
	// answer in two steps, so concurrent calls could take each other's
	// answers.
	mu      sync.Mutex
	conn    *tcConn
	framing Framing
	opts    CakeOptions
	// handle is the root qdisc's: OwnRootHandle for the one autoshape
	// creates, that of someone else's in attach mode.
	handle uint32
}

var _ backend = (*cake)(nil)

// newCake returns a CAKE backend that creates its qdiscs with framing f and
// options o. It turns on extended acknowledgements on conn, so that errors
// carry the kernel's explanation.
func newCake(conn *tcConn, f Framing, o CakeOptions) *cake {
	// An old kernel without extended acknowledgements still works, with
	// terser errors.
	_ = conn.SetOption(netlink.ExtendedAcknowledge, true)
	return &cake{conn: conn, framing: f, opts: o, handle: OwnRootHandle}
}

// Kind returns "cake".
func (c *cake) Kind() string { return "cake" }

// Create builds the root cake qdisc on ifindex at bps bit/s. It fails when
// the interface has a root qdisc other than the kernel's default, unless
// replace is set: then the new qdisc takes that one's place. A kernel
// without CAKE gives an error wrapping ErrNotSupported.
func (c *cake) Create(ifindex uint32, bps uint64, replace bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	obj, err := cakeCreate(ifindex, c.handle, bps, c.framing, c.opts)
	if err != nil {
		return fmt.Errorf("failed to create CAKE on ifindex %d: %w", ifindex, err)
	}
	if replace {
		err = c.conn.Qdisc().Replace(obj)
	} else {
		err = c.conn.Qdisc().Add(obj)
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.EOPNOTSUPP):
		// ENOENT is the kernel's answer to an unknown qdisc kind.
		return fmt.Errorf("failed to create CAKE on ifindex %d: %w (try --backend htb): %w", ifindex, ErrNotSupported, err)
	case errors.Is(err, unix.EPERM):
		return fmt.Errorf("failed to create CAKE on ifindex %d (changing traffic control needs CAP_NET_ADMIN): %w", ifindex, err)
	case errors.Is(err, unix.EEXIST):
		return fmt.Errorf("failed to create CAKE on ifindex %d: the interface already has a root qdisc: %w", ifindex, err)
	}
	return fmt.Errorf("failed to create CAKE on ifindex %d: %w", ifindex, err)
}

// updateOwn changes the root cake qdisc in place with every option Create
// would send, when it holds the backend's framing: a change applies only the
// options it carries, and Create sends no overhead or MPU of 0.
func (c *cake) updateOwn(ifindex uint32, bps uint64) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	o, err := c.root(ifindex)
	if err != nil {
		return false, err
	}
	want, err := cakeCreate(ifindex, c.handle, bps, c.framing, c.opts)
	if err != nil {
		return false, err
	}
	if o.Cake == nil || held(o.Cake.Atm) != held(want.Cake.Atm) ||
		int32(held(o.Cake.Overhead)) != int32(held(want.Cake.Overhead)) || held(o.Cake.Mpu) != held(want.Cake.Mpu) {
		return false, nil
	}
	// Without NLM_F_CREATE the kernel changes the root with this handle,
	// and no other qdisc.
	if err := c.conn.Qdisc().Change(want); err != nil {
		return false, fmt.Errorf("failed to change CAKE on ifindex %d: %w", ifindex, err)
	}
	return true, nil
}

// held is an optional attribute's value, 0 when absent.
func held(v *uint32) uint32 {
	if v == nil {
		return 0
	}
	return *v
}

// root returns ifindex's root qdisc, which must be cake with the backend's
// handle; when it is another, the error wraps ErrNoQdisc and names it, and
// the qdisc is returned with it.
func (c *cake) root(ifindex uint32) (tc.Object, error) {
	objs, err := c.conn.Qdisc().Get()
	if err != nil {
		return tc.Object{}, fmt.Errorf("failed to list qdiscs: %w", err)
	}
	for _, o := range objs {
		if o.Ifindex != ifindex || o.Parent != tc.HandleRoot {
			continue
		}
		if o.Kind != "cake" || o.Handle != c.handle {
			return o, fmt.Errorf("root qdisc is %q (%s), not the cake qdisc %s: %w",
				o.Kind, handleString(o.Handle), handleString(c.handle), ErrNoQdisc)
		}
		return o, nil
	}
	return tc.Object{}, fmt.Errorf("no root qdisc: %w", ErrNoQdisc)
}

// Rate reads the rate of ifindex's root cake qdisc in bit/s (a multiple of
// 8: the kernel holds bytes/s).
func (c *cake) Rate(ifindex uint32) (uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	o, err := c.root(ifindex)
	if err != nil {
		return 0, fmt.Errorf("failed to read CAKE rate on ifindex %d: %w", ifindex, err)
	}
	if o.Cake == nil || o.Cake.BaseRate == nil {
		return 0, fmt.Errorf("failed to read CAKE rate on ifindex %d: the kernel sent no rate", ifindex)
	}
	return cakeBits(*o.Cake.BaseRate), nil
}

// SetRate changes only the rate of the backend's root cake qdisc on
// ifindex, to bps bit/s rounded down to whole bytes/s, and returns the rate
// it held. It reads the root with one request for it alone, and writes
// nothing when the root holds the rate already, unless CAKE sets its own
// (autorate-ingress): then the write takes the rate over. An interface
// whose root is another qdisc gives an error wrapping ErrNoQdisc, and the
// root is left as it is.
func (c *cake) SetRate(ifindex uint32, bps uint64) (uint64, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	obj, err := cakeRateChange(ifindex, c.handle, bps)
	if err != nil {
		return 0, false, fmt.Errorf("failed to change CAKE rate on ifindex %d: %w", ifindex, err)
	}
	q, err := c.conn.getRoot(ifindex, c.handle, "cake")
	if errors.Is(err, ErrNoQdisc) {
		// The kernel says only that the root is not autoshape's: the
		// listing names the one in the way.
		if _, rerr := c.root(ifindex); rerr != nil {
			err = rerr
		}
	}
	if err != nil {
		return 0, false, fmt.Errorf("failed to change CAKE rate on ifindex %d: %w", ifindex, err)
	}
	held, err := decodeCakeSettings(q.Options)
	if err != nil {
		return 0, false, fmt.Errorf("failed to change CAKE rate on ifindex %d: %w", ifindex, err)
	}
	from := cakeBits(held.BaseRate)
	// The kernel holds whole bytes per second: a rate within a byte/s of
	// the held one is the held one.
	if from+8 > bps && bps+8 > from && !held.Autorate {
		return from, false, nil
	}
	err = c.change(obj)
	switch {
	case err == nil:
		return from, true, nil
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.EINVAL), errors.Is(err, unix.EEXIST):
		// The root changed since it was read. ENOENT: it is the default
		// qdisc now; EINVAL: another kind with the same handle; EEXIST:
		// another handle (the rate itself is never invalid).
		return from, false, fmt.Errorf("failed to change CAKE rate on ifindex %d: %w: %w", ifindex, ErrNoQdisc, err)
	case errors.Is(err, unix.EPERM):
		return from, false, fmt.Errorf("failed to change CAKE rate on ifindex %d (changing traffic control needs CAP_NET_ADMIN): %w", ifindex, err)
	}
	return from, false, fmt.Errorf("failed to change CAKE rate on ifindex %d: %w", ifindex, err)
}

// yield hands the rate of the backend's root cake qdisc on ifindex to
// autorate-ingress, starting from bps bit/s: CAKE then sets its own rate,
// at the end of its next packet train, to 15/16 of its capacity estimate,
// which resumes from the value it kept while autorate-ingress was off
// (sch_cake.c resets it only when the qdisc is created). It checks first
// that the root is the backend's, and changes nothing when it is not.
func (c *cake) yield(ifindex uint32, bps uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if bps < 8 {
		return fmt.Errorf("invalid CAKE rate %d bit/s: want at least 8 bit/s (0 bytes/s would leave CAKE unlimited)", bps)
	}
	if _, err := c.conn.getRoot(ifindex, c.handle, "cake"); err != nil {
		return fmt.Errorf("failed to turn autorate-ingress on, on ifindex %d: %w", ifindex, err)
	}
	errs, err := c.conn.exec([]tcWrite{cakeAutorateWrite(ifindex, c.handle, bps/8, true)})
	if err == nil {
		err = errs[0]
	}
	if err != nil {
		return fmt.Errorf("failed to turn autorate-ingress on, on ifindex %d: %w", ifindex, err)
	}
	return nil
}

// change sends the rate change obj (from cakeRateChange) as one request,
// read with one system call (see tcConn.exec).
func (c *cake) change(obj *tc.Object) error {
	errs, err := c.conn.exec([]tcWrite{cakeRateWrite(obj.Ifindex, obj.Handle, *obj.Cake.BaseRate)})
	if err != nil {
		return err
	}
	return errs[0]
}

// Stats reads the counters of ifindex's root cake qdisc, with one request
// for that qdisc alone: bytes, packets, drops and backlog from the generic
// statistics (the old struct tc_stats), autorate-ingress from its options,
// the capacity estimate and the tins from CAKE's own statistics. Another
// root gives an error wrapping ErrNoQdisc.
func (c *cake) Stats(ifindex uint32) (Stats, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	q, err := c.conn.getRoot(ifindex, c.handle, "cake")
	if err != nil {
		return Stats{}, fmt.Errorf("failed to read CAKE statistics on ifindex %d: %w", ifindex, err)
	}
	if q.Counters == nil {
		return Stats{}, fmt.Errorf("failed to read CAKE statistics on ifindex %d: the kernel sent no TCA_STATS", ifindex)
	}
	if q.App == nil {
		return Stats{}, fmt.Errorf("failed to read CAKE statistics on ifindex %d: the kernel sent no TCA_STATS_APP", ifindex)
	}
	cs, err := decodeCakeStats(q.App)
	if err != nil {
		return Stats{}, fmt.Errorf("failed to read CAKE statistics on ifindex %d: %w", ifindex, err)
	}
	settings, err := decodeCakeSettings(q.Options)
	if err != nil {
		return Stats{}, fmt.Errorf("failed to read CAKE statistics on ifindex %d: %w", ifindex, err)
	}
	st := *q.Counters
	st.WireBytes = c.framing.WireTotal(st.Bytes, st.Packets)
	st.CapacityEstimate = cs.CapacityEstimate
	st.AutorateIngress = settings.Autorate
	st.Rate = cakeBits(settings.BaseRate)
	st.Tins = cs.Tins
	return st, nil
}

// Remove deletes the backend's root cake qdisc on ifindex. An interface
// with only its default root qdisc (handle 0) is left as it is; one whose
// root is another qdisc is left alone too, with an error wrapping
// ErrNoQdisc.
func (c *cake) Remove(ifindex uint32) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	o, err := c.root(ifindex)
	switch {
	case err != nil && (o.Kind == "" || o.Handle == 0):
		// The default root qdisc (noqueue, pfifo_fast, mq, or cake as
		// net.core.default_qdisc): nothing autoshape created, and the
		// kernel refuses to delete it.
		return nil
	case err != nil:
		return fmt.Errorf("failed to remove CAKE on ifindex %d: %w", ifindex, err)
	}
	// With the handle and the kind, the kernel deletes the root only if it
	// is still this qdisc.
	err = c.conn.Qdisc().Delete(&tc.Object{
		Msg: tc.Msg{
			Family:  unix.AF_UNSPEC,
			Ifindex: ifindex,
			Handle:  c.handle,
			Parent:  tc.HandleRoot,
		},
		// go-tc wants options even for a delete; an empty set is sent as
		// an empty TCA_OPTIONS, which the kernel ignores.
		Attribute: tc.Attribute{Kind: "cake", Cake: &tc.Cake{}},
	})
	if err != nil {
		return fmt.Errorf("failed to remove CAKE on ifindex %d: %w", ifindex, err)
	}
	return nil
}
