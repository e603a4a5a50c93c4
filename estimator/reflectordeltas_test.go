package estimator_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/autoshape/autoshape/estimator"
)

func TestReflectorDeltas(t *testing.T) {
	e, err := estimator.New(estimator.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, s := range []struct {
		name  string
		at    time.Duration
		delay time.Duration
	}{
		// Baselines first, then a delayed sample from b and a fresh one from a.
		{"b", 0, 20 * time.Millisecond}, {"a", 0, 10 * time.Millisecond}, {"c", 0, 30 * time.Millisecond},
		{"b", 100 * time.Millisecond, 45 * time.Millisecond}, {"a", 100 * time.Millisecond, 12 * time.Millisecond},
	} {
		e.AddSample(estimator.Sample{Reflector: s.name, Kind: estimator.OWDDown, Sent: t0.Add(s.at), Delay: s.delay})
	}
	// c's only sample is older than Fresh (1s) at this instant; a and b are not.
	now := t0.Add(1050 * time.Millisecond)
	want := []estimator.ReflectorDelta{{Reflector: "a", Delta: 2 * time.Millisecond}, {Reflector: "b", Delta: 25 * time.Millisecond}}
	if diff := cmp.Diff(want, e.ReflectorDeltas(estimator.Down, now)); diff != "" {
		t.Errorf("ReflectorDeltas(down) mismatch (-want +got):\n%s", diff)
	}
	if got := e.ReflectorDeltas(estimator.Up, now); len(got) != 0 {
		t.Errorf("ReflectorDeltas(up) = %v, want none: the samples were one-way down", got)
	}
	if got := e.ReflectorDeltas(estimator.Direction(7), now); got != nil {
		t.Errorf("ReflectorDeltas(7) = %v, want nil", got)
	}
}
