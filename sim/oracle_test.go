package sim

import (
	"testing"
	"time"
)

// An oracle sees the coming window with no lag, the window that ended Lag ago
// otherwise, and subtracts the queue as it stood Lag ago over Drain.
func TestOracleRate(t *testing.T) {
	tr, err := ParseSchedule("40mbit@0s,10mbit@1s")
	if err != nil {
		t.Fatal(err)
	}
	const ms = time.Millisecond
	// The queue at each score, every 10 ms, the latest last: 10 kB 50 ms
	// ago, 20 kB now.
	queue := []int64{10000, 0, 0, 0, 0, 20000}
	tests := []struct {
		name string
		o    Oracle
		now  int64
		want float64
	}{
		{"foresight sees the drop coming", Oracle{Fraction: 0.5, Window: 100 * ms}, 950, 0.5 * 25e6},
		{"foresight after the drop", Oracle{Fraction: 0.5, Window: 100 * ms}, 1000, 5e6},
		{"late still sees the old capacity", Oracle{Fraction: 0.5, Window: 100 * ms, Lag: 50 * ms}, 1100, 0.5 * 25e6},
		{"late sees the drop once the lag has passed", Oracle{Fraction: 0.5, Window: 100 * ms, Lag: 50 * ms}, 1150, 5e6},
		{"drain of the queue now", Oracle{Fraction: 1, Window: 100 * ms, Drain: 100 * ms}, 2000, 10e6 - 20000*8/0.1},
		{"drain of the queue 50 ms ago", Oracle{Fraction: 1, Window: 100 * ms, Lag: 50 * ms, Drain: 100 * ms}, 2000, 10e6 - 10000*8/0.1},
		{"never under a tenth of the mean", Oracle{Fraction: 0.01, Window: 100 * ms}, 2000, 2e6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.o.rate(tr, tt.now, queue, 20e6); got != tt.want {
				t.Errorf("rate at %d ms = %g, want %g", tt.now, got, tt.want)
			}
		})
	}
}
