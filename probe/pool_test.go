package probe_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/autoshape/autoshape/estimator"
	"github.com/autoshape/autoshape/probe"
	"github.com/autoshape/autoshape/probe/probetest"
)

// poolT0 is where the pool tests' clock starts.
var poolT0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// Reflectors of the tests: addresses of the documentation range, probed by
// fake targets only. Tests never use probe.DefaultReflectors.
var (
	refA = poolAddr(1)
	refB = poolAddr(2)
	refC = poolAddr(3)
	refD = poolAddr(4)
	refE = poolAddr(5)
	refF = poolAddr(6)
)

// poolCmp compares addresses.
var poolCmp = cmpopts.EquateComparable(netip.Addr{})

// poolAddr returns 192.0.2.i (TEST-NET-1).
func poolAddr(i int) netip.Addr { return netip.AddrFrom4([4]byte{192, 0, 2, byte(i)}) }

// poolAddrs returns n addresses 192.0.2.1 to 192.0.2.n.
func poolAddrs(n int) []netip.Addr {
	out := make([]netip.Addr, n)
	for i := range out {
		out[i] = poolAddr(i + 1)
	}
	return out
}

// A poolFakeReply says how a fake reflector answers.
type poolFakeReply struct {
	lost bool
	// rtt is the round trip, 20ms when zero.
	rtt time.Duration
	// timestamp answers with one-way delays, which carry a clock offset.
	timestamp bool
	// garbage, with timestamp, adds this to the one-way delay up, as a
	// reflector whose timestamps are garbage would (before the target's
	// check refused such answers).
	garbage time.Duration
	// inconsistent answers as the target does an answer that contradicts
	// itself: answered, no sample.
	inconsistent bool
}

// A poolFakeStart is when one Target started, relative to poolT0.
type poolFakeStart struct {
	Addr     netip.Addr
	At       time.Duration
	Interval time.Duration
}

// A poolFakeNet makes fake Targets and holds what they did. Its Targets
// probe on the fake clock: one probe as they start, then one every
// interval, each answered (or lost) at once as the test set.
type poolFakeNet struct {
	clock  *probetest.FakeClock
	record bool // keep the list of starts (benchmarks turn it off)

	mu       sync.Mutex
	replies  map[netip.Addr]poolFakeReply
	makeErr  map[netip.Addr]error
	runErr   map[netip.Addr]error
	sent     map[netip.Addr]int
	runs     map[netip.Addr]int
	sinks    map[netip.Addr]func(probe.Result)
	starts   []poolFakeStart
	running  int
	deadline time.Duration
}

func newPoolFakeNet(clock *probetest.FakeClock) *poolFakeNet {
	return &poolFakeNet{
		clock:   clock,
		record:  true,
		replies: make(map[netip.Addr]poolFakeReply),
		makeErr: make(map[netip.Addr]error),
		runErr:  make(map[netip.Addr]error),
		sent:    make(map[netip.Addr]int),
		runs:    make(map[netip.Addr]int),
		sinks:   make(map[netip.Addr]func(probe.Result)),
	}
}

// set sets how the given reflectors answer from now on.
func (n *poolFakeNet) set(r poolFakeReply, addrs ...netip.Addr) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, a := range addrs {
		n.replies[a] = r
	}
}

func (n *poolFakeNet) factory(addr netip.Addr, method probe.Method, interval, deadline time.Duration) (probe.Target, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.makeErr[addr]; err != nil {
		return nil, err
	}
	n.deadline = deadline
	return &poolFakeTarget{net: n, addr: addr, interval: interval}, nil
}

func (n *poolFakeNet) Running() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.running
}

func (n *poolFakeNet) Starts() []poolFakeStart {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.starts)
}

func (n *poolFakeNet) Sent() map[netip.Addr]int {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make(map[netip.Addr]int, len(n.sent))
	for a, c := range n.sent {
		out[a] = c
	}
	return out
}

func (n *poolFakeNet) Runs(a netip.Addr) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.runs[a]
}

func (n *poolFakeNet) Sink(a netip.Addr) func(probe.Result) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.sinks[a]
}

type poolFakeTarget struct {
	net      *poolFakeNet
	addr     netip.Addr
	interval time.Duration

	mu   sync.Mutex
	seq  int
	sent uint64
}

var _ probe.Target = (*poolFakeTarget)(nil)

// A Pool is what the controller pauses (controller.Prober).
var _ interface{ SetIdle(bool) } = (*probe.Pool)(nil)

func (t *poolFakeTarget) Run(ctx context.Context, sink func(probe.Result)) error {
	n := t.net
	n.mu.Lock()
	n.runs[t.addr]++
	if err := n.runErr[t.addr]; err != nil {
		n.mu.Unlock()
		return err
	}
	n.running++
	if n.record {
		n.starts = append(n.starts, poolFakeStart{Addr: t.addr, At: n.clock.Since(), Interval: t.interval})
	}
	n.sinks[t.addr] = sink
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		n.running--
	}()

	ticks, stop := n.clock.NewTicker(t.interval)
	defer stop()
	t.probe(n.clock.Now(), sink)
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-ticks:
			t.probe(now, sink)
		}
	}
}

// probe sends one probe at now and hands its fate to sink at once.
func (t *poolFakeTarget) probe(now time.Time, sink func(probe.Result)) {
	n := t.net
	n.mu.Lock()
	n.sent[t.addr]++
	rep := n.replies[t.addr]
	n.mu.Unlock()
	t.mu.Lock()
	t.seq++
	t.sent++
	r := probe.Result{Reflector: t.addr, Seq: t.seq, Sent: now}
	t.mu.Unlock()
	rtt := rep.rtt
	if rtt == 0 {
		rtt = 20 * time.Millisecond
	}
	switch {
	case rep.lost:
		r.Lost = true
	case rep.inconsistent:
		r.Inconsistent = true
	case rep.timestamp:
		// The reflector's clock is 3s ahead: the offset cancels in the sum.
		const offset = 3 * time.Second
		r.Samples[0] = estimator.Sample{Kind: estimator.OWDUp, Sent: now, Delay: rtt/2 + offset + rep.garbage}
		r.Samples[1] = estimator.Sample{Kind: estimator.OWDDown, Sent: now, Delay: rtt - rtt/2 - offset}
		r.N = 2
	default:
		r.Samples[0] = estimator.Sample{Reflector: "whatever the target says", Kind: estimator.RTT, Sent: now, Delay: rtt}
		r.N = 1
	}
	sink(r)
}

func (t *poolFakeTarget) Stats() probe.TargetStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	return probe.TargetStats{Sent: t.sent}
}

