// Package estimator turns raw probe samples and interface counters into an
// Observation per direction: the delay added over the baseline (robust across
// reflectors), whether bloat is detected, the achieved rate, the load ratio and,
// where the shaper has one, CAKE's capacity estimate.
//
// Everything here is pure: time arrives with the inputs, nothing sleeps and
// nothing touches the kernel.
package estimator

import (
	"fmt"
	"time"
)

// A Direction is one way through the router.
type Direction int

// The two directions. Down is traffic from the internet to the LAN (shaped on
// the IFB), Up is traffic towards the internet (shaped on the WAN egress).
const (
	Down Direction = iota
	Up
)

// Directions lists both directions in index order.
var Directions = [2]Direction{Down, Up}

// String returns "down" or "up".
func (d Direction) String() string {
	switch d {
	case Down:
		return "down"
	case Up:
		return "up"
	}
	return fmt.Sprintf("direction(%d)", int(d))
}

// Other returns the opposite direction.
func (d Direction) Other() Direction { return 1 - d }

// A Kind says what a sample's delay measures.
type Kind int

// Kinds of delay sample.
const (
	// RTT is an ICMP echo round trip: it cannot tell which direction is bloated.
	RTT Kind = iota
	// OWDUp is the one-way delay towards the reflector (ICMP timestamp), including
	// an unknown constant clock offset that the baseline cancels.
	OWDUp
	// OWDDown is the one-way delay back from the reflector.
	OWDDown
)

// String returns "rtt", "owd_up" or "owd_down".
func (k Kind) String() string {
	switch k {
	case RTT:
		return "rtt"
	case OWDUp:
		return "owd_up"
	case OWDDown:
		return "owd_down"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// A Sample is one delay measurement from one reflector.
type Sample struct {
	Reflector string
	Kind      Kind
	// Sent is when the probe left the router.
	Sent time.Time
	// Delay is the measured delay. One-way delays may carry any constant clock
	// offset, even a negative one.
	Delay time.Duration
}

// An Observation is what the estimator knows about one direction at one
// instant. Rates are in bit/s.
type Observation struct {
	Time      time.Time
	Direction Direction
	// Delta is the delay added over the baseline, combined across reflectors so
	// that one or two bad reflectors cannot move it (the median of the
	// reflectors' latest fresh deltas). Zero when Reflectors is zero.
	Delta time.Duration
	// Deltas are the per-sample deltas attributed to this direction that arrived
	// since the previous observation, in arrival order (at most
	// MaxPendingDeltas, the newest). The slice is valid only until the next
	// call to Estimator.Observe.
	Deltas []time.Duration
	// Serialisation is the time one full-size packet (Config.MTU plus
	// Config.Overhead) takes at ShaperRate, 0 when the rate is unknown: at low
	// rates that packet is the floor of the delay, so the policies allow for it.
	Serialisation time.Duration
	// Threshold is the delay above which a sample counts as delayed: the latency
	// budget plus Serialisation.
	Threshold time.Duration
	// Bloat is true when enough of the last samples of this direction were
	// delayed (see Config.Window and Config.Delayed) and, for echo-only samples,
	// the blame falls on this direction.
	Bloat bool
	// Achieved is the rate through the shaper over the last counter interval.
	Achieved float64
	// Offered is the rate at which traffic reached the shaper over the same
	// interval, counted as Achieved is: what it sent, dropped and added to
	// its queue (0 when not measured). On download, while the link upstream
	// holds a queue, it is what the link delivers: its capacity, however
	// low the shaper's rate.
	Offered float64
	// ShaperRate is the shaper's rate when the observation was made.
	ShaperRate float64
	// Load is Achieved / ShaperRate (0 when the rate is unknown).
	Load float64
	// CapacityEstimate is CAKE's own capacity estimate, 0 when there is none.
	CapacityEstimate float64
	// Backlog is the number of bytes queued in the shaper at the last counter
	// reading: a backlog means the shaper is what limits the traffic now.
	Backlog uint64
	// Reflectors is the number of reflectors with a fresh sample for this
	// direction (see Config.Fresh).
	Reflectors int
	// LastSample is the send time of the newest sample of this direction, zero
	// when there has been none.
	LastSample time.Time
}
