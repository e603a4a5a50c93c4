// Package policies decides the next shaper rate of one direction from an
// Observation. Policies are pure: no I/O, no clock of their own (time arrives
// in the Input), so the simulator, the lab and the daemon run the same code.
// A Policy value serves one direction of one link and may keep state between
// calls; the same inputs in the same order always give the same outputs.
package policies

import (
	"time"

	"github.com/autoshape/autoshape/estimator"
)

// Bounds are a direction's rate limits in bit/s: the controller never writes a
// rate outside [Min, Max]; Base is where an idle link rests.
type Bounds struct {
	Min, Base, Max float64
}

// Clamp returns r limited to [Min, Max].
func (b Bounds) Clamp(r float64) float64 {
	if r < b.Min {
		return b.Min
	}
	if r > b.Max {
		return b.Max
	}
	return r
}

// An Input is everything a policy may look at for one decision.
type Input struct {
	Now time.Time
	Obs estimator.Observation
	// Rate is the shaper's current rate in bit/s.
	Rate   float64
	Bounds Bounds
}

// A Reason says why a policy proposes a rate.
type Reason string

// Reasons shared by the policies.
const (
	ReasonHold  Reason = "hold"          // no change wanted
	ReasonBloat Reason = "bloat"         // added delay over the threshold: cut
	ReasonProbe Reason = "probe_up"      // loaded and within budget: raise
	ReasonEase  Reason = "ease"          // delay nearing the budget: a small cut
	ReasonDrop  Reason = "capacity_drop" // much less got through than the rate
	// ReasonDropUndone: the tick after a capacity drop measured the link
	// delivering what it did before; the drop is undone.
	ReasonDropUndone Reason = "drop_undone"
	ReasonDecay      Reason = "decay"    // low load: drift towards base
	ReasonFixed      Reason = "fixed"    // a constant rate
	ReasonIdle       Reason = "idle"     // the controller found the link idle
	ReasonStall      Reason = "stall"    // no probe answers: never raise
	ReasonFallback   Reason = "fallback" // stalled too long: safe rate
	ReasonBlind      Reason = "blind"    // stalled, loaded: what the shaper passed
	ReasonBounds     Reason = "bounds"   // clamped into [min, max]
	ReasonStart      Reason = "start"    // the first rate written
	ReasonShutdown   Reason = "shutdown" // leaving the shaper at a safe rate
)

// A Proposal is a policy's answer: the rate it wants and why.
type Proposal struct {
	Rate   float64
	Reason Reason
}

// A Policy proposes the next rate for one direction.
type Policy interface {
	// Name identifies the policy in logs and reports ("budget", "classic", ...).
	Name() string
	// Next returns the rate the policy wants now. It is called once per
	// controller tick while the direction is active.
	Next(in Input) Proposal
}

// A Blind policy also decides while no probe is answered (the controller's
// stall), when nothing measures the delay. The controller asks it at each
// tick of a stall that began at since, and takes its rate only when it is
// lower than the one held: a stall never raises a rate. A policy without it
// leaves the rate held.
type Blind interface {
	Blind(in Input, since time.Time) Proposal
}