// A poolHarness runs a Pool on fake targets and a fake clock inside a
// synctest bubble.
type poolHarness struct {
	clock *probetest.FakeClock
	net   *poolFakeNet
	pool  *probe.Pool
	out   chan estimator.Sample
	logs  *observer.ObservedLogs

	mu     sync.Mutex
	forgot []string

	cancel context.CancelFunc
	done   chan error
}

// newPoolHarness makes a pool for cfg; setup (may be nil) prepares the fake
// network before the pool starts. Call start to run it. It must be called
// inside a synctest bubble.
func newPoolHarness(t *testing.T, cfg probe.PoolConfig, setup func(*poolFakeNet)) *poolHarness {
	t.Helper()
	h := &poolHarness{clock: probetest.NewFakeClock(poolT0, synctest.Wait), out: make(chan estimator.Sample, 4096)}
	h.net = newPoolFakeNet(h.clock)
	if setup != nil {
		setup(h.net)
	}
	core, logs := observer.New(zapcore.DebugLevel)
	h.logs = logs
	p, err := probe.NewPool(cfg, h.net.factory, h.clock, zap.New(core), func(name string) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.forgot = append(h.forgot, name)
	})
	if err != nil {
		t.Fatalf("NewPool() failed: %v", err)
	}
	h.pool = p
	return h
}

// start runs the pool until the test ends, then checks that Run returned
// nil and that no Target is left running.
func (h *poolHarness) start(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel, h.done = cancel, make(chan error, 1)
	go func() { h.done <- h.pool.Run(ctx, h.out) }()
	synctest.Wait()
	t.Cleanup(func() { h.stop(t) })
}

// stop cancels Run and checks it ended cleanly.
func (h *poolHarness) stop(t *testing.T) {
	t.Helper()
	if h.cancel == nil {
		return
	}
	h.cancel()
	h.cancel = nil
	synctest.Wait()
	select {
	case err := <-h.done:
		if err != nil {
			t.Errorf("Run() = %v, want nil", err)
		}
	default:
		t.Fatal("Run() did not return after its context ended")
	}
	if n := h.net.Running(); n != 0 {
		t.Errorf("%d targets still running after Run returned", n)
	}
}

func startPoolHarness(t *testing.T, cfg probe.PoolConfig, setup func(*poolFakeNet)) *poolHarness {
	t.Helper()
	h := newPoolHarness(t, cfg, setup)
	h.start(t)
	return h
}

func (h *poolHarness) Forgot() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.forgot)
}

// drain takes every sample waiting in the channel.
func (h *poolHarness) drain() []estimator.Sample {
	var out []estimator.Sample
	for {
		select {
		case s := <-h.out:
			out = append(out, s)
		default:
			return out
		}
	}
}

// poolLogLine is a log line with its level and a few fields.
type poolLogLine struct {
	Level   zapcore.Level
	Message string
	Fields  map[string]any
}

// lines returns the log lines with the given message, keeping only the
// named fields.
func (h *poolHarness) lines(msg string, keys ...string) []poolLogLine {
	var out []poolLogLine
	for _, e := range h.logs.FilterMessage(msg).All() {
		l := poolLogLine{Level: e.Level, Message: e.Message, Fields: map[string]any{}}
		m := e.ContextMap()
		for _, k := range keys {
			l.Fields[k] = m[k]
		}
		out = append(out, l)
	}
	return out
}

// replacement is the log line of one replacement.
func replacement(from netip.Addr, reason string, to netip.Addr) poolLogLine {
	return poolLogLine{Level: zapcore.InfoLevel, Message: "replacing reflector", Fields: map[string]any{
		"reflector": from.String(), "reason": reason, "replacement": to.String(),
	}}
}

func (h *poolHarness) replacements() []poolLogLine {
	return h.lines("replacing reflector", "reflector", "reason", "replacement")
}

func TestPoolConfigValidate(t *testing.T) {
	v6 := netip.MustParseAddr("2001:db8::1")
	tests := []struct {
		name    string
		cfg     probe.PoolConfig
		wantErr string // a part of the error; "" for none
	}{
		{name: "zero takes defaults", cfg: probe.PoolConfig{}},
		{name: "timestamp on the default list takes its IPv4 part", cfg: probe.PoolConfig{Method: probe.Timestamp}},
		{name: "one reflector", cfg: probe.PoolConfig{Reflectors: poolAddrs(1)}},
		{name: "two reflectors", cfg: probe.PoolConfig{Reflectors: poolAddrs(2)}},
		{name: "no rotation", cfg: probe.PoolConfig{Rotate: probe.NoRotation}},
		{name: "mapped address is unmapped", cfg: probe.PoolConfig{Reflectors: []netip.Addr{netip.MustParseAddr("::ffff:192.0.2.1"), refB}, Method: probe.Timestamp}},
		{
			name:    "invalid address",
			cfg:     probe.PoolConfig{Reflectors: []netip.Addr{refA, {}}},
			wantErr: "PoolConfig.Reflectors[1] is not a valid address",
		},
		{
			name:    "duplicate",
			cfg:     probe.PoolConfig{Reflectors: []netip.Addr{refA, refB, netip.MustParseAddr("::ffff:192.0.2.1")}},
			wantErr: "PoolConfig.Reflectors[2] (192.0.2.1) repeats Reflectors[0]",
		},
		{
			name:    "multicast",
			cfg:     probe.PoolConfig{Reflectors: []netip.Addr{refA, netip.MustParseAddr("224.0.0.1")}},
			wantErr: "PoolConfig.Reflectors[1] (224.0.0.1) is not a unicast address",
		},
		{
			name:    "unspecified",
			cfg:     probe.PoolConfig{Reflectors: []netip.Addr{netip.IPv6Unspecified(), refA}},
			wantErr: "PoolConfig.Reflectors[0] (::) is not a unicast address",
		},
		{
			name:    "timestamp to IPv6",
			cfg:     probe.PoolConfig{Reflectors: []netip.Addr{refA, v6}, Method: probe.Timestamp},
			wantErr: "PoolConfig.Reflectors[1] (2001:db8::1) is IPv6",
		},
		{name: "unknown method", cfg: probe.PoolConfig{Method: probe.Method(7)}, wantErr: "PoolConfig.Method (method(7)) is unknown"},
		{name: "one active of three", cfg: probe.PoolConfig{Reflectors: poolAddrs(3), Active: 1}, wantErr: "PoolConfig.Active (1) must be between 2 and the number of Reflectors (3)"},
		{name: "more active than reflectors", cfg: probe.PoolConfig{Reflectors: poolAddrs(3), Active: 4}, wantErr: "PoolConfig.Active (4)"},
		{name: "negative active", cfg: probe.PoolConfig{Active: -1}, wantErr: "PoolConfig.Active (-1)"},
		{name: "negative rate", cfg: probe.PoolConfig{Rate: -1}, wantErr: "PoolConfig.Rate (-1) must be in (0, 1000]"},
		{name: "NaN rate", cfg: probe.PoolConfig{Rate: math.NaN()}, wantErr: "PoolConfig.Rate (NaN)"},
		{name: "rate too high", cfg: probe.PoolConfig{Rate: 5000}, wantErr: "PoolConfig.Rate (5000)"},
		{name: "rate too low", cfg: probe.PoolConfig{Rate: 0.05}, wantErr: "PoolConfig.Rate (0.05) is too low for 6 active reflectors"},
		{name: "negative deadline", cfg: probe.PoolConfig{Deadline: -time.Second}, wantErr: "PoolConfig.Deadline (-1s)"},
		{name: "long deadline", cfg: probe.PoolConfig{Deadline: time.Minute}, wantErr: "PoolConfig.Deadline (1m0s) must be in (0, 30s]"},
		{name: "negative miss limit", cfg: probe.PoolConfig{MissLimit: -1}, wantErr: "PoolConfig.MissLimit (-1)"},
		{name: "baseline factor below 1", cfg: probe.PoolConfig{BaselineFactor: 0.5}, wantErr: "PoolConfig.BaselineFactor (0.5) must be at least 1"},
		{name: "NaN baseline factor", cfg: probe.PoolConfig{BaselineFactor: math.NaN()}, wantErr: "PoolConfig.BaselineFactor (NaN)"},
		{name: "negative baseline margin", cfg: probe.PoolConfig{BaselineMargin: -time.Millisecond}, wantErr: "PoolConfig.BaselineMargin (-1ms)"},
		{name: "negative check interval", cfg: probe.PoolConfig{CheckEvery: -time.Second}, wantErr: "PoolConfig.CheckEvery (-1s)"},
		{name: "rotation faster than checks", cfg: probe.PoolConfig{Rotate: time.Second}, wantErr: "PoolConfig.Rotate (1s) must be at least CheckEvery (5s)"},
		{name: "stall within one probe", cfg: probe.PoolConfig{Rate: 2, Active: 2, StallAfter: 300 * time.Millisecond}, wantErr: "PoolConfig.StallAfter (300ms) must be longer than the time between two probes (1/Rate = 500ms)"},
		{name: "negative cooldown", cfg: probe.PoolConfig{Cooldown: -time.Second}, wantErr: "PoolConfig.Cooldown (-1s)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			_, newErr := probe.NewPool(tt.cfg, newPoolFakeNet(nil).factory, nil, nil, nil)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Validate() = %v, want an error containing %q", err, tt.wantErr)
			}
			if fmt.Sprint(newErr) != fmt.Sprint(err) {
				t.Errorf("NewPool() error = %v, want Validate's %v", newErr, err)
			}
		})
	}
}

