package controller

import "context"

// A Shaper sets the rate of one direction's shaper and reads its counters.
// The controller writes to the kernel only through it; whoever wires a real
// shaper to a controller adapts it to this interface.
type Shaper interface {
	// SetRate changes the shaper's rate to bps bit/s, writing only when the
	// shaper holds another rate.
	SetRate(ctx context.Context, bps uint64) (Change, error)
	// Stats reads the shaper's counters.
	Stats(ctx context.Context) (ShaperStats, error)
}

// A Change says what SetRate did, for the decision log.
type Change struct {
	// Iface is the interface whose shaper was set; Kind its qdisc's kind.
	Iface, Kind string
	// Wrote is false when the shaper already held the rate: nothing was
	// written.
	Wrote bool
}

// ShaperStats are the counters of a shaper at one instant that the
// controller turns into load, offered rate and backlog.
type ShaperStats struct {
	// Bytes and Packets sent by the shaper since it was created.
	Bytes, Packets uint64
	// WireBytes is Bytes as the shaper's rate counts them (with the line's
	// framing); 0 means the same as Bytes.
	WireBytes uint64
	// Drops counts packets the shaper dropped.
	Drops uint64
	// Backlog is the number of bytes queued in the shaper.
	Backlog uint64
	// CapacityEstimate is CAKE's ingress capacity estimate in bit/s, 0 when
	// the shaper has none. It means something only while AutorateIngress
	// is on.
	CapacityEstimate uint64
	// AutorateIngress is CAKE's autorate-ingress: the estimate is live.
	AutorateIngress bool
	// Rate is the rate the shaper holds now, in bit/s, 0 when unknown. It
	// differs from the one last written while CAKE sets its own (see
	// Yielder).
	Rate uint64
}

// A Yielder is a Shaper that can hand its rate to CAKE's
// autorate-ingress, which then sets the rate itself from its capacity
// estimate; the next SetRate that writes takes the rate back.
type Yielder interface {
	// Yield turns autorate-ingress on, with CAKE's rate at bps bit/s until
	// it sets its own.
	Yield(ctx context.Context, bps uint64) (Change, error)
}
