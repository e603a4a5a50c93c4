//go:build unix

package probe_test

import (
	"context"
	"net/netip"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/autoshape/autoshape/estimator"
	"github.com/autoshape/autoshape/probe"
	"github.com/autoshape/autoshape/probe/probetest"
)

// benchPool runs a pool of active reflectors out of n on fake targets and a
// fake clock that does not wait for the goroutines (benchmarks have no
// synctest bubble), with a goroutine draining its samples. It returns when
// every active reflector's Target runs; stop ends the pool and checks that
// it ended cleanly.
func benchPool(b *testing.B, n, active int, setup func(*poolFakeNet)) (clock *probetest.FakeClock, net *poolFakeNet, p *probe.Pool, stop func()) {
	b.Helper()
	clock = probetest.NewFakeClock(poolT0, nil)
	net = newPoolFakeNet(clock)
	net.record = false
	if setup != nil {
		setup(net)
	}
	cfg := probe.PoolConfig{Reflectors: poolAddrs(n), Active: active, Rate: 20}
	p, err := probe.NewPool(cfg, net.factory, clock, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan estimator.Sample, 256)
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, out) }()
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for {
			select {
			case <-out:
			case <-ctx.Done():
				return
			}
		}
	}()
	stop = func() {
		cancel()
		if err := <-done; err != nil {
			b.Errorf("Run() = %v", err)
		}
		<-drained
		if got := net.Running(); got != 0 {
			b.Errorf("%d targets running after Run returned", got)
		}
	}
	// The pool starts one Target per turn: move the clock until all run.
	for i := 0; net.Running() < active; i++ {
		if i > 100000 {
			b.Fatalf("only %d of %d targets started", net.Running(), active)
		}
		clock.Advance(10 * time.Millisecond)
		runtime.Gosched()
	}
	return clock, net, p, stop
}

// cpuTime returns the CPU time the process has used, all threads together.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkPoolResults measures the pool's cost per 1000 Results (one op):
// the accounting, the baseline and the hand-over of the samples to a
// channel that a goroutine drains.
func BenchmarkPoolResults(b *testing.B) {
	now := poolT0
	echo := probe.Result{Sent: now, N: 1}
	echo.Samples[0] = estimator.Sample{Kind: estimator.RTT, Sent: now, Delay: 20 * time.Millisecond}
	stamp := probe.Result{Sent: now, N: 2}
	stamp.Samples[0] = estimator.Sample{Kind: estimator.OWDUp, Sent: now, Delay: 10 * time.Millisecond}
	stamp.Samples[1] = estimator.Sample{Kind: estimator.OWDDown, Sent: now, Delay: 10 * time.Millisecond}
	lost := probe.Result{Sent: now, Lost: true}
	for _, bb := range []struct {
		name string
		r    probe.Result
	}{{"echo", echo}, {"timestamp", stamp}, {"lost", lost}} {
		b.Run(bb.name, func(b *testing.B) {
			_, net, _, stop := benchPool(b, 8, 6, nil)
			defer stop()
			var sinks []func(probe.Result)
			for _, a := range poolAddrs(6) {
				sinks = append(sinks, net.Sink(a))
			}
			r := bb.r
			b.ReportAllocs()
			cpu0 := cpuTime(b)
			for b.Loop() {
				for i := range 1000 {
					r.Sent = r.Sent.Add(time.Millisecond)
					sinks[i%len(sinks)](r)
				}
			}
			cpu := cpuTime(b) - cpu0
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/1000, "cpu-ns/result")
		})
	}
}

// BenchmarkPoolLossHour simulates an hour of loss with the default rate (6
// of 12 reflectors, 20 probes per second) and reports how the live heap
// grew over the last 50 minutes: it must stay flat. With total loss the
// pool is stalled and replaces nothing; with all reflectors but one lost it
// replaces one whenever a spare is out of its cool-down.
func BenchmarkPoolLossHour(b *testing.B) {
	for _, bb := range []struct {
		name string
		lost []netip.Addr
	}{
		{"total", poolAddrs(12)},
		{"all-but-one", poolAddrs(12)[1:]},
	} {
		b.Run(bb.name, func(b *testing.B) {
			var growth, heap, replaced float64
			for b.Loop() {
				clock, _, p, stop := benchPool(b, 12, 6, func(n *poolFakeNet) {
					n.set(poolFakeReply{lost: true}, bb.lost...)
				})
				clock.AdvanceTo(10 * time.Minute)
				before := poolHeap()
				for clock.Since() < time.Hour {
					clock.Advance(time.Second)
				}
				after := poolHeap()
				growth += float64(int64(after) - int64(before))
				heap += float64(after)
				replaced += float64(p.Stats().Replacements.Lost)
				stop()
			}
			b.ReportMetric(growth/float64(b.N), "heap-growth-B")
			b.ReportMetric(heap/float64(b.N), "heap-B")
			b.ReportMetric(replaced/float64(b.N), "replacements")
		})
	}
}