func TestNewPoolNeedsFactory(t *testing.T) {
	if _, err := probe.NewPool(probe.PoolConfig{}, nil, nil, nil, nil); err == nil {
		t.Error("NewPool(nil factory) succeeded, want an error")
	}
}

func TestPoolConfigDefaults(t *testing.T) {
	p, err := probe.NewPool(probe.PoolConfig{}, newPoolFakeNet(nil).factory, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := probe.PoolConfig{
		Reflectors:     probe.DefaultReflectors,
		Active:         6,
		Rate:           40,
		Method:         probe.Echo,
		Deadline:       time.Second,
		MissLimit:      5,
		BaselineFactor: 2,
		BaselineMargin: 20 * time.Millisecond,
		CheckEvery:     5 * time.Second,
		Rotate:         10 * time.Minute,
		StallAfter:     time.Second,
		Cooldown:       5 * time.Minute,
	}
	if diff := cmp.Diff(want, p.Config(), poolCmp); diff != "" {
		t.Errorf("Config() mismatch (-want +got):\n%s", diff)
	}
	if got, want := p.Active(), probe.DefaultReflectors[:6]; !slices.Equal(got, want) {
		t.Errorf("Active() = %v, want the first six defaults %v", got, want)
	}

	ts, err := probe.NewPool(probe.PoolConfig{Method: probe.Timestamp}, newPoolFakeNet(nil).factory, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	refl := ts.Config().Reflectors
	if len(refl) == 0 || len(refl) == len(probe.DefaultReflectors) {
		t.Errorf("timestamp pool has %d of %d default reflectors, want only the IPv4 ones", len(refl), len(probe.DefaultReflectors))
	}
	for _, a := range refl {
		if !a.Is4() {
			t.Errorf("timestamp pool has IPv6 reflector %s", a)
		}
	}
}

func TestDefaultReflectors(t *testing.T) {
	seen := make(map[netip.Addr]bool)
	var v4, v6 int
	for _, a := range probe.DefaultReflectors {
		if seen[a] || !a.IsValid() || !a.IsGlobalUnicast() || a.Is4In6() {
			t.Errorf("bad or repeated default reflector %s", a)
		}
		seen[a] = true
		if a.Is4() {
			v4++
		} else {
			v6++
		}
	}
	if v4 < probe.DefaultPoolActive || v6 < 2 {
		t.Errorf("%d IPv4 and %d IPv6 default reflectors, want at least %d and 2", v4, v6, probe.DefaultPoolActive)
	}
	for i, a := range probe.DefaultReflectors[:probe.DefaultPoolActive] {
		if !a.Is4() {
			t.Errorf("default reflector %d (%s) is IPv6; the first %d must be IPv4", i, a, probe.DefaultPoolActive)
		}
	}
}

func TestPoolStaggeredStart(t *testing.T) {
	tests := []struct {
		active int
		rate   float64
	}{
		{active: 2, rate: 20},
		{active: 4, rate: 20},
		{active: 6, rate: 20},
		{active: 3, rate: 10},
		{active: 5, rate: 4},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d at %g per s", tt.active, tt.rate), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := probe.PoolConfig{Reflectors: poolAddrs(tt.active + 2), Active: tt.active, Rate: tt.rate}
				h := startPoolHarness(t, cfg, nil)
				slot := time.Duration(float64(time.Second) / tt.rate)
				interval := slot * time.Duration(tt.active)
				// Up to just before the first reflector's second probe.
				h.clock.AdvanceTo(interval - 1)
				var want []poolFakeStart
				for i := range tt.active {
					want = append(want, poolFakeStart{Addr: poolAddr(i + 1), At: time.Duration(i) * slot, Interval: interval})
				}
				if diff := cmp.Diff(want, h.net.Starts(), poolCmp); diff != "" {
					t.Errorf("starts mismatch (-want +got):\n%s", diff)
				}
				// Each sends one probe as it starts, then one per interval.
				h.clock.AdvanceTo(10*interval - 1)
				sent := h.net.Sent()
				for i := range tt.active {
					if got := sent[poolAddr(i+1)]; got != 10 {
						t.Errorf("%s sent %d probes in 10 intervals, want 10", poolAddr(i+1), got)
					}
				}
				if len(sent) != tt.active {
					t.Errorf("%d reflectors probed, want %d", len(sent), tt.active)
				}
			})
		})
	}
}

