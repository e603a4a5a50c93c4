package sim

import (
	"testing"
	"time"

	"github.com/autoshape/autoshape/estimator"
	"github.com/autoshape/autoshape/policies"
)

// TestProbeDeadline checks that a probe whose answer would take longer than
// the daemon's probe deadline (1 s) never reaches the controller, as the
// daemon's pool counts it lost, and that one well under it does, in both
// probe kinds.
func TestProbeDeadline(t *testing.T) {
	link, err := ParseSchedule("1mbit")
	if err != nil {
		t.Fatal(err)
	}
	ss, err := Schemes([]string{"autoshape"}, policies.BudgetConfig{}, policies.DefaultClassicConfig())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		waitMs  float64 // the upload bottleneck's queue
		echo    bool
		answers int // samples queued for the controller
	}{
		{name: "timestamps, under the deadline", waitMs: 800, answers: 2},
		{name: "timestamps, past the deadline", waitMs: 1200},
		{name: "echo, under the deadline", waitMs: 800, echo: true, answers: 1},
		{name: "echo, past the deadline", waitMs: 1200, echo: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Base round trip 40ms, reflectors up to 20ms further, jitter
			// of 1ms on average: 800ms of queue is answered, 1200 not.
			cfg := Config{Up: link, Duration: time.Second, Echo: tt.echo}.withDefaults()
			r, err := newReplay(cfg, ss[0])
			if err != nil {
				t.Fatal(err)
			}
			r.m.paths[estimator.Up].wait = tt.waitMs
			r.sendProbe(0)
			if got := len(r.pending); got != tt.answers {
				t.Errorf("%d samples pending after one probe, want %d", got, tt.answers)
			}
		})
	}
}
