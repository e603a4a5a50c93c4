package actuator

import (
	"errors"
	"math"
	"time"
)

// A LinkLayer is the framing below IP that the shaper accounts for.
type LinkLayer int

// Link layers.
const (
	// Ethernet: no cell framing (CAKE's noatm).
	Ethernet LinkLayer = iota
	// ATM: packets padded to whole 48-byte cells sent as 53 bytes (ADSL).
	ATM
	// PTM: 64/65 coding (VDSL2).
	PTM
)

// Framing is the per-packet overhead a shaper accounts for.
type Framing struct {
	// Overhead is added to every packet's length, in bytes; CAKE accepts
	// -64 to 256, HTB 0 to 65535.
	Overhead int
	// MPU is the minimum packet unit in bytes (0: none).
	MPU uint32
	// LinkLayer is the cell framing.
	LinkLayer LinkLayer
}

// WireTotal estimates what bytes sent in packets take on the wire with f:
// each packet's overhead added and, on ATM, the total cut into 48-byte
// cells sent as 53 bytes with half a cell of padding per packet on average;
// on PTM, 65 bytes for every 64. It is linear in bytes and packets, so a
// counter made from it only grows.
func (f Framing) WireTotal(bytes, packets uint64) uint64 {
	b := float64(bytes) + float64(packets)*float64(f.Overhead)
	switch f.LinkLayer {
	case ATM:
		b = (b/atmCellPayload + 0.5*float64(packets)) * atmCellBytes
	case PTM:
		b = b * 65 / 64
	}
	return uint64(math.Max(b, 0))
}

// CakeOptions are CAKE's settings beyond rate and framing. A nil pointer or
// an empty string leaves the kernel's default and sends nothing for it.
type CakeOptions struct {
	// RTT tunes the AQM (CAKE's "rtt"), default 100ms.
	RTT time.Duration
	// DiffServ is "besteffort", "precedence", "diffserv3" (the kernel's
	// default), "diffserv4" or "diffserv8".
	DiffServ string
	// FlowMode is "flowblind", "srchost", "dsthost", "hosts", "flows",
	// "dual-srchost", "dual-dsthost" or "triple-isolate" (the default).
	FlowMode string
	// NAT makes flow isolation look up the conntrack table.
	NAT *bool
	// Wash clears DSCP marks.
	Wash *bool
	// Ingress counts dropped packets against the rate (for an IFB).
	Ingress *bool
	// AutorateIngress makes CAKE estimate the capacity from the packet
	// trains that arrive (its CAPACITY_ESTIMATE statistic) and set its own
	// rate to 15/16 of the estimate at the end of each train. A rate change
	// through a Shaper takes the rate over: it turns autorate-ingress off
	// (as `tc qdisc change ... bandwidth` does), and the estimate then keeps
	// its last value.
	AutorateIngress *bool
	// AckFilter is "no-ack-filter", "ack-filter" or
	// "ack-filter-aggressive".
	AckFilter string
	// SplitGSO splits GSO super-packets (the kernel's default is on).
	SplitGSO *bool
	// Memory limits the queue's memory in bytes (0: automatic).
	Memory uint32
}

// Errors the loop and the command line handle.
var (
	// ErrNoQdisc: the interface has no root qdisc autoshape can use.
	ErrNoQdisc = errors.New("no usable root qdisc")
	// ErrNotSupported: the kernel lacks the qdisc kind.
	ErrNotSupported = errors.New("qdisc kind not supported by this kernel")
)

// A backend builds, changes, reads and removes the shaping on the root of
// one interface. Interfaces are named by index, looked up by the caller for
// every operation (a PPPoE reconnect gives an interface a new index).
type backend interface {
	// Kind is the root qdisc's kind: "cake" or "htb".
	Kind() string
	// Create builds the shaping on ifindex at bps bit/s, with autoshape's
	// root handle. It fails when the interface already has a root qdisc
	// other than the default one, unless replace is set: then the new root
	// takes that one's place.
	Create(ifindex uint32, bps uint64, replace bool) error
	// updateOwn changes autoshape's own root of the backend's kind on
	// ifindex in place to what Create would build at bps bit/s, where it
	// can without a new root: it reports false, having changed nothing,
	// where the root holds another framing than the backend's.
	updateOwn(ifindex uint32, bps uint64) (bool, error)
	// Rate reads the rate the kernel holds, in bit/s.
	Rate(ifindex uint32) (uint64, error)
	// SetRate changes only the rate and disturbs no other setting, and
	// returns the rate the kernel held (bit/s) and whether it wrote: it
	// writes nothing when the kernel holds bps already (within a byte/s)
	// and the qdisc does not set its own rate. It checks first that the
	// root is the backend's qdisc, and changes nothing when it is not.
	SetRate(ifindex uint32, bps uint64) (from uint64, wrote bool, err error)
	// Stats reads the shaper's counters.
	Stats(ifindex uint32) (Stats, error)
	// Remove deletes the backend's root qdisc and everything under it; it
	// deletes no other root.
	Remove(ifindex uint32) error
}

// MinRate returns the lowest rate, in bit/s, that backend b's shaper takes:
// HTB's tick arithmetic needs 8 kbit/s; CAKE needs 1 byte/s (0 would leave
// it unlimited).
func (b Backend) MinRate() float64 {
	if b == HTB {
		return minHTBRate
	}
	return 8
}