func TestPoolSamples(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Rate 20 with three reflectors: turns at 0, 50 and 100ms, each
		// reflector every 150ms.
		cfg := probe.PoolConfig{Reflectors: poolAddrs(4), Active: 3, Rate: 20}
		h := startPoolHarness(t, cfg, func(n *poolFakeNet) {
			n.set(poolFakeReply{rtt: 20 * time.Millisecond}, refA)
			n.set(poolFakeReply{lost: true}, refB)
			n.set(poolFakeReply{rtt: 30 * time.Millisecond, timestamp: true}, refC)
		})
		h.clock.AdvanceTo(time.Second)

		type key struct {
			Reflector string
			Kind      estimator.Kind
			Delay     time.Duration
		}
		got := map[key]int{}
		for _, s := range h.drain() {
			got[key{s.Reflector, s.Kind, s.Delay}]++
		}
		// A: probes at 0..900ms; C: 100..1000ms, one-way delays with the
		// reflector's clock offset.
		want := map[key]int{
			{"192.0.2.1", estimator.RTT, 20 * time.Millisecond}:                   7,
			{"192.0.2.3", estimator.OWDUp, 15*time.Millisecond + 3*time.Second}:   7,
			{"192.0.2.3", estimator.OWDDown, 15*time.Millisecond - 3*time.Second}: 7,
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("samples mismatch (-want +got):\n%s", diff)
		}

		wantStats := []probe.ReflectorStats{
			{Addr: refA, Since: poolT0, Answered: 7, Baseline: 20 * time.Millisecond, Method: probe.Echo},
			{Addr: refB, Since: poolT0.Add(50 * time.Millisecond), Lost: 7, Misses: 7, Method: probe.Echo},
			{Addr: refC, Since: poolT0.Add(100 * time.Millisecond), Answered: 7, Baseline: 30 * time.Millisecond, Method: probe.Timestamp},
		}
		st := h.pool.Stats()
		if diff := cmp.Diff(wantStats, st.Reflectors, poolCmp); diff != "" {
			t.Errorf("Stats().Reflectors mismatch (-want +got):\n%s", diff)
		}
		if st.Dropped != 0 || st.State != probe.PoolProbing {
			t.Errorf("Stats() = dropped %d, state %v; want 0, probing", st.Dropped, st.State)
		}

		// B answers again: its next probe (at 1.1s) resets the misses.
		h.net.set(poolFakeReply{rtt: 25 * time.Millisecond}, refB)
		h.clock.AdvanceTo(1100 * time.Millisecond)
		b := h.pool.Stats().Reflectors[1]
		if b.Misses != 0 || b.Lost != 7 || b.Answered != 1 || b.Baseline != 25*time.Millisecond {
			t.Errorf("after an answer B has %+v, want 0 misses, 7 lost, 1 answered, baseline 25ms", b)
		}
		if got := h.drain(); len(got) != 2 || got[0].Reflector != "192.0.2.1" || got[1].Reflector != "192.0.2.2" {
			t.Errorf("samples 1.0-1.1s = %+v, want one from A, one from B", got)
		}
	})
}

func TestPoolDropsWhenChannelFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newPoolHarness(t, probe.PoolConfig{Reflectors: poolAddrs(2), Rate: 20}, nil)
		h.out = make(chan estimator.Sample, 3)
		h.start(t)
		// Nobody reads: 2 reflectors × 10 probes, 3 fit.
		h.clock.AdvanceTo(time.Second - 1)
		if got := h.pool.Stats().Dropped; got != 17 {
			t.Errorf("Dropped = %d, want 17", got)
		}
		if got := len(h.drain()); got != 3 {
			t.Errorf("%d samples in the channel, want 3", got)
		}
		if h.pool.Stalled() {
			t.Error("Stalled() = true, want false: answers came, only the channel was full")
		}
	})
}

func TestPoolReplacesLostReflector(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := probe.PoolConfig{Reflectors: poolAddrs(4), Active: 3, Rate: 20}
		h := startPoolHarness(t, cfg, nil)
		h.clock.AdvanceTo(time.Second)
		h.net.set(poolFakeReply{lost: true}, refB)

		h.clock.AdvanceTo(5*time.Second - 1)
		if got := h.pool.Active(); !slices.Equal(got, []netip.Addr{refA, refB, refC}) {
			t.Fatalf("before the check Active() = %v", got)
		}
		h.drain()

		// The check at 5s replaces B by D, in B's turn (50ms + k×150ms).
		h.clock.AdvanceTo(5 * time.Second)
		if got, want := h.pool.Active(), []netip.Addr{refA, refD, refC}; !slices.Equal(got, want) {
			t.Errorf("after the check Active() = %v, want %v", got, want)
		}
		if diff := cmp.Diff([]poolLogLine{replacement(refB, "lost", refD)}, h.replacements()); diff != "" {
			t.Errorf("log mismatch (-want +got):\n%s", diff)
		}
		starts := h.net.Starts()
		if last := starts[len(starts)-1]; last.Addr != refD || last.At != 5*time.Second {
			t.Errorf("last start = %+v, want D at 5s", last)
		}
		st := h.pool.Stats()
		if diff := cmp.Diff(probe.Replacements{Lost: 1}, st.Replacements); diff != "" {
			t.Errorf("Replacements mismatch (-want +got):\n%s", diff)
		}
		if !slices.Equal(st.Spares, []netip.Addr{refB}) {
			t.Errorf("Spares = %v, want [B]", st.Spares)
		}

		// Samples keep coming, from D now.
		h.clock.AdvanceTo(6 * time.Second)
		from := map[string]int{}
		for _, s := range h.drain() {
			from[s.Reflector]++
		}
		if from["192.0.2.4"] == 0 || from["192.0.2.2"] != 0 {
			t.Errorf("samples after the replacement by reflector: %v, want some from D, none from B", from)
		}
		// B's target was stopped; it sends no more probes.
		sentB := h.net.Sent()[refB]
		h.clock.AdvanceTo(9 * time.Second)
		if got := h.net.Sent()[refB]; got != sentB {
			t.Errorf("B sent %d probes after it was replaced", got-sentB)
		}
		if got := h.net.Running(); got != 3 {
			t.Errorf("%d targets running, want 3", got)
		}

		// onForget hears of B at the next check, once its samples are taken.
		if got := h.Forgot(); len(got) != 0 {
			t.Errorf("forgot %v before the next check", got)
		}
		h.clock.AdvanceTo(10 * time.Second)
		if diff := cmp.Diff([]string{"192.0.2.2"}, h.Forgot()); diff != "" {
			t.Errorf("forgotten mismatch (-want +got):\n%s", diff)
		}
	})
}

