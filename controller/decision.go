package controller

import (
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

// MarshalLogObject implements zapcore.ObjectMarshaler.
func (d Decision) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	enc.AddTime("time", d.Time)
	if d.Link != "" {
		enc.AddString("link", d.Link)
	}
	enc.AddString("dir", d.Direction.String())
	enc.AddFloat64("from_kbit", d.From/1000)
	enc.AddFloat64("rate_kbit", d.To/1000)
	enc.AddString("reason", string(d.Reason))
	enc.AddString("state", d.State.String())
	enc.AddBool("clamped", d.Clamped)
	enc.AddFloat64("delay_ms", ms(d.Obs.Delta))
	enc.AddFloat64("threshold_ms", ms(d.Obs.Threshold))
	enc.AddBool("bloat", d.Obs.Bloat)
	enc.AddFloat64("achieved_kbit", d.Obs.Achieved/1000)
	if d.Obs.Offered > 0 {
		enc.AddFloat64("offered_kbit", d.Obs.Offered/1000)
	}
	enc.AddFloat64("load", d.Obs.Load)
	if d.Obs.CapacityEstimate > 0 {
		enc.AddFloat64("capacity_estimate_kbit", d.Obs.CapacityEstimate/1000)
	}
	enc.AddInt("reflectors", d.Obs.Reflectors)
	if d.Change.Iface != "" {
		enc.AddString("iface", d.Change.Iface)
	}
	if d.Change.Kind != "" {
		enc.AddString("qdisc", d.Change.Kind)
	}
	enc.AddBool("written", d.Change.Wrote)
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
