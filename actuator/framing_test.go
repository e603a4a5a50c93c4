package actuator_test

import (
	"testing"

	"github.com/autoshape/autoshape/actuator"
)

func TestWireBytes(t *testing.T) {
	tests := []struct {
		name string
		f    actuator.Framing
		ip   int
		want float64
	}{
		{"plain", actuator.Framing{}, 1500, 1500},
		{"ethernet overhead", actuator.Framing{Overhead: 18}, 1500, 1518},
		{"negative overhead", actuator.Framing{Overhead: -4}, 1500, 1496},
		{"atm pads to cells", actuator.Framing{Overhead: 44, LinkLayer: actuator.ATM}, 1500, 33 * 53},
		{"atm exact", actuator.Framing{Overhead: 44, LinkLayer: actuator.ATM}, 1492, 32 * 53},
		{"atm small packet", actuator.Framing{Overhead: 8, LinkLayer: actuator.ATM}, 40, 53},
		{"atm one byte over a cell", actuator.Framing{Overhead: 9, LinkLayer: actuator.ATM}, 40, 2 * 53},
		{"ptm", actuator.Framing{Overhead: 28, LinkLayer: actuator.PTM}, 1500, 1528.0 * 65 / 64},
		{"mpu", actuator.Framing{Overhead: 4, MPU: 84}, 40, 84},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.f.WireBytes(tt.ip); got != tt.want {
				t.Errorf("WireBytes(%d) = %v, want %v", tt.ip, got, tt.want)
			}
		})
	}
}
