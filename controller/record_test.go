package controller_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/autoshape/autoshape/controller"
	"github.com/autoshape/autoshape/estimator"
	"github.com/autoshape/autoshape/policies"
)

func TestWriteRecord(t *testing.T) {
	dec := controller.Decision{
		Time: time.Date(2026, 3, 1, 12, 0, 0, 500e6, time.UTC), Link: "wan", Direction: estimator.Down,
		From: 10e6, To: 9e6, Reason: policies.ReasonBloat, State: controller.Active,
		Obs: estimator.Observation{
			Delta: 22500 * time.Microsecond, Threshold: 16 * time.Millisecond, Bloat: true,
			Achieved: 8.5e6, Load: 0.85, CapacityEstimate: 9.5e6, Reflectors: 3,
		},
		Change:     controller.Change{Iface: "ifb4wan", Kind: "cake", Wrote: true},
		Reflectors: []estimator.ReflectorDelta{{Reflector: "192.0.2.1", Delta: 2500 * time.Microsecond}, {Reflector: "192.0.2.2", Delta: 30 * time.Millisecond}},
	}
	var buf bytes.Buffer
	if err := controller.WriteRecord(&buf, dec); err != nil {
		t.Fatalf("WriteRecord() failed: %v", err)
	}
	if b := buf.Bytes(); len(b) == 0 || b[len(b)-1] != '\n' || bytes.Count(b, []byte("\n")) != 1 {
		t.Fatalf("WriteRecord() wrote %q, want one line", b)
	}
	var got map[string]any
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatalf("the line is not JSON: %v", err)
	}
	want := map[string]any{
		"time": "2026-03-01T12:00:00.5Z", "link": "wan", "dir": "down",
		"from_kbit": 10000.0, "rate_kbit": 9000.0, "reason": "bloat", "state": "active",
		"delay_ms": 22.5, "threshold_ms": 16.0, "bloat": true, "achieved_kbit": 8500.0,
		"load": 0.85, "capacity_estimate_kbit": 9500.0, "reflectors": 3.0,
		"iface": "ifb4wan", "qdisc": "cake", "written": true,
		"reflector_delay_ms": map[string]any{"192.0.2.1": 2.5, "192.0.2.2": 30.0},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("record mismatch (-want +got):\n%s", diff)
	}
	var back controller.Record
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
		t.Fatalf("the record does not read back: %v", err)
	}
	if diff := cmp.Diff(dec.Record(), back); diff != "" {
		t.Errorf("the record read back differs (-want +got):\n%s", diff)
	}
}
