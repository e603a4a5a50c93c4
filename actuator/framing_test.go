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

// WireTotal is the counters' bytes as the rate counts them, linear in bytes
// and packets; per packet it agrees with WireBytes to within half a cell.
func TestWireTotal(t *testing.T) {
	tests := []struct {
		name           string
		f              actuator.Framing
		bytes, packets uint64
		want           uint64
	}{
		{"no framing", actuator.Framing{}, 15000, 10, 15000},
		{"overhead", actuator.Framing{Overhead: 44}, 15000, 10, 15440},
		// 10 packets of 1500 + 44 = 1544 bytes: 32.17 cells each, counted as
		// 32.67 (WireBytes says 33): 10 x 32.67 x 53.
		{"atm", actuator.Framing{Overhead: 44, LinkLayer: actuator.ATM}, 15000, 10, 17313},
		// An ACK of 66 + 44 bytes: 2.29 cells, counted as 2.79 (3).
		{"atm ack", actuator.Framing{Overhead: 44, LinkLayer: actuator.ATM}, 66, 1, 147},
		{"ptm", actuator.Framing{LinkLayer: actuator.PTM}, 6400, 4, 6500},
		{"none sent", actuator.Framing{Overhead: 44, LinkLayer: actuator.ATM}, 0, 0, 0},
	}
	for _, tt := range tests {
		if got := tt.f.WireTotal(tt.bytes, tt.packets); got != tt.want {
			t.Errorf("%s: WireTotal(%d, %d) = %d, want %d", tt.name, tt.bytes, tt.packets, got, tt.want)
		}
	}
}