func TestPoolReplacesHighBaseline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := probe.PoolConfig{Reflectors: poolAddrs(5), Active: 4, Rate: 20}
		h := startPoolHarness(t, cfg, func(n *poolFakeNet) {
			n.set(poolFakeReply{rtt: 20 * time.Millisecond}, refA, refB, refD)
			n.set(poolFakeReply{rtt: 30 * time.Millisecond}, refC)
		})
		h.clock.AdvanceTo(10 * time.Second)
		// C's route changes: its round trip jumps from 30 to 300ms, its
		// baseline rises to it (time constant 1 min).
		h.net.set(poolFakeReply{rtt: 300 * time.Millisecond}, refC)

		// Not judged within its first minute (it started at 100ms).
		h.clock.AdvanceTo(60 * time.Second)
		if st := h.pool.Stats(); st.Replacements != (probe.Replacements{}) {
			t.Fatalf("replaced before the warm-up ended: %+v", st.Replacements)
		}
		c := h.pool.Stats().Reflectors[2]
		if c.Baseline < 100*time.Millisecond || c.Baseline > 250*time.Millisecond {
			t.Errorf("C's baseline = %v, want it on its way up to 300ms", c.Baseline)
		}
		// Above 2 × 20ms + 20ms: replaced at the first check after a minute.
		h.clock.AdvanceTo(65 * time.Second)
		if diff := cmp.Diff([]poolLogLine{replacement(refC, "baseline", refE)}, h.replacements()); diff != "" {
			t.Errorf("log mismatch (-want +got):\n%s", diff)
		}
		if got, want := h.pool.Active(), []netip.Addr{refA, refB, refE, refD}; !slices.Equal(got, want) {
			t.Errorf("Active() = %v, want %v", got, want)
		}
		l := h.lines("replacing reflector", "baseline_ms", "median_baseline_ms")
		if b, _ := l[0].Fields["baseline_ms"].(float64); b < 60 {
			t.Errorf("logged baseline_ms = %v, want above 60", l[0].Fields["baseline_ms"])
		}
		if m, _ := l[0].Fields["median_baseline_ms"].(float64); m != 20 {
			t.Errorf("logged median_baseline_ms = %v, want 20", l[0].Fields["median_baseline_ms"])
		}
		// The others are fine: nothing else happens.
		h.clock.AdvanceTo(3 * time.Minute)
		if got := h.pool.Stats().Replacements; got != (probe.Replacements{Baseline: 1}) {
			t.Errorf("Replacements = %+v, want one for baseline", got)
		}
	})
}

func TestPoolOneReplacementPerCheck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := probe.PoolConfig{Reflectors: poolAddrs(6), Active: 4, Rate: 20}
		h := startPoolHarness(t, cfg, func(n *poolFakeNet) {
			n.set(poolFakeReply{lost: true}, refA, refB, refC)
		})
		h.clock.AdvanceTo(5 * time.Second)
		if diff := cmp.Diff([]poolLogLine{replacement(refA, "lost", refE)}, h.replacements()); diff != "" {
			t.Errorf("first check: log mismatch (-want +got):\n%s", diff)
		}
		h.clock.AdvanceTo(10 * time.Second)
		want := []poolLogLine{replacement(refA, "lost", refE), replacement(refB, "lost", refF)}
		if diff := cmp.Diff(want, h.replacements()); diff != "" {
			t.Errorf("second check: log mismatch (-want +got):\n%s", diff)
		}
		// A and B cool down: C stays, logged once.
		h.clock.AdvanceTo(30 * time.Second)
		if diff := cmp.Diff(want, h.replacements()); diff != "" {
			t.Errorf("later checks: log mismatch (-want +got):\n%s", diff)
		}
		kept := h.lines("no spare reflector: keeping a bad one", "reflector", "reason")
		wantKept := []poolLogLine{{Level: zapcore.WarnLevel, Message: "no spare reflector: keeping a bad one", Fields: map[string]any{"reflector": "192.0.2.3", "reason": "lost"}}}
		if diff := cmp.Diff(wantKept, kept); diff != "" {
			t.Errorf("kept log mismatch (-want +got):\n%s", diff)
		}
		if got, want := h.pool.Active(), []netip.Addr{refE, refF, refC, refD}; !slices.Equal(got, want) {
			t.Errorf("Active() = %v, want %v", got, want)
		}
		if got := h.net.Running(); got != 4 {
			t.Errorf("%d targets running, want 4", got)
		}
		// After the cool-down (5 min from 5s), A comes back in for C.
		h.clock.AdvanceTo(5*time.Minute + 5*time.Second)
		want = append(want, replacement(refC, "lost", refA))
		if diff := cmp.Diff(want, h.replacements()); diff != "" {
			t.Errorf("after the cool-down: log mismatch (-want +got):\n%s", diff)
		}
	})
}

func TestPoolKeepsTwoWithoutSpares(t *testing.T) {
	tests := []struct {
		name     string
		lost     []netip.Addr
		wantKept int // "keeping" lines logged
	}{
		{name: "one lost", lost: []netip.Addr{refA}, wantKept: 1},
		// Both lost is a stall: the link, not the reflectors.
		{name: "both lost", lost: []netip.Addr{refA, refB}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := probe.PoolConfig{Reflectors: poolAddrs(2), Rate: 20}
				h := startPoolHarness(t, cfg, func(n *poolFakeNet) {
					n.set(poolFakeReply{lost: true}, tt.lost...)
				})
				h.clock.AdvanceTo(time.Minute)
				if got, want := h.pool.Active(), []netip.Addr{refA, refB}; !slices.Equal(got, want) {
					t.Errorf("Active() = %v, want %v", got, want)
				}
				if got := h.pool.Stats().Replacements; got != (probe.Replacements{}) {
					t.Errorf("Replacements = %+v, want none", got)
				}
				if got := h.logs.FilterMessage("no spare reflector: keeping a bad one").Len(); got != tt.wantKept {
					t.Errorf("logged keeping %d times, want %d", got, tt.wantKept)
				}
				if got := h.net.Running(); got != 2 {
					t.Errorf("%d targets running, want both", got)
				}
			})
		})
	}
}

