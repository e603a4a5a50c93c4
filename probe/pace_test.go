package probe

import (
	"testing"
	"time"
)

// TestTurns: a probe is due on the first poll, then every interval, sent
// by the poll nearest its turn (at most early before it), and a target
// whose polls stopped for an interval or more starts again from the poll
// that finds it so.
func TestTurns(t *testing.T) {
	const ms = time.Millisecond
	start := time.Unix(1000, 0)
	tests := []struct {
		name  string
		early time.Duration
		polls []time.Duration // since start
		want  []bool
	}{
		{
			name:  "polls every 50 ms, a probe every 150 ms",
			early: 25 * ms,
			polls: []time.Duration{0, 50 * ms, 100 * ms, 150 * ms, 200 * ms, 250 * ms, 300 * ms},
			want:  []bool{true, false, false, true, false, false, true},
		},
		{
			name:  "a late poll at a turn, an early one at the next",
			early: 25 * ms,
			polls: []time.Duration{0, 158 * ms, 290 * ms, 440 * ms},
			want:  []bool{true, true, true, true},
		},
		{
			name:  "more than early before the turn waits",
			early: 25 * ms,
			polls: []time.Duration{0, 120 * ms, 130 * ms},
			want:  []bool{true, false, true},
		},
		{
			name:  "polls stopped for two intervals: no burst to catch up",
			early: 25 * ms,
			polls: []time.Duration{0, 400 * ms, 450 * ms, 500 * ms, 550 * ms},
			want:  []bool{true, true, false, false, true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tu := turns{interval: 150 * ms, early: tt.early}
			for i, p := range tt.polls {
				if got := tu.due(start.Add(p)); got != tt.want[i] {
					t.Errorf("poll at %v: due = %t, want %t", p, got, tt.want[i])
				}
			}
		})
	}
}

// TestArrivalAt: a packet is timed by the kernel's stamp, on the read's
// monotonic clock, unless the stamp is missing or the wall clock stepped
// since (an age out of bounds).
func TestArrivalAt(t *testing.T) {
	now := time.Now() // with a monotonic reading
	tests := []struct {
		name  string
		stamp time.Time
		want  time.Duration // before now
	}{
		{name: "no stamp", want: 0},
		{name: "stamped 30 ms before the read", stamp: now.Round(0).Add(-30 * time.Millisecond), want: 30 * time.Millisecond},
		{name: "stamped after the read (clock stepped back)", stamp: now.Round(0).Add(time.Second), want: 0},
		{name: "stamped an hour before (clock stepped forward)", stamp: now.Round(0).Add(-time.Hour), want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := arrivalAt(now, tt.stamp)
			if d := now.Sub(got); d != tt.want {
				t.Errorf("arrivalAt = now - %v, want now - %v", d, tt.want)
			}
			if got.Round(0) == got {
				t.Errorf("arrivalAt lost the monotonic reading")
			}
		})
	}
}

func TestStripIPv4Header(t *testing.T) {
	tests := []struct {
		name string
		b    []byte
		want []byte
	}{
		{name: "20-byte header", b: append([]byte{0x45}, append(make([]byte, 19), 14, 0)...), want: []byte{14, 0}},
		{name: "24-byte header", b: append([]byte{0x46}, append(make([]byte, 23), 0)...), want: []byte{0}},
		{name: "too short", b: []byte{0x45, 0}, want: nil},
		{name: "not IPv4", b: append([]byte{0x65}, make([]byte, 30)...), want: nil},
		{name: "header length past the end", b: append([]byte{0x4f}, make([]byte, 30)...), want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := stripIPv4Header(tt.b)
			if string(got) != string(tt.want) || (got == nil) != (tt.want == nil) {
				t.Errorf("stripIPv4Header = %v, want %v", got, tt.want)
			}
		})
	}
}
