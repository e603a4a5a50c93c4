package actuator_test

import (
	"testing"

	"github.com/autoshape/autoshape/actuator"
)

func TestBackendMinRate(t *testing.T) {
	for _, tt := range []struct {
		b    actuator.Backend
		want float64
	}{{actuator.HTB, 8000}, {actuator.CAKE, 8}} {
		if got := tt.b.MinRate(); got != tt.want {
			t.Errorf("%s.MinRate() = %v, want %v", tt.b, got, tt.want)
		}
	}
}
