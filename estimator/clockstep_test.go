package estimator

import (
	"testing"
	"time"
)

func TestClockStep(t *testing.T) {
	const ms = time.Millisecond
	tests := []struct {
		name                         string
		dUp, dDown, prevUp, prevDown time.Duration
		want                         time.Duration
		wantStep                     bool
	}{
		{name: "our clock 2s forward", dUp: -2000 * ms, dDown: 2000 * ms, want: 2000 * ms, wantStep: true},
		{name: "our clock 2s back", dUp: 2000 * ms, dDown: -2000 * ms, want: -2000 * ms, wantStep: true},
		{name: "12h, folded", dUp: 12 * time.Hour, dDown: 12 * time.Hour, want: 12 * time.Hour, wantStep: true},
		{name: "2s back under 40ms of download load", dUp: 2000 * ms, dDown: -1960 * ms, prevDown: 40 * ms, want: -2000 * ms, wantStep: true},
		{name: "2s forward under 40ms of download load", dUp: -2000 * ms, dDown: 2040 * ms, prevDown: 40 * ms, want: 2000 * ms, wantStep: true},
		{name: "download load", dUp: 1 * ms, dDown: 300 * ms},
		{name: "upload load ends, download load begins", dUp: -30 * ms, dDown: 60 * ms},
		{name: "load on both sides", dUp: 200 * ms, dDown: 200 * ms},
		{name: "a shorter path", dUp: -150 * ms, dDown: 0},
		{name: "a step smaller than NTP's", dUp: -50 * ms, dDown: 50 * ms},
		{name: "a step under more load than half of it", dUp: -200 * ms, dDown: 350 * ms},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, step := clockStep(tt.dUp, tt.dDown, tt.prevUp, tt.prevDown)
			if step != tt.wantStep || (step && FoldDay(got-tt.want) != 0) {
				t.Errorf("clockStep(%v, %v, %v, %v) = %v, %v; want %v, %v", tt.dUp, tt.dDown, tt.prevUp, tt.prevDown, got, step, tt.want, tt.wantStep)
			}
		})
	}
}

func TestFoldDay(t *testing.T) {
	tests := []struct{ in, want time.Duration }{
		{0, 0},
		{12 * time.Hour, 12 * time.Hour},
		{-12 * time.Hour, 12 * time.Hour},
		{12*time.Hour + time.Millisecond, -12*time.Hour + time.Millisecond},
		{-24*time.Hour - 2*time.Second, -2 * time.Second},
		{47 * time.Hour, -time.Hour},
	}
	for _, tt := range tests {
		if got := FoldDay(tt.in); got != tt.want {
			t.Errorf("FoldDay(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
}
