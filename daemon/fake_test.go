package daemon_test

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/autoshape/autoshape/actuator"
	"github.com/autoshape/autoshape/controller"
	"github.com/autoshape/autoshape/daemon"
	"github.com/autoshape/autoshape/estimator"
	"github.com/autoshape/autoshape/probe"
	"github.com/autoshape/autoshape/probe/probetest"
)

// t0 is where the tests' clock starts.
var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// A write is one rate a fakeShaper was set to, at a time since t0.
type write struct {
	At   time.Duration
	Kbit float64
}

// A fakeShaper is a shaper through which the link is loaded (it sends at
// 95 % of its rate) unless quiet is set.
type fakeShaper struct {
	clock *probetest.FakeClock
	iface string
	quiet atomic.Bool
	fail  atomic.Bool // Stats fails, as on a root that is gone

	mu     sync.Mutex
	rate   uint64 // what the "kernel" holds, bit/s
	writes []write
	stats  int // Stats calls
	bytes  float64
	last   time.Time
}

func (s *fakeShaper) SetRate(_ context.Context, bps uint64) (controller.Change, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rate = bps
	s.writes = append(s.writes, write{At: s.clock.Since(), Kbit: float64(bps) / 1000})
	return controller.Change{Iface: s.iface, Kind: "fake", Wrote: true}, nil
}

func (s *fakeShaper) Stats(context.Context) (controller.ShaperStats, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats++
	if s.fail.Load() {
		return controller.ShaperStats{}, errors.New("the root qdisc is gone")
	}
	now := s.clock.Now()
	if !s.last.IsZero() && !s.quiet.Load() {
		s.bytes += 0.95 * float64(s.rate) / 8 * now.Sub(s.last).Seconds()
	}
	s.last = now
	return controller.ShaperStats{Bytes: uint64(s.bytes)}, nil
}

// Writes returns the rates written so far.
func (s *fakeShaper) Writes() []write {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.writes)
}

// Rate returns the rate the shaper holds, in kbit/s.
func (s *fakeShaper) Rate() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return float64(s.rate) / 1000
}

// StatsCalls returns how often the counters were read.
func (s *fakeShaper) StatsCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// A fakeShaping is one link's shaping as a fakeKernel set it up.
type fakeShaping struct {
	cfg     actuator.SetupConfig
	shapers [2]*fakeShaper

	mu              sync.Mutex
	drift           []actuator.Drift // reported by the next Check
	checks          []time.Duration  // when Check ran, from the clock's start
	removed, closed bool
}

func (s *fakeShaping) Shapers() [2]controller.Shaper {
	return [2]controller.Shaper{s.shapers[0], s.shapers[1]}
}

func (s *fakeShaping) Check() ([]actuator.Drift, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checks = append(s.checks, s.shapers[0].clock.Since())
	d := s.drift
	s.drift = nil
	return d, nil
}

// Checks returns when Check ran.
func (s *fakeShaping) Checks() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.checks)
}

func (s *fakeShaping) Remove() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.removed = true
	return nil
}

func (s *fakeShaping) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

// Rebuild makes the root qdiscs again behind the daemon's back, without a
// rate, as a Check that finds them gone would; the next Check reports it.
func (s *fakeShaping) Rebuild() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sh := range s.shapers {
		sh.mu.Lock()
		sh.rate = 0
		sh.mu.Unlock()
	}
	s.drift = []actuator.Drift{{Dev: s.cfg.Iface, Found: "no root qdisc", Done: "made it again", Changed: true}}
}

// Ended reports whether the shaping was removed, and whether it was closed.
func (s *fakeShaping) Ended() (removed, closed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.removed, s.closed
}

// A fakeKernel sets up fakeShapings, and keeps every one by interface, in
// order.
type fakeKernel struct {
	clock *probetest.FakeClock

	mu      sync.Mutex
	shaping map[string][]*fakeShaping
}

var _ daemon.Kernel = (*fakeKernel)(nil)

func (k *fakeKernel) Setup(cfg actuator.SetupConfig) (daemon.Shaping, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	s := &fakeShaping{cfg: cfg}
	for d, rate := range [2]uint64{estimator.Down: cfg.Down, estimator.Up: cfg.Up} {
		s.shapers[d] = &fakeShaper{clock: k.clock, iface: cfg.Iface, rate: rate}
	}
	if k.shaping == nil {
		k.shaping = map[string][]*fakeShaping{}
	}
	k.shaping[cfg.Iface] = append(k.shaping[cfg.Iface], s)
	return s, nil
}

func (k *fakeKernel) Attach(string, string) (daemon.Shaping, error) {
	return nil, errors.New("fakeKernel: attach mode is not faked")
}

// Shapings returns the shapings set up on iface so far, oldest first.
func (k *fakeKernel) Shapings(iface string) []*fakeShaping {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.shaping[iface])
}

// fakeTargets make targets that answer every probe after a fixed round
// trip while answering is set, and lose every probe while it is not.
type fakeTargets struct {
	clock     *probetest.FakeClock
	answering atomic.Bool
}

// Factory is a probe.TargetFactory.
func (f *fakeTargets) Factory(addr netip.Addr, _ probe.Method, interval, _ time.Duration) (probe.Target, error) {
	return &fakeTarget{net: f, addr: addr, interval: interval}, nil
}

type fakeTarget struct {
	net      *fakeTargets
	addr     netip.Addr
	interval time.Duration
}

func (t *fakeTarget) Run(ctx context.Context, sink func(probe.Result)) error {
	tick, stop := t.net.clock.NewTicker(t.interval)
	defer stop()
	for seq := 0; ; seq++ {
		select {
		case <-ctx.Done():
			return nil
		case now := <-tick:
			r := probe.Result{Reflector: t.addr, Seq: seq, Sent: now, Lost: true}
			if t.net.answering.Load() {
				r.Lost, r.N = false, 1
				r.Samples[0] = estimator.Sample{Kind: estimator.RTT, Sent: now, Delay: 20 * time.Millisecond}
			}
			sink(r)
		}
	}
}

func (t *fakeTarget) Stats() probe.TargetStats { return probe.TargetStats{} }