func TestPoolNoReplacementWhileStalled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := probe.PoolConfig{Reflectors: poolAddrs(5), Active: 3, Rate: 20}
		h := startPoolHarness(t, cfg, nil)
		h.clock.AdvanceTo(10 * time.Second)
		// The link goes down: every probe is lost.
		h.net.set(poolFakeReply{lost: true}, refA, refB, refC)
		h.clock.AdvanceTo(2 * time.Minute)
		if !h.pool.Stalled() {
			t.Error("Stalled() = false after 110s without answers")
		}
		if got := h.replacements(); len(got) != 0 {
			t.Errorf("replaced during the outage: %v", got)
		}
		// A comes back, B and C do not: they are replaced, one per check.
		h.net.set(poolFakeReply{}, refA)
		h.clock.AdvanceTo(2*time.Minute + 10*time.Second)
		want := []poolLogLine{replacement(refB, "lost", refD), replacement(refC, "lost", refE)}
		if diff := cmp.Diff(want, h.replacements()); diff != "" {
			t.Errorf("log mismatch (-want +got):\n%s", diff)
		}
	})
}

func TestPoolFailedTarget(t *testing.T) {
	errNoSocket := errors.New("no socket")
	tests := []struct {
		name      string
		reflector int // how many; B fails
		makeErr   bool
		// want after the check at 5s and B's next turn
		wantActive []netip.Addr
		wantReplac probe.Replacements
		wantRunsB  int
	}{
		{name: "cannot make, spare", reflector: 3, makeErr: true, wantActive: []netip.Addr{refA, refC}, wantReplac: probe.Replacements{Failed: 1}},
		{name: "run fails, spare", reflector: 3, wantActive: []netip.Addr{refA, refC}, wantReplac: probe.Replacements{Failed: 1}, wantRunsB: 1},
		{name: "cannot make, no spare", reflector: 2, makeErr: true, wantActive: []netip.Addr{refA, refB}},
		// Without a spare a dead target is started again at the check.
		{name: "run fails, no spare", reflector: 2, wantActive: []netip.Addr{refA, refB}, wantRunsB: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := probe.PoolConfig{Reflectors: poolAddrs(tt.reflector), Active: 2, Rate: 20}
				h := startPoolHarness(t, cfg, func(n *poolFakeNet) {
					if tt.makeErr {
						n.makeErr[refB] = errNoSocket
					} else {
						n.runErr[refB] = errNoSocket
					}
				})
				// The check at 5s; B's turn comes at 5.05s.
				h.clock.AdvanceTo(5*time.Second + 50*time.Millisecond)
				if got := h.pool.Active(); !slices.Equal(got, tt.wantActive) {
					t.Errorf("Active() = %v, want %v", got, tt.wantActive)
				}
				if got := h.pool.Stats().Replacements; got != tt.wantReplac {
					t.Errorf("Replacements = %+v, want %+v", got, tt.wantReplac)
				}
				if got := h.net.Runs(refB); got != tt.wantRunsB {
					t.Errorf("B's target ran %d times, want %d", got, tt.wantRunsB)
				}
				if h.logs.FilterField(zap.Error(errNoSocket)).Len() == 0 {
					t.Error("the target's error was not logged")
				}
			})
		})
	}
}

func TestPoolRotation(t *testing.T) {
	tests := []struct {
		name   string
		rotate time.Duration
		want   []poolLogLine
	}{
		{
			name:   "every minute",
			rotate: time.Minute,
			want: []poolLogLine{
				replacement(refA, "rotate", refD),
				replacement(refB, "rotate", refE),
				// C's turn comes at 3 min, but A and B are still cooling down.
			},
		},
		{name: "off", rotate: probe.NoRotation},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := probe.PoolConfig{Reflectors: poolAddrs(5), Active: 3, Rate: 20, Rotate: tt.rotate}
				h := startPoolHarness(t, cfg, nil)
				h.clock.AdvanceTo(55 * time.Second)
				if got := h.replacements(); len(got) != 0 {
					t.Fatalf("replaced before a minute: %v", got)
				}
				h.clock.AdvanceTo(4 * time.Minute)
				if diff := cmp.Diff(tt.want, h.replacements()); diff != "" {
					t.Errorf("log mismatch (-want +got):\n%s", diff)
				}
				if got := h.pool.Stats().Replacements.Rotate; got != uint64(len(tt.want)) {
					t.Errorf("Replacements.Rotate = %d, want %d", got, len(tt.want))
				}
				if tt.rotate < 0 {
					return
				}
				if got, want := h.pool.Active(), []netip.Addr{refD, refE, refC}; !slices.Equal(got, want) {
					t.Errorf("Active() = %v, want %v", got, want)
				}
				if diff := cmp.Diff([]string{"192.0.2.1", "192.0.2.2"}, h.Forgot()); diff != "" {
					t.Errorf("forgotten mismatch (-want +got):\n%s", diff)
				}
			})
		})
	}
}

func TestPoolStall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := probe.PoolConfig{Reflectors: poolAddrs(3), Rate: 20}
		h := startPoolHarness(t, cfg, nil)
		h.clock.AdvanceTo(2 * time.Second)
		if h.pool.Stalled() {
			t.Fatal("Stalled() = true while all answer")
		}
		// The last answer was to B's probe sent at 2s.
		h.net.set(poolFakeReply{lost: true}, refA, refB, refC)
		h.clock.AdvanceTo(3 * time.Second)
		if h.pool.Stalled() {
			t.Error("Stalled() = true 1s after the last answer, want false until StallAfter has passed")
		}
		h.clock.AdvanceTo(3*time.Second + 50*time.Millisecond)
		if !h.pool.Stalled() || h.pool.State() != probe.PoolStalled {
			t.Errorf("Stalled() = %v, State() = %v; want true, stalled", h.pool.Stalled(), h.pool.State())
		}
		h.net.set(poolFakeReply{}, refA, refB, refC)
		h.clock.AdvanceTo(3*time.Second + 100*time.Millisecond)
		if h.pool.Stalled() || h.pool.State() != probe.PoolProbing {
			t.Errorf("after an answer Stalled() = %v, State() = %v; want false, probing", h.pool.Stalled(), h.pool.State())
		}
	})
}

func TestPoolStallWithoutAnyAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := probe.PoolConfig{Reflectors: poolAddrs(2), Rate: 20}
		h := startPoolHarness(t, cfg, func(n *poolFakeNet) {
			n.set(poolFakeReply{lost: true}, refA, refB)
		})
		// Counted from the start.
		h.clock.AdvanceTo(time.Second)
		if h.pool.Stalled() {
			t.Error("Stalled() = true at StallAfter, want false")
		}
		h.clock.AdvanceTo(time.Second + 50*time.Millisecond)
		if !h.pool.Stalled() {
			t.Error("Stalled() = false after StallAfter without answers")
		}
	})
}

func TestPoolIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := probe.PoolConfig{Reflectors: poolAddrs(3), Rate: 20}
		h := startPoolHarness(t, cfg, nil)
		h.clock.AdvanceTo(time.Second)

		h.pool.SetIdle(true)
		synctest.Wait()
		if got := h.net.Running(); got != 0 {
			t.Fatalf("%d targets running while idle, want 0 (their contexts must end)", got)
		}
		sent := h.net.Sent()
		h.drain()
		h.clock.AdvanceTo(20 * time.Second)
		if diff := cmp.Diff(sent, h.net.Sent(), poolCmp); diff != "" {
			t.Errorf("probes sent while idle (-before +after):\n%s", diff)
		}
		if got := len(h.drain()); got != 0 {
			t.Errorf("%d samples while idle", got)
		}
		if h.pool.Stalled() || h.pool.State() != probe.PoolIdle {
			t.Errorf("idle: Stalled() = %v, State() = %v; want false, idle", h.pool.Stalled(), h.pool.State())
		}
		if got := h.pool.Stats().Replacements; got != (probe.Replacements{}) {
			t.Errorf("replaced while idle: %+v", got)
		}

		// Leaving idle: the first starts at once, the others in their turns.
		h.pool.SetIdle(false)
		synctest.Wait()
		if got := h.net.Running(); got != 1 {
			t.Errorf("%d targets running right after SetIdle(false), want 1", got)
		}
		if h.pool.Stalled() {
			t.Error("Stalled() = true right after SetIdle(false)")
		}
		h.clock.AdvanceTo(20*time.Second + 149*time.Millisecond)
		if got := h.net.Running(); got != 3 {
			t.Errorf("%d targets running one interval after SetIdle(false), want 3", got)
		}
		starts := h.net.Starts()
		want := []poolFakeStart{
			{Addr: refA, At: 20 * time.Second, Interval: 150 * time.Millisecond},
			{Addr: refB, At: 20*time.Second + 50*time.Millisecond, Interval: 150 * time.Millisecond},
			{Addr: refC, At: 20*time.Second + 100*time.Millisecond, Interval: 150 * time.Millisecond},
		}
		if diff := cmp.Diff(want, starts[len(starts)-3:], poolCmp); diff != "" {
			t.Errorf("restarts mismatch (-want +got):\n%s", diff)
		}
		if h.pool.Stalled() || h.pool.State() != probe.PoolProbing {
			t.Errorf("after resuming: Stalled() = %v, State() = %v; want false, probing", h.pool.Stalled(), h.pool.State())
		}
		if got := len(h.drain()); got != 3 {
			t.Errorf("%d samples in the first interval after resuming, want 3", got)
		}

		// Idle and back at once: all run again within an interval. Run
		// may or may not see the idle between the two calls (its
		// goroutine can wake between them: .ci/run once found one target
		// running right after), and if it does it resumes as above.
		h.pool.SetIdle(true)
		h.pool.SetIdle(false)
		synctest.Wait()
		h.clock.AdvanceTo(20*time.Second + 298*time.Millisecond)
		if got := h.net.Running(); got != 3 {
			t.Errorf("%d targets running an interval after a quick idle and back, want 3", got)
		}
		if h.pool.Stalled() || h.pool.State() != probe.PoolProbing {
			t.Errorf("after a quick idle and back: Stalled() = %v, State() = %v; want false, probing", h.pool.Stalled(), h.pool.State())
		}
	})
}

func TestPoolIdleBeforeRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newPoolHarness(t, probe.PoolConfig{Reflectors: poolAddrs(2), Rate: 20}, nil)
		h.pool.SetIdle(true)
		h.start(t)
		h.clock.AdvanceTo(10 * time.Second)
		if got := h.net.Sent(); len(got) != 0 {
			t.Errorf("probes sent by an idle pool: %v", got)
		}
		if h.pool.Stalled() {
			t.Error("Stalled() = true while idle")
		}
		h.pool.SetIdle(false)
		synctest.Wait()
		h.clock.AdvanceTo(10*time.Second + 50*time.Millisecond)
		if got := h.net.Running(); got != 2 {
			t.Errorf("%d targets running after SetIdle(false), want 2", got)
		}
	})
}

func TestPoolRunStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newPoolHarness(t, probe.PoolConfig{Reflectors: poolAddrs(3), Active: 2, Rate: 20}, func(n *poolFakeNet) {
			n.set(poolFakeReply{lost: true}, refB)
		})
		if h.pool.State() != probe.PoolStopped || h.pool.Stalled() {
			t.Errorf("before Run: State() = %v, Stalled() = %v; want stopped, false", h.pool.State(), h.pool.Stalled())
		}
		if err := h.pool.Run(context.Background(), nil); err == nil {
			t.Error("Run(nil channel) succeeded")
		}
		h.start(t)
		if err := h.pool.Run(context.Background(), h.out); err == nil {
			t.Error("a second Run succeeded while the first runs")
		}
		// B is replaced at 5s; C starts in B's turn, at 5.05s.
		h.clock.AdvanceTo(5*time.Second + 10*time.Millisecond)
		if got := h.net.Running(); got != 1 {
			t.Fatalf("%d targets running while C waits for its turn, want 1", got)
		}
		h.stop(t) // checks Run returned nil and no target runs
		if h.pool.State() != probe.PoolStopped || h.pool.Stalled() {
			t.Errorf("after Run: State() = %v, Stalled() = %v; want stopped, false", h.pool.State(), h.pool.Stalled())
		}
		// B left at the last check: onForget hears of it as Run ends.
		if diff := cmp.Diff([]string{"192.0.2.2"}, h.Forgot()); diff != "" {
			t.Errorf("forgotten mismatch (-want +got):\n%s", diff)
		}
		// Nothing more is sent after Run returned, and the clock has no
		// ticker left (all stopped).
		h.drain()
		h.clock.AdvanceTo(time.Minute)
		if got := len(h.drain()); got != 0 {
			t.Errorf("%d samples after Run returned", got)
		}
		if left := h.clock.Tickers(); left != 0 {
			t.Errorf("%d tickers left running after Run returned", left)
		}
	})
}

