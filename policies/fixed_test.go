package policies_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/autoshape/autoshape/policies"
)

func TestFixed(t *testing.T) {
	bounds := policies.Bounds{Min: 1e6, Base: 20e6, Max: 100e6}
	tests := []struct {
		name  string
		fixed float64
		rate  float64
		want  policies.Proposal
	}{
		{
			name:  "within bounds",
			fixed: 50e6,
			rate:  30e6,
			want:  policies.Proposal{Rate: 50e6, Reason: policies.ReasonFixed},
		},
		{
			name:  "above max",
			fixed: 150e6,
			rate:  30e6,
			want:  policies.Proposal{Rate: 100e6, Reason: policies.ReasonFixed},
		},
		{
			name:  "below min",
			fixed: 0.5e6,
			rate:  30e6,
			want:  policies.Proposal{Rate: 1e6, Reason: policies.ReasonFixed},
		},
		{
			name:  "already there",
			fixed: 30e6,
			rate:  30e6,
			want:  policies.Proposal{Rate: 30e6, Reason: policies.ReasonFixed},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := policies.NewFixed(tt.fixed)
			if diff := cmp.Diff("fixed", p.Name()); diff != "" {
				t.Errorf("Name() mismatch (-want +got):\n%s", diff)
			}
			got := p.Next(policies.Input{
				Now:    time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC),
				Rate:   tt.rate,
				Bounds: bounds,
			})
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Next() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}
