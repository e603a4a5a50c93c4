//go:build linux

package probe

import (
	"testing"
	"time"

	"github.com/autoshape/autoshape/estimator"
)

// TestPacedTarget: a target made with a Pacer sends and reads only when
// paced, and times each answer by the kernel's receive stamp, not by the
// Pace that reads it: answers read 100 ms after they came still show the
// lab's round trip of well under a millisecond.
func TestPacedTarget(t *testing.T) {
	for _, method := range []Method{Echo, Timestamp} {
		t.Run(method.String(), func(t *testing.T) {
			l := newProbeLab(t)
			pacer := NewPacer(100 * time.Millisecond)
			tg, err := NewTargetFactory(TargetOptions{Logger: labLogger(t), Pacer: pacer})(l.v4, method, 100*time.Millisecond, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			paces := 0
			got, err := l.run(t, tg, 2500*time.Millisecond, func() {
				// Nothing for the first 300 ms, then a Pace every 100 ms.
				if since := time.Since(start); since < 300*time.Millisecond || since < time.Duration(paces+3)*100*time.Millisecond {
					if since < 300*time.Millisecond && tg.Stats().Sent != 0 {
						t.Errorf("a paced target sent %d probes before its first Pace", tg.Stats().Sent)
					}
					return
				}
				paces++
				pacer.Pace()
			})
			if err != nil {
				t.Fatalf("Run() = %v", err)
			}
			kinds := []estimator.Kind{estimator.RTT}
			lo, hi := time.Duration(0), 20*time.Millisecond
			if method == Timestamp {
				// Milliseconds: each way reads 0 or 1 ms here.
				kinds, lo, hi = []estimator.Kind{estimator.OWDUp, estimator.OWDDown}, -time.Millisecond, 20*time.Millisecond
			}
			// One probe a Pace, read at the next one.
			checkAnswered(t, got, 10, kinds, lo, hi)
			if s := tg.Stats(); s.Sent > uint64(paces) {
				t.Errorf("sent %d probes in %d Paces, want at most one a Pace", s.Sent, paces)
			}
		})
	}
}