// TestPoolStateFlat checks that a Result costs the pool no allocation, so
// that nothing it keeps can grow with the number of probes or losses.
func TestPoolStateFlat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := startPoolHarness(t, probe.PoolConfig{Reflectors: poolAddrs(2), Rate: 20}, nil)
		sink := h.net.Sink(refA)
		now := h.clock.Now()
		lost := probe.Result{Reflector: refA, Sent: now, Lost: true}
		answered := probe.Result{Reflector: refA, Sent: now, N: 1}
		answered.Samples[0] = estimator.Sample{Kind: estimator.RTT, Sent: now, Delay: 20 * time.Millisecond}
		stamped := probe.Result{Reflector: refA, Sent: now, N: 2}
		stamped.Samples[0] = estimator.Sample{Kind: estimator.OWDUp, Sent: now, Delay: 10 * time.Millisecond}
		stamped.Samples[1] = estimator.Sample{Kind: estimator.OWDDown, Sent: now, Delay: 10 * time.Millisecond}
		for _, r := range []probe.Result{lost, answered, stamped} {
			// The channel fills up and then drops: both paths are measured.
			if got := testing.AllocsPerRun(10000, func() { sink(r) }); got != 0 {
				t.Errorf("%d allocations per Result (lost: %v, samples: %d), want 0", int(got), r.Lost, r.N)
			}
		}
		st := h.pool.Stats()
		if len(st.Reflectors) != 2 || len(st.Spares) != 0 {
			t.Errorf("Stats() has %d reflectors and %d spares, want 2 and 0", len(st.Reflectors), len(st.Spares))
		}
	})
}

// TestPoolMemoryUnderLoss simulates an hour of loss and checks that the
// heap does not grow: with every probe lost (a stall: nothing is replaced),
// and with all reflectors but one lost (every check replaces one when a
// spare is out of its cool-down).
func TestPoolMemoryUnderLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates an hour")
	}
	tests := []struct {
		name    string
		lost    []netip.Addr
		stalled bool
		minRepl uint64
	}{
		{name: "total loss", lost: poolAddrs(8), stalled: true},
		// Each spare comes back after its 5 min cool-down: about 4 per 5 min.
		{name: "all but one lost", lost: poolAddrs(8)[1:], minRepl: 40},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := probe.PoolConfig{Reflectors: poolAddrs(8), Active: 4, Rate: 8, Rotate: probe.NoRotation}
				h := newPoolHarness(t, cfg, func(n *poolFakeNet) {
					n.record = false
					n.set(poolFakeReply{lost: true}, tt.lost...)
				})
				h.start(t)
				h.clock.AdvanceTo(10 * time.Minute)
				h.drain()
				h.logs.TakeAll() // the observer keeps every line; it is not the pool's memory
				before := poolHeap()
				h.clock.AdvanceTo(time.Hour)
				h.drain()
				h.logs.TakeAll()
				after := poolHeap()
				st := h.pool.Stats()
				if got := st.Replacements.Lost; got < tt.minRepl || (tt.minRepl == 0 && got != 0) {
					t.Errorf("%d replacements in an hour, want %d or more (0: none)", got, tt.minRepl)
				}
				if len(st.Reflectors) != 4 || len(st.Spares) != 4 {
					t.Errorf("Stats() has %d reflectors and %d spares, want 4 and 4", len(st.Reflectors), len(st.Spares))
				}
				if got := h.pool.Stalled(); got != tt.stalled {
					t.Errorf("Stalled() = %v, want %v", got, tt.stalled)
				}
				if growth := int64(after) - int64(before); growth > 64<<10 {
					t.Errorf("heap grew by %d bytes in 50 minutes, want it flat", growth)
				}
				t.Logf("heap %d -> %d bytes, %d replacements", before, after, st.Replacements.Lost)
			})
		})
	}
}

// poolHeap returns the live heap after a collection.
func poolHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// A reflector whose answers contradict the physics is replaced at the next
// check, warm-up or not: one whose one-way delays add up to an impossible
// round trip (below zero, or beyond the deadline), and one whose answers
// the target refused as inconsistent MissLimit times in a row. A round trip
// far below the others' is possible (a closer reflector) and kept.
func TestPoolReplacesInconsistentReflector(t *testing.T) {
	tests := []struct {
		name  string
		reply poolFakeReply
		want  []poolLogLine
	}{
		{name: "round trip below zero", reply: poolFakeReply{timestamp: true, garbage: -time.Second},
			want: []poolLogLine{replacement(refC, "inconsistent", refE)}},
		{name: "baseline of -59338s", reply: poolFakeReply{timestamp: true, garbage: -59338 * time.Second},
			want: []poolLogLine{replacement(refC, "inconsistent", refE)}},
		{name: "round trip beyond the deadline", reply: poolFakeReply{timestamp: true, garbage: 3 * time.Hour},
			want: []poolLogLine{replacement(refC, "inconsistent", refE)}},
		{name: "inconsistent answers", reply: poolFakeReply{inconsistent: true},
			want: []poolLogLine{replacement(refC, "inconsistent", refE)}},
		{name: "a closer reflector", reply: poolFakeReply{timestamp: true, rtt: time.Millisecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := probe.PoolConfig{Reflectors: poolAddrs(5), Active: 4, Rate: 20, Method: probe.Timestamp}
				h := startPoolHarness(t, cfg, func(n *poolFakeNet) {
					n.set(poolFakeReply{timestamp: true, rtt: 40 * time.Millisecond}, refA, refB, refD)
					n.set(tt.reply, refC)
				})
				h.clock.AdvanceTo(5 * time.Second)
				if diff := cmp.Diff(tt.want, h.replacements()); diff != "" {
					t.Errorf("replacements at the first check (-want +got):\n%s", diff)
				}
				if tt.want != nil {
					if got := h.pool.Stats().Replacements; got != (probe.Replacements{Inconsistent: 1}) {
						t.Errorf("Replacements = %+v, want one inconsistent", got)
					}
				}
			})
		})
	}
}

// One inconsistent answer (a clock stepped while the probe was out) is no
// reason to replace a reflector; nor are inconsistent answers from every
// reflector, which tell of our clock.
func TestPoolKeepsReflectorsOfAStep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := probe.PoolConfig{Reflectors: poolAddrs(5), Active: 3, Rate: 20, Method: probe.Timestamp}
		h := startPoolHarness(t, cfg, func(n *poolFakeNet) {
			n.set(poolFakeReply{timestamp: true}, refA, refB, refC)
		})
		h.clock.AdvanceTo(2 * time.Second)
		h.net.set(poolFakeReply{inconsistent: true}, refA, refB, refC)
		h.clock.AdvanceTo(2*time.Second + 150*time.Millisecond)
		h.net.set(poolFakeReply{timestamp: true}, refA, refB, refC)
		h.clock.AdvanceTo(10 * time.Second)
		h.net.set(poolFakeReply{inconsistent: true}, refA, refB, refC)
		h.clock.AdvanceTo(time.Minute)
		if got := h.replacements(); len(got) != 0 {
			t.Errorf("replaced: %v", got)
		}
		st := h.pool.Stats()
		if st.Reflectors[0].Inconsistent == 0 || st.Reflectors[0].Answered < st.Reflectors[0].Inconsistent {
			t.Errorf("A's stats %+v: want inconsistent answers counted among the answered", st.Reflectors[0])
		}
	})
}
