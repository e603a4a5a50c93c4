package logticks

import (
	"slices"
	"testing"
)

func TestTicks125(t *testing.T) {
	for _, tt := range []struct {
		lo, hi float64
		want   []string
	}{
		{78, 231, []string{"100", "200"}},
		{0.5, 30, []string{"0.5", "1", "2", "5", "10", "20"}},
		{3, 4, nil},
	} {
		var got []string
		for _, m := range (Ticks125{}).Ticks(tt.lo, tt.hi) {
			got = append(got, m.Label)
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("Ticks(%g, %g) = %v, want %v", tt.lo, tt.hi, got, tt.want)
		}
	}
}
