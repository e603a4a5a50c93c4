package controller

import (
	"encoding/json"
	"io"
	"time"

	"github.com/autoshape/autoshape/estimator"
)

// A Record is one line of the JSON-lines decision file that the daemon
// writes and `autoshape-tools plot` reads: a Decision with the same keys as its
// log line, rates in kbit/s, delays in ms and the time in RFC 3339.
type Record struct {
	Time                 time.Time `json:"time"`
	Link                 string    `json:"link,omitempty"`
	Dir                  string    `json:"dir"`
	FromKbit             float64   `json:"from_kbit"`
	RateKbit             float64   `json:"rate_kbit"`
	Reason               string    `json:"reason"`
	State                string    `json:"state"`
	Clamped              bool      `json:"clamped,omitempty"`
	DelayMs              float64   `json:"delay_ms"`
	ThresholdMs          float64   `json:"threshold_ms"`
	Bloat                bool      `json:"bloat"`
	AchievedKbit         float64   `json:"achieved_kbit"`
	OfferedKbit          float64   `json:"offered_kbit,omitempty"`
	Load                 float64   `json:"load"`
	CapacityEstimateKbit float64   `json:"capacity_estimate_kbit,omitempty"`
	Reflectors           int       `json:"reflectors"`
	Iface                string    `json:"iface,omitempty"`
	Qdisc                string    `json:"qdisc,omitempty"`
	Written              bool      `json:"written"`
	// ReflectorDelayMs holds each fresh reflector's delay delta, in ms.
	ReflectorDelayMs map[string]float64 `json:"reflector_delay_ms,omitempty"`
}

// Record returns the decision as a decision-file record.
func (d Decision) Record() Record {
	return Record{
		Time: d.Time.UTC(), Link: d.Link, Dir: d.Direction.String(),
		FromKbit: d.From / 1000, RateKbit: d.To / 1000,
		Reason: string(d.Reason), State: d.State.String(), Clamped: d.Clamped,
		DelayMs: ms(d.Obs.Delta), ThresholdMs: ms(d.Obs.Threshold), Bloat: d.Obs.Bloat,
		AchievedKbit: d.Obs.Achieved / 1000, OfferedKbit: d.Obs.Offered / 1000, Load: d.Obs.Load,
		CapacityEstimateKbit: d.Obs.CapacityEstimate / 1000, Reflectors: d.Obs.Reflectors,
		Iface: d.Change.Iface, Qdisc: d.Change.Kind, Written: d.Change.Wrote,
		ReflectorDelayMs: reflectorDelays(d.Reflectors),
	}
}

func reflectorDelays(rs []estimator.ReflectorDelta) map[string]float64 {
	if len(rs) == 0 {
		return nil
	}
	m := make(map[string]float64, len(rs))
	for _, r := range rs {
		m[r.Reflector] = ms(r.Delta)
	}
	return m
}

// WriteRecord writes the decision to w as one JSON line.
func WriteRecord(w io.Writer, d Decision) error {
	b, err := json.Marshal(d.Record())
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}
