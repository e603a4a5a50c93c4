//go:build linux

package probe

import (
	"context"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/autoshape/autoshape/estimator"
	"github.com/vishvananda/netns"
)

// nsTarget runs a Target on a thread locked into a network namespace, so
// that its sockets open there. The thread is never unlocked: it ends with
// the goroutine, and nothing else ever runs in the namespace.
type nsTarget struct {
	Target
	ns netns.NsHandle
}

func (t nsTarget) Run(ctx context.Context, sink func(Result)) error {
	runtime.LockOSThread()
	if err := netns.Set(t.ns); err != nil {
		return err
	}
	return t.Target.Run(ctx, sink)
}

// TestPoolOnRealSockets runs the pool with real echo targets in a test
// namespace against four reflector addresses inside another: a reflector
// whose address is removed is replaced and the samples keep flowing; with
// every address gone the pool stalls, and with them back it recovers.
func TestPoolOnRealSockets(t *testing.T) {
	l := newProbeLab(t) // skips unless root
	addrs := []string{"10.77.0.2", "10.77.0.3", "10.77.0.4", "10.77.0.5"}
	for _, a := range addrs[1:] {
		labCmd(t, "ip", "-n", l.reflector, "addr", "add", a+"/24", "dev", labReflectorDev)
		labCmd(t, "ip", "-n", l.router, "neigh", "replace", a, "lladdr", labReflectorMAC, "dev", labRouterDev, "nud", "permanent")
	}
	var reflectors []netip.Addr
	for _, a := range addrs {
		reflectors = append(reflectors, netip.MustParseAddr(a))
	}
	inner := NewTargetFactory(TargetOptions{Logger: labLogger(t)})
	factory := func(addr netip.Addr, m Method, interval, deadline time.Duration) (Target, error) {
		tg, err := inner(addr, m, interval, deadline)
		if err != nil {
			return nil, err
		}
		return nsTarget{tg, l.routerNS}, nil
	}
	var (
		mu      sync.Mutex
		forgot  []string
		samples = map[string]int{}
	)
	pool, err := NewPool(PoolConfig{
		Reflectors: reflectors, Active: 3, Rate: 30, Method: Echo,
		Deadline: 200 * time.Millisecond, MissLimit: 3, CheckEvery: 200 * time.Millisecond,
		Rotate: NoRotation, StallAfter: 500 * time.Millisecond, Cooldown: time.Hour,
	}, factory, RealClock{}, labLogger(t), func(name string) {
		mu.Lock()
		forgot = append(forgot, name)
		mu.Unlock()
	})
	if err != nil {
		t.Fatalf("NewPool() failed: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	out := make(chan estimator.Sample, 64)
	done := make(chan error, 1)
	go func() { done <- pool.Run(ctx, out) }()
	go func() {
		for s := range out {
			mu.Lock()
			samples[s.Reflector]++
			mu.Unlock()
		}
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run() = %v, want nil after cancel", err)
		}
	}()
	count := func(name string) int {
		mu.Lock()
		defer mu.Unlock()
		return samples[name]
	}
	waitFor := func(what string, d time.Duration, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(d)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("after %v: %s did not happen (active %v, samples %v, forgot %v)", d, what, pool.Active(), samples, forgot)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	waitFor("answers from the three active reflectors", 3*time.Second, func() bool {
		return count("10.77.0.2") > 3 && count("10.77.0.3") > 3 && count("10.77.0.4") > 3
	})

	// Blackhole one: its address goes away (a secondary one: removing the
	// primary address of a subnet removes the secondaries with it).
	labCmd(t, "ip", "-n", l.reflector, "addr", "del", "10.77.0.3/24", "dev", labReflectorDev)
	waitFor("the replacement of 10.77.0.3 by the spare", 5*time.Second, func() bool {
		return slices.Contains(pool.Active(), netip.MustParseAddr("10.77.0.5")) &&
			!slices.Contains(pool.Active(), netip.MustParseAddr("10.77.0.3"))
	})
	before := count("10.77.0.5")
	waitFor("samples from the replacement", 3*time.Second, func() bool { return count("10.77.0.5") > before+3 })
	waitFor("the estimator told to forget 10.77.0.3", 3*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(forgot, "10.77.0.3")
	})

	// Blackhole all: a stall. The primary address takes the secondaries.
	labCmd(t, "ip", "-n", l.reflector, "addr", "flush", "dev", labReflectorDev)
	waitFor("a stall", 3*time.Second, pool.Stalled)

	// Answers return: the stall ends.
	for _, a := range addrs {
		labCmd(t, "ip", "-n", l.reflector, "addr", "add", a+"/24", "dev", labReflectorDev)
	}
	waitFor("the end of the stall", 5*time.Second, func() bool { return !pool.Stalled() })
}
