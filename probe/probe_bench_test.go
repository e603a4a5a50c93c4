//go:build linux

package probe

import (
	"context"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netns"
)

// BenchmarkProbes measures what 1000 answered probes cost the process,
// against a reflector namespace's kernel (root; skipped otherwise): one op
// is 1000 probes, sent every millisecond. cpu-ns/op is the process's CPU time
// (user and system, from getrusage: the router's and the reflector's
// kernel work on the veth counts, most of it) per 1000 probes; allocs/op
// and B/op are per 1000 probes; ns/op is wall time, set by the interval.
//
//	go test -run XXX -bench Probes -benchtime 5x ./estimator
func BenchmarkProbes(b *testing.B) {
	tests := []struct {
		name   string
		method Method
		v6     bool
	}{
		{name: "echo/IPv4", method: Echo},
		{name: "echo/IPv6", method: Echo, v6: true},
		{name: "timestamp", method: Timestamp},
	}
	for _, tt := range tests {
		b.Run(tt.name, func(b *testing.B) {
			l := newProbeLab(b)
			addr := l.v4
			if tt.v6 {
				addr = l.v6
			}
			tg := newLabTarget(b, addr, tt.method, time.Millisecond, 100*time.Millisecond)
			var answered atomic.Int64
			thousands := make(chan struct{}, 1<<16)
			ctx, cancel := context.WithCancel(b.Context())
			errc := make(chan error, 1)
			go func() {
				runtime.LockOSThread()
				if err := netns.Set(l.routerNS); err != nil {
					errc <- err
					return
				}
				errc <- tg.Run(ctx, func(r Result) {
					if r.Lost {
						return
					}
					if answered.Add(1)%1000 == 0 {
						select {
						case thousands <- struct{}{}:
						default:
						}
					}
				})
			}()
			wait := func() {
				select {
				case <-thousands:
				case err := <-errc:
					b.Fatalf("Run() = %v", err)
				case <-time.After(10 * time.Second):
					b.Fatalf("no 1000 answers in 10 s: %+v", tg.Stats())
				}
			}
			wait() // sockets open, pingers warm

			b.ReportAllocs()
			b.ResetTimer()
			start := cpuTime(b)
			for range b.N {
				wait()
			}
			cpu := cpuTime(b) - start
			b.StopTimer()
			cancel()
			if err := <-errc; err != nil {
				b.Fatalf("Run() = %v", err)
			}
			b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
			if s := tg.Stats(); s.Lost > s.Sent/100 {
				b.Errorf("%d of %d probes lost", s.Lost, s.Sent)
			}
		})
	}
}

// cpuTime is the CPU time (user and system) the process has used.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
