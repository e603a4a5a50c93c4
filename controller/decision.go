package controller

import (
	"math"
	"time"

	"go.uber.org/zap/zapcore"

	"github.com/autoshape/autoshape/estimator"
	"github.com/autoshape/autoshape/policies"
)

// A Decision records one rate change: when, which direction, from what to
// what, why, and the signals behind it. It logs itself through zap with
// snake_case keys carrying their units.
type Decision struct {
	Time      time.Time
	Link      string
	Direction estimator.Direction
	// From and To are rates in bit/s.
	From, To float64
	Reason   policies.Reason
	State    State
	// Clamped is true when the policy's rate was cut to the bounds.
	Clamped bool
	Obs     estimator.Observation
	// Change is what the shaper did: the interface, the qdisc, and whether
	// anything was written.
	Change Change
	// Reflectors are the per-reflector deltas behind Obs.Delta.
	Reflectors []estimator.ReflectorDelta
}

// MarshalLogObject implements zapcore.ObjectMarshaler: the short form for
// the log, which the link's logger prefixes with the time and the link.
// Rates are whole kbit/s, delays ms to 0.1, the load to 0.01; a field
// that says nothing in its usual value (active, not clamped, no bloat,
// written) is left out, and the interface and qdisc, the same every line,
// are named on the first write to a shaper (reason start).
func (d Decision) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	enc.AddString("dir", d.Direction.String())
	enc.AddInt64("from_kbit", kbit(d.From))
	enc.AddInt64("rate_kbit", kbit(d.To))
	enc.AddString("reason", string(d.Reason))
	if d.State != Active {
		enc.AddString("state", d.State.String())
	}
	if d.Clamped {
		enc.AddBool("clamped", true)
	}
	enc.AddFloat64("delay_ms", round(ms(d.Obs.Delta), 10))
	enc.AddFloat64("threshold_ms", round(ms(d.Obs.Threshold), 10))
	if d.Obs.Bloat {
		enc.AddBool("bloat", true)
	}
	enc.AddInt64("achieved_kbit", kbit(d.Obs.Achieved))
	if d.Obs.Offered > 0 {
		enc.AddInt64("offered_kbit", kbit(d.Obs.Offered))
	}
	enc.AddFloat64("load", round(d.Obs.Load, 100))
	if d.Obs.CapacityEstimate > 0 {
		enc.AddInt64("capacity_estimate_kbit", kbit(d.Obs.CapacityEstimate))
	}
	enc.AddInt("reflectors", d.Obs.Reflectors)
	if d.Reason == policies.ReasonStart {
		if d.Change.Iface != "" {
			enc.AddString("iface", d.Change.Iface)
		}
		if d.Change.Kind != "" {
			enc.AddString("qdisc", d.Change.Kind)
		}
	}
	if !d.Change.Wrote {
		enc.AddBool("written", false)
	}
	return nil
}

// kbit is bps in whole kbit/s.
func kbit(bps float64) int64 { return int64(math.Round(bps / 1000)) }

// round rounds v to 1/per.
func round(v, per float64) float64 { return math.Round(v*per) / per }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
