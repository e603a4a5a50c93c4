package probe

import (
	"testing"
	"time"
)

// TestKernelTicker: the kernel timer ticks, with the time of each tick,
// and stops.
func TestKernelTicker(t *testing.T) {
	c, stop, ok := kernelTicker(2 * time.Millisecond)
	if !ok {
		t.Skip("skipping: the kernel refuses a timerfd here")
	}
	var last time.Time
	for i := range 3 {
		select {
		case at := <-c:
			if !at.After(last) {
				t.Errorf("tick %d at %v, not after the one before (%v)", i, at, last)
			}
			last = at
		case <-time.After(10 * time.Second):
			t.Fatalf("tick %d: none within 10 s of a 2 ms ticker", i)
		}
	}
	stop()
	select { // one tick may have come before the stop
	case <-c:
	default:
	}
	select {
	case at := <-c:
		t.Errorf("a tick at %v after the ticker was stopped", at)
	case <-time.After(50 * time.Millisecond):
	}
}

// TestRealClockTicker: RealClock's tickers tick on Linux too.
func TestRealClockTicker(t *testing.T) {
	c, stop := RealClock{}.NewTicker(time.Millisecond)
	defer stop()
	select {
	case <-c:
	case <-time.After(10 * time.Second):
		t.Fatal("no tick within 10 s of a 1 ms ticker")
	}
}
