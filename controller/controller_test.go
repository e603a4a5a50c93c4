package controller_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap/zapcore"

	"github.com/autoshape/autoshape/controller"
	"github.com/autoshape/autoshape/estimator"
	"github.com/autoshape/autoshape/policies"
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// step is the interval between the ticks the tests make.
const step = 100 * time.Millisecond

var (
	downBounds = policies.Bounds{Min: 1e6, Base: 10e6, Max: 20e6}
	upBounds   = policies.Bounds{Min: 0.5e6, Base: 2e6, Max: 5e6}
)

// A scriptPolicy proposes the rates pushed into it, one per call, then
// whatever then returns (holding the current rate when then is nil). It
// records every input it was given.
type scriptPolicy struct {
	mu     sync.Mutex
	queue  []policies.Proposal
	then   func(in policies.Input) policies.Proposal
	inputs []policies.Input
}

var _ policies.Policy = (*scriptPolicy)(nil)

func (*scriptPolicy) Name() string { return "script" }

func (p *scriptPolicy) Next(in policies.Input) policies.Proposal {
	p.mu.Lock()
	defer p.mu.Unlock()
	in.Obs.Deltas = nil // valid only until the next Observe
	p.inputs = append(p.inputs, in)
	if len(p.queue) > 0 {
		pr := p.queue[0]
		p.queue = p.queue[1:]
		return pr
	}
	if p.then != nil {
		return p.then(in)
	}
	return policies.Proposal{Rate: in.Rate, Reason: policies.ReasonHold}
}

// push queues proposals with reason probe_up.
func (p *scriptPolicy) push(rates ...float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range rates {
		p.queue = append(p.queue, policies.Proposal{Rate: r, Reason: policies.ReasonProbe})
	}
}

// setThen sets what the policy proposes once its queue is empty.
func (p *scriptPolicy) setThen(f func(in policies.Input) policies.Proposal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.then = f
}

func (p *scriptPolicy) calls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.inputs)
}

func (p *scriptPolicy) lastInput() policies.Input {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.inputs[len(p.inputs)-1]
}

// raise always proposes 20 % more than the current rate.
func raise(in policies.Input) policies.Proposal {
	return policies.Proposal{Rate: in.Rate * 1.2, Reason: policies.ReasonProbe}
}

// A recProber records SetIdle calls.
type recProber struct {
	mu    sync.Mutex
	calls []bool
}

func (p *recProber) SetIdle(idle bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, idle)
}

func (p *recProber) got() []bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]bool(nil), p.calls...)
}

// A rig is a controller with fake shapers, scripted policies and a recording
// prober, driven by hand: the test moves time, the counters and the samples.
type rig struct {
	t       *testing.T
	ctrl    *controller.Controller
	shapers [2]*fakeShaper
	pols    [2]*scriptPolicy
	prober  *recProber
	now     time.Time
	bytes   [2]uint64
}

// newRig builds a rig; a direction whose bounds are zero gets no shaper and
// no policy.
func newRig(t *testing.T, cfg controller.Config) *rig {
	t.Helper()
	est, err := estimator.New(estimator.Config{})
	if err != nil {
		t.Fatalf("failed to create estimator: %v", err)
	}
	r := &rig{t: t, prober: &recProber{}, now: t0}
	var shs [2]controller.Shaper
	var pols [2]policies.Policy
	for _, d := range estimator.Directions {
		if cfg.Directions[d].Bounds == (policies.Bounds{}) {
			continue
		}
		r.shapers[d] = &fakeShaper{}
		r.pols[d] = &scriptPolicy{}
		shs[d] = r.shapers[d]
		pols[d] = r.pols[d]
	}
	r.ctrl, err = controller.New(cfg, est, shs, pols, r.prober)
	if err != nil {
		t.Fatalf("failed to create controller: %v", err)
	}
	return r
}

// twoWay is a config with both directions bounded.
func twoWay() controller.Config {
	var cfg controller.Config
	cfg.Link = "wan"
	cfg.Directions[estimator.Down].Bounds = downBounds
	cfg.Directions[estimator.Up].Bounds = upBounds
	return cfg
}

// advance moves time on by dt with each direction carrying load times its
// current rate, as the shapers' byte counters show it.
func (r *rig) advance(dt time.Duration, load [2]float64) {
	r.now = r.now.Add(dt)
	for _, d := range estimator.Directions {
		if r.shapers[d] == nil {
			continue
		}
		r.bytes[d] += uint64(math.Round(load[d] * r.ctrl.Rate(d) * dt.Seconds() / 8))
		st := controller.ShaperStats{Bytes: r.bytes[d]}
		r.shapers[d].SetStats(st)
	}
}

// sample feeds one answered probe per direction, sent now.
func (r *rig) sample() {
	r.ctrl.AddSample(estimator.Sample{Reflector: "r1", Kind: estimator.OWDDown, Sent: r.now, Delay: 10 * time.Millisecond})
	r.ctrl.AddSample(estimator.Sample{Reflector: "r1", Kind: estimator.OWDUp, Sent: r.now, Delay: 10 * time.Millisecond})
}

// tick runs one control step now and fails the test on an error.
func (r *rig) tick() []controller.Decision {
	r.t.Helper()
	decs, err := r.ctrl.Tick(context.Background(), r.now)
	if err != nil {
		r.t.Fatalf("Tick(%v) failed: %v", r.now.Sub(t0), err)
	}
	return decs
}

// loaded is a load that keeps the link active.
var loaded = [2]float64{0.5, 0.5}

// A change is the part of a Decision most tests compare.
type change struct {
	Dir      estimator.Direction
	From, To float64
	Reason   policies.Reason
	State    controller.State
	Clamped  bool
}

func changes(decs []controller.Decision) []change {
	var out []change
	for _, d := range decs {
		out = append(out, change{Dir: d.Direction, From: d.From, To: d.To, Reason: d.Reason, State: d.State, Clamped: d.Clamped})
	}
	return out
}

func TestStateString(t *testing.T) {
	tests := []struct {
		s    controller.State
		want string
	}{
		{controller.Active, "active"},
		{controller.Idle, "idle"},
		{controller.Stall, "stall"},
		{controller.State(7), "state(7)"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, tt.s.String()); diff != "" {
				t.Errorf("String() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFirstTick(t *testing.T) {
	tests := []struct {
		name    string
		propose []float64 // Down's first proposal; Up holds
		want    []change
	}{
		{
			name: "holding writes base",
			want: []change{
				{Dir: estimator.Down, From: 10e6, To: 10e6, Reason: policies.ReasonStart, State: controller.Active},
				{Dir: estimator.Up, From: 2e6, To: 2e6, Reason: policies.ReasonStart, State: controller.Active},
			},
		},
		{
			name:    "a proposed rate is written as the start",
			propose: []float64{12e6},
			want: []change{
				{Dir: estimator.Down, From: 10e6, To: 12e6, Reason: policies.ReasonStart, State: controller.Active},
				{Dir: estimator.Up, From: 2e6, To: 2e6, Reason: policies.ReasonStart, State: controller.Active},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, twoWay())
			if got := r.ctrl.Rate(estimator.Down); got != downBounds.Base {
				t.Errorf("Rate(down) before the first tick = %v, want base %v", got, downBounds.Base)
			}
			r.pols[estimator.Down].push(tt.propose...)
			r.sample()
			got := r.tick()
			if diff := cmp.Diff(tt.want, changes(got)); diff != "" {
				t.Errorf("first Tick() decisions mismatch (-want +got):\n%s", diff)
			}
			for _, d := range got {
				if d.Link != "wan" || !d.Time.Equal(t0) {
					t.Errorf("decision %v: link %q time %v, want %q at %v", d.Direction, d.Link, d.Time, "wan", t0)
				}
			}
			// Holding afterwards changes nothing.
			r.advance(step, loaded)
			r.sample()
			if got := r.tick(); len(got) != 0 {
				t.Errorf("second Tick() decisions = %+v, want none", changes(got))
			}
			wantWrites := [2][]uint64{{uint64(tt.want[0].To)}, {uint64(tt.want[1].To)}}
			for _, d := range estimator.Directions {
				if diff := cmp.Diff(wantWrites[d], r.shapers[d].Writes()); diff != "" {
					t.Errorf("%v shaper writes mismatch (-want +got):\n%s", d, diff)
				}
			}
		})
	}
}

func TestClamp(t *testing.T) {
	odd := policies.Bounds{Min: 1_000_400, Base: 10e6, Max: 19_999_600}
	tests := []struct {
		name    string
		bounds  policies.Bounds
		propose float64
		want    []change // nil: no decision
	}{
		{name: "above max", bounds: downBounds, propose: 30e6,
			want: []change{{From: 10e6, To: 20e6, Reason: policies.ReasonProbe, Clamped: true}}},
		{name: "below min", bounds: downBounds, propose: 0.5e6,
			want: []change{{From: 10e6, To: 1e6, Reason: policies.ReasonProbe, Clamped: true}}},
		{name: "negative", bounds: downBounds, propose: -5,
			want: []change{{From: 10e6, To: 1e6, Reason: policies.ReasonProbe, Clamped: true}}},
		{name: "infinite", bounds: downBounds, propose: math.Inf(1),
			want: []change{{From: 10e6, To: 20e6, Reason: policies.ReasonProbe, Clamped: true}}},
		{name: "within", bounds: downBounds, propose: 15e6,
			want: []change{{From: 10e6, To: 15e6, Reason: policies.ReasonProbe}}},
		{name: "at max", bounds: downBounds, propose: 20e6,
			want: []change{{From: 10e6, To: 20e6, Reason: policies.ReasonProbe}}},
		{name: "NaN keeps the rate", bounds: downBounds, propose: math.NaN()},
		// Rounding to whole kbit/s must not leave the bounds.
		{name: "odd max rounds down", bounds: odd, propose: 30e6,
			want: []change{{From: 10e6, To: 19_999_000, Reason: policies.ReasonProbe, Clamped: true}}},
		{name: "odd min rounds up", bounds: odd, propose: 0,
			want: []change{{From: 10e6, To: 1_001_000, Reason: policies.ReasonProbe, Clamped: true}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var cfg controller.Config
			cfg.Directions[estimator.Down].Bounds = tt.bounds
			r := newRig(t, cfg)
			r.sample()
			r.tick() // start at base
			r.advance(step, loaded)
			r.sample()
			r.pols[estimator.Down].push(tt.propose)
			got := r.tick()
			for i := range tt.want {
				tt.want[i].Dir, tt.want[i].State = estimator.Down, controller.Active
			}
			if diff := cmp.Diff(tt.want, changes(got)); diff != "" {
				t.Errorf("Tick() decisions mismatch (-want +got):\n%s", diff)
			}
			rate := r.ctrl.Rate(estimator.Down)
			if rate < tt.bounds.Min || rate > tt.bounds.Max {
				t.Errorf("Rate() = %v, outside [%v, %v]", rate, tt.bounds.Min, tt.bounds.Max)
			}
			if got := float64(r.shapers[estimator.Down].Rate()); got != rate {
				t.Errorf("shaper holds %v, controller says %v", got, rate)
			}
		})
	}
}

func TestRounding(t *testing.T) {
	var cfg controller.Config
	cfg.Directions[estimator.Down].Bounds = downBounds
	r := newRig(t, cfg)
	r.sample()
	r.tick()
	steps := []struct {
		propose float64
		want    []change
	}{
		{12_345_678, []change{{Dir: estimator.Down, From: 10e6, To: 12_346_000, Reason: policies.ReasonProbe, State: controller.Active}}},
		{12_346_200, nil}, // rounds to the same kbit
		{12_345_500, nil}, // half rounds away from zero: the same kbit
		{12_346_000, nil}, // exactly the current rate
		{12_000_499, []change{{Dir: estimator.Down, From: 12_346_000, To: 12_000_000, Reason: policies.ReasonProbe, State: controller.Active}}},
	}
	for i, s := range steps {
		r.advance(step, loaded)
		r.sample()
		r.pols[estimator.Down].push(s.propose)
		if diff := cmp.Diff(s.want, changes(r.tick())); diff != "" {
			t.Errorf("step %d (propose %.0f): decisions mismatch (-want +got):\n%s", i, s.propose, diff)
		}
	}
	want := []uint64{10_000_000, 12_346_000, 12_000_000}
	if diff := cmp.Diff(want, r.shapers[estimator.Down].Writes()); diff != "" {
		t.Errorf("shaper writes mismatch (-want +got):\n%s", diff)
	}
}

// Small gradual steps add up before they are written; cuts are written at
// once, however small.
func TestDeadband(t *testing.T) {
	var cfg controller.Config
	cfg.Directions[estimator.Down].Bounds = downBounds
	r := newRig(t, cfg)
	r.sample()
	r.tick() // writes base, 10 Mbit/s
	probe := func(rate float64) policies.Proposal {
		return policies.Proposal{Rate: rate, Reason: policies.ReasonProbe}
	}
	steps := []struct {
		propose policies.Proposal
		want    []change
	}{
		{probe(10_020_000), nil}, // +0.2 %: waits
		{probe(10_040_000), nil}, // +0.4 % in all: waits
		{probe(10_060_000), []change{{Dir: estimator.Down, From: 10e6, To: 10_060_000, Reason: policies.ReasonProbe, State: controller.Active}}},
		{policies.Proposal{Rate: 10_050_000, Reason: policies.ReasonEase}, []change{{Dir: estimator.Down, From: 10_060_000, To: 10_050_000, Reason: policies.ReasonEase, State: controller.Active}}},
	}
	for i, s := range steps {
		r.advance(step, loaded)
		r.sample()
		r.pols[estimator.Down].mu.Lock()
		r.pols[estimator.Down].queue = append(r.pols[estimator.Down].queue, s.propose)
		r.pols[estimator.Down].mu.Unlock()
		if diff := cmp.Diff(s.want, changes(r.tick())); diff != "" {
			t.Errorf("step %d: decisions mismatch (-want +got):\n%s", i, diff)
		}
	}
	// The policy saw the rate it asked for, not the one written.
	ins := r.pols[estimator.Down].inputs
	if got := ins[len(ins)-2].Rate; got != 10_040_000 {
		t.Errorf("the policy's input before the third step = %v, want the intended 10040000", got)
	}
}

// TestFrozenEstimateIgnored: CAKE's estimate without autorate-ingress is a
// rate from the past (the kernel stopped feeding it when the rate was
// taken over): the observation has none.
func TestFrozenEstimateIgnored(t *testing.T) {
	r := newRig(t, twoWay())
	r.shapers[estimator.Down].SetStats(controller.ShaperStats{Bytes: 1000, Packets: 1, CapacityEstimate: 9_000_000})
	r.sample()
	r.tick()
	if got := r.ctrl.Observation(estimator.Down).CapacityEstimate; got != 0 {
		t.Errorf("capacity estimate %v from a CAKE without autorate-ingress, want none", got)
	}
	r.now = r.now.Add(step)
	r.shapers[estimator.Down].SetStats(controller.ShaperStats{Bytes: 2000, Packets: 2, CapacityEstimate: 9_000_000, AutorateIngress: true})
	r.sample()
	r.tick()
	if got := r.ctrl.Observation(estimator.Down).CapacityEstimate; got != 9e6 {
		t.Errorf("capacity estimate %v with autorate-ingress, want 9e6", got)
	}
}

func TestCountersMakeLoad(t *testing.T) {
	r := newRig(t, twoWay())
	r.sample()
	r.tick() // the first counter reading gives no rate
	if got := r.ctrl.Observation(estimator.Down).Load; got != 0 {
		t.Errorf("load after one counter reading = %v, want 0", got)
	}
	// 62 500 bytes in 100 ms is 5 Mbit/s, half of Down's 10 Mbit/s; Up carries
	// 25 000 bytes, 2 Mbit/s, all of its 2 Mbit/s. Down's shaper also
	// dropped 10 packets of its mean 1250 bytes and holds 12 500 bytes: 87 500
	// bytes reached it, 7 Mbit/s offered.
	r.now = r.now.Add(step)
	r.shapers[estimator.Down].SetStats(controller.ShaperStats{Bytes: 62_500, Packets: 50, Drops: 10, Backlog: 12_500,
		CapacityEstimate: 9_000_000, AutorateIngress: true})
	r.shapers[estimator.Up].SetStats(controller.ShaperStats{Bytes: 25_000})
	r.sample()
	r.tick()

	type seen struct {
		Achieved, Offered, Load, CapacityEstimate, ShaperRate float64
		Backlog                                               uint64
		Reflectors                                            int
	}
	want := [2]seen{
		{Achieved: 5e6, Offered: 7e6, Load: 0.5, CapacityEstimate: 9e6, ShaperRate: 10e6, Backlog: 12_500, Reflectors: 1},
		{Achieved: 2e6, Offered: 2e6, Load: 1, ShaperRate: 2e6, Reflectors: 1},
	}
	for _, d := range estimator.Directions {
		o := r.ctrl.Observation(d)
		got := seen{o.Achieved, o.Offered, o.Load, o.CapacityEstimate, o.ShaperRate, o.Backlog, o.Reflectors}
		if diff := cmp.Diff(want[d], got); diff != "" {
			t.Errorf("Observation(%v) mismatch (-want +got):\n%s", d, diff)
		}
		in := r.pols[d].lastInput()
		if !in.Now.Equal(r.now) || in.Rate != want[d].ShaperRate || in.Obs.Load != want[d].Load {
			t.Errorf("%v policy input: now %v rate %v load %v, want %v %v %v",
				d, in.Now, in.Rate, in.Obs.Load, r.now, want[d].ShaperRate, want[d].Load)
		}
		if wantB := [2]policies.Bounds{downBounds, upBounds}[d]; in.Bounds != wantB {
			t.Errorf("%v policy input bounds = %+v, want %+v", d, in.Bounds, wantB)
		}
	}
}

// TestCountersStampedWhenRead: with Config.Now the rates are measured
// between the times the counter readings were taken, each the midpoint of
// its call, not the ticks' times. The ticks are 100 ms apart; the first
// tick's calls begin 30 ms after it and take 4 ms, the second's begin 10 ms
// after it and take 12 ms, so 50 000 bytes were counted over 84 ms: 4.76
// Mbit/s, where the ticks' times would make it 4 (the calls' starts 5, their
// ends 4.55).
func TestCountersStampedWhenRead(t *testing.T) {
	for _, tc := range []struct {
		name     string
		lag      []time.Duration // each tick's lag before its readings; nil: no Now
		call     []time.Duration // and how long each of its readings takes
		achieved float64
	}{
		{"the ticks' times", nil, nil, 4e6},
		{"the readings' times", []time.Duration{30 * time.Millisecond, 10 * time.Millisecond},
			[]time.Duration{4 * time.Millisecond, 12 * time.Millisecond}, 50_000 * 8 / 0.084},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := twoWay()
			var r *rig
			tick, calls := 0, 0
			if tc.lag != nil {
				// Called before and after each reading.
				cfg.Now = func() time.Time {
					at := r.now.Add(tc.lag[tick] + time.Duration(calls%2)*tc.call[tick])
					calls++
					return at
				}
			}
			r = newRig(t, cfg)
			r.sample()
			r.tick()
			tick++
			r.now = r.now.Add(step)
			r.shapers[estimator.Down].SetStats(controller.ShaperStats{Bytes: 50_000})
			r.shapers[estimator.Up].SetStats(controller.ShaperStats{Bytes: 50_000})
			r.sample()
			r.tick()
			for _, d := range estimator.Directions {
				if got := r.ctrl.Observation(d).Achieved; math.Abs(got-tc.achieved) > 1 {
					t.Errorf("%v achieved = %v bit/s, want %v", d, got, tc.achieved)
				}
			}
			if tc.lag != nil && calls != 8 {
				t.Errorf("Now called %d times in two ticks of two readings, want 8", calls)
			}
		})
	}
}

// TestStalledShaperReading: a reading in which the shaper sent nothing
// though it held a backlog at the last one, at a rate (10 Mbit/s) that
// would have sent 83 full-size packets meanwhile, is no measure: the
// achieved rate keeps its last value, and the next reading measures over
// both intervals. Without a backlog, nothing sent is measured: the link
// delivered nothing.
func TestStalledShaperReading(t *testing.T) {
	for _, tc := range []struct {
		name           string
		backlog        uint64
		stalled, after float64 // achieved after the reading with nothing sent, and after the next
	}{
		{"a backlog held: not measured", 20_000, 4e6, 4e6},
		{"nothing held: measured", 0, 0, 8e6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, twoWay())
			read := func(bytes uint64) float64 {
				r.shapers[estimator.Down].SetStats(controller.ShaperStats{Bytes: bytes, Backlog: tc.backlog})
				r.sample()
				r.tick()
				r.now = r.now.Add(step)
				return r.ctrl.Observation(estimator.Down).Achieved
			}
			read(0)
			if got := read(50_000); math.Abs(got-4e6) > 1 {
				t.Fatalf("achieved = %v bit/s over the first 100 ms, want 4e6", got)
			}
			if got := read(50_000); math.Abs(got-tc.stalled) > 1 {
				t.Errorf("achieved = %v bit/s after nothing was sent, want %v", got, tc.stalled)
			}
			if got := read(150_000); math.Abs(got-tc.after) > 1 {
				t.Errorf("achieved = %v bit/s after the next reading, want %v", got, tc.after)
			}
		})
	}
}

// goIdle drives r from a fresh start through a loaded stretch in which the
// policies set the given rates, then through an unloaded one until the link
// goes idle, checking that it goes idle exactly when idleAfter has passed.
func goIdle(t *testing.T, r *rig, rates [2]float64, idleAfter time.Duration) {
	t.Helper()
	r.sample()
	r.tick()
	for _, d := range estimator.Directions {
		if r.pols[d] != nil {
			r.pols[d].push(rates[d])
		}
	}
	r.advance(step, loaded)
	r.sample()
	r.tick()
	for _, d := range estimator.Directions {
		if r.pols[d] != nil && r.ctrl.Rate(d) != rates[d] {
			t.Fatalf("%v rate = %v after the policy proposed %v", d, r.ctrl.Rate(d), rates[d])
		}
	}
	// Unloaded, still probing: active until idleAfter has passed.
	quietFrom := r.now.Add(step)
	for {
		r.advance(step, [2]float64{})
		if r.ctrl.State() != controller.Idle {
			r.sample() // the prober runs until told to pause
		}
		r.tick()
		quiet := r.now.Sub(quietFrom)
		if wantIdle := quiet >= idleAfter; wantIdle != (r.ctrl.State() == controller.Idle) {
			t.Fatalf("after %v unloaded: state %v", quiet, r.ctrl.State())
		}
		if r.ctrl.State() == controller.Idle {
			return
		}
		if quiet > 2*idleAfter {
			t.Fatalf("not idle after %v unloaded", quiet)
		}
	}
}

func TestIdle(t *testing.T) {
	const idleAfter = time.Second
	cfg := twoWay()
	cfg.IdleAfter = idleAfter
	r := newRig(t, cfg)
	// Down above base, Up below: both must drift to base, from either side.
	goIdle(t, r, [2]float64{18e6, 1e6}, idleAfter)
	if diff := cmp.Diff([]bool{true}, r.prober.got()); diff != "" {
		t.Errorf("SetIdle calls on going idle mismatch (-want +got):\n%s", diff)
	}
	var calls [2]int
	for _, d := range estimator.Directions {
		calls[d] = r.pols[d].calls()
	}

	prev := [2]float64{r.ctrl.Rate(estimator.Down), r.ctrl.Rate(estimator.Up)}
	bases := [2]float64{downBounds.Base, upBounds.Base}
	for i := 0; i < 300; i++ {
		r.advance(step, [2]float64{})
		for _, dec := range r.tick() {
			if dec.Reason != policies.ReasonIdle || dec.State != controller.Idle {
				t.Errorf("idle decision %+v: want reason %q in state idle", changes([]controller.Decision{dec}), policies.ReasonIdle)
			}
		}
		for _, d := range estimator.Directions {
			rate, base := r.ctrl.Rate(d), bases[d]
			// Towards base, never past it.
			if math.Abs(rate-base) > math.Abs(prev[d]-base) || (rate-base)*(prev[d]-base) < 0 {
				t.Fatalf("tick %d: %v rate moved from %v to %v, not towards base %v", i, d, prev[d], rate, base)
			}
			prev[d] = rate
		}
	}
	for _, d := range estimator.Directions {
		if prev[d] != bases[d] {
			t.Errorf("%v rate after 30s idle = %v, want base %v", d, prev[d], bases[d])
		}
		if got := r.pols[d].calls(); got != calls[d] {
			t.Errorf("%v policy called %d times while idle, want 0", d, got-calls[d])
		}
	}

	// Load returns: active again, probing again.
	r.advance(step, loaded)
	r.sample()
	r.tick()
	if got := r.ctrl.State(); got != controller.Active {
		t.Errorf("state after load returned = %v, want active", got)
	}
	if diff := cmp.Diff([]bool{true, false}, r.prober.got()); diff != "" {
		t.Errorf("SetIdle calls mismatch (-want +got):\n%s", diff)
	}
}

// Idle drift must reach base at low rates too, where one tick's step is less
// than the 1 kbit/s the rates are rounded to.
func TestIdleReachesLowBase(t *testing.T) {
	var cfg controller.Config
	cfg.IdleAfter = time.Second
	cfg.Directions[estimator.Up].Bounds = policies.Bounds{Min: 100e3, Base: 500e3, Max: 1e6}
	r := newRig(t, cfg)
	goIdle(t, r, [2]float64{0, 600e3}, time.Second)
	for range 600 {
		r.advance(step, [2]float64{})
		r.tick()
	}
	if got := r.ctrl.Rate(estimator.Up); got != 500e3 {
		t.Fatalf("idle drift stops at %v bit/s, never reaching base 500000: the %v%% step rounds away below 1 kbit/s "+
			"while the distance is still above the 1%% snap (controller.go next, Idle case)", got, 5)
	}
}

// TestIdleDriftCountsTime: a caller that ticks at IdleTick while idle gets
// the drift towards base that ticking at step would have made, reaching
// base in about the same time, not IdleTick/step times later.
func TestIdleDriftCountsTime(t *testing.T) {
	cfg := twoWay()
	cfg.IdleAfter = time.Second
	cfg.Tick = step
	fast, slow := newRig(t, cfg), newRig(t, cfg)
	for _, r := range []*rig{fast, slow} {
		goIdle(t, r, [2]float64{18e6, 1e6}, time.Second)
	}
	per := int(controller.IdleTick / step)
	bases := [2]float64{downBounds.Base, upBounds.Base}
	var atBase [2][2]int // [fast, slow][dir]: the slow tick at which base was reached
	for i := 1; i <= 60; i++ {
		for range per {
			fast.advance(step, [2]float64{})
			fast.tick()
		}
		slow.advance(controller.IdleTick, [2]float64{})
		slow.tick()
		for _, d := range estimator.Directions {
			f, s := fast.ctrl.Rate(d), slow.ctrl.Rate(d)
			// Each holds back a drift until it adds up to half a per
			// cent: they may differ by that much each.
			if math.Abs(f-s) > 0.011*max(f, s) {
				t.Errorf("after %v idle: %v at %v bit/s ticking every %v, %v bit/s every %v", time.Duration(i)*controller.IdleTick, d, f, step, s, controller.IdleTick)
			}
			for k, rate := range []float64{f, s} {
				if atBase[k][d] == 0 && rate == bases[d] {
					atBase[k][d] = i
				}
			}
		}
	}
	for _, d := range estimator.Directions {
		if atBase[0][d] == 0 || atBase[1][d] == 0 || math.Abs(float64(atBase[0][d]-atBase[1][d])) > 1 {
			t.Errorf("%v reached base after %d idle ticks of %v ticking fast, %d ticking slow (0: never): want within one", d, atBase[0][d], controller.IdleTick, atBase[1][d])
		}
	}
}

// Probes restart when the link leaves idle; the first answer takes a round
// trip under fresh load. That is not a stall: StallAfter counts from when
// probing resumed, not from the last answer before the pause.
func TestLeavingIdleIsNotAStall(t *testing.T) {
	cfg := twoWay()
	cfg.IdleAfter = time.Second
	cfg.StallAfter = time.Second
	r := newRig(t, cfg)
	goIdle(t, r, [2]float64{10e6, 2e6}, time.Second)
	for range 50 { // 5 s idle, no probes
		r.advance(step, [2]float64{})
		r.tick()
	}
	r.advance(step, loaded)
	r.tick()
	if got := r.ctrl.State(); got != controller.Active {
		t.Fatalf("state after load returned = %v, want active", got)
	}
	// The first answers arrive 300ms after probing resumed.
	var states []string
	for range 3 {
		r.advance(step, loaded)
		r.tick()
		states = append(states, r.ctrl.State().String())
	}
	want := []string{"active", "active", "active"}
	if diff := cmp.Diff(want, states); diff != "" {
		t.Fatalf("leaving idle counts the probe pause as a stall (controller.go stalled): states (-want +got):\n%s", diff)
	}
}

func TestStall(t *testing.T) {
	const (
		stallAfter    = time.Second
		fallbackAfter = 5 * time.Second
		recovery      = time.Second
		safe          = 8e6
	)
	tests := []struct {
		name         string
		rate         float64 // set before the samples stop
		wantFallback bool
	}{
		{name: "falls back to safe", rate: 15e6, wantFallback: true},
		{name: "never rises to safe", rate: 5e6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var cfg controller.Config
			cfg.Directions[estimator.Down].Bounds = downBounds
			cfg.Directions[estimator.Down].Safe = safe
			cfg.StallAfter, cfg.FallbackAfter, cfg.Recovery = stallAfter, fallbackAfter, recovery
			r := newRig(t, cfg)
			pol := r.pols[estimator.Down]
			r.sample()
			r.tick()
			pol.push(tt.rate)
			var last time.Time
			for range 10 {
				r.advance(step, loaded)
				r.sample()
				last = r.now
				r.tick()
			}
			if r.ctrl.Rate(estimator.Down) != tt.rate || r.ctrl.State() != controller.Active {
				t.Fatalf("before the stall: rate %v state %v, want %v active", r.ctrl.Rate(estimator.Down), r.ctrl.State(), tt.rate)
			}

			// No more answers: a stall once more than StallAfter has passed.
			for r.now.Sub(last) <= stallAfter {
				r.advance(step, loaded)
				r.tick()
				if r.now.Sub(last) <= stallAfter && r.ctrl.State() != controller.Active {
					t.Fatalf("%v after the last answer: state %v, want active", r.now.Sub(last), r.ctrl.State())
				}
			}
			if got := r.ctrl.State(); got != controller.Stall {
				t.Fatalf("%v after the last answer: state %v, want stall", r.now.Sub(last), got)
			}
			stallFrom := r.now

			// The policy wants more, and is not obeyed.
			pol.setThen(raise)
			var got []change
			for r.now.Sub(stallFrom) < fallbackAfter+2*time.Second {
				r.advance(step, loaded)
				before := r.ctrl.Rate(estimator.Down)
				decs := r.tick()
				got = append(got, changes(decs)...)
				if after := r.ctrl.Rate(estimator.Down); after > before {
					t.Fatalf("%v into the stall the rate rose from %v to %v", r.now.Sub(stallFrom), before, after)
				}
				if len(decs) > 0 && r.now.Sub(stallFrom) < fallbackAfter {
					t.Errorf("%v into the stall, before the fallback: decisions %+v", r.now.Sub(stallFrom), changes(decs))
				}
			}
			var want []change
			if tt.wantFallback {
				want = []change{{Dir: estimator.Down, From: tt.rate, To: safe, Reason: policies.ReasonFallback, State: controller.Stall}}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("decisions during the stall mismatch (-want +got):\n%s", diff)
			}
			held := r.ctrl.Rate(estimator.Down)

			// Answers return: active, but no rise for Recovery. A cut is
			// still obeyed.
			r.advance(step, loaded)
			r.sample()
			pol.push(held - 1e6)
			decs := r.tick()
			returned := r.now
			if got := r.ctrl.State(); got != controller.Active {
				t.Fatalf("state after answers returned = %v, want active", got)
			}
			wantCut := []change{{Dir: estimator.Down, From: held, To: held - 1e6, Reason: policies.ReasonProbe, State: controller.Active}}
			if diff := cmp.Diff(wantCut, changes(decs)); diff != "" {
				t.Errorf("cut during recovery mismatch (-want +got):\n%s", diff)
			}
			held -= 1e6
			for {
				r.advance(step, loaded)
				r.sample()
				decs := r.tick()
				if r.now.Sub(returned) < recovery {
					if len(decs) > 0 || r.ctrl.Rate(estimator.Down) != held {
						t.Fatalf("%v into recovery: decisions %+v, rate %v, want %v held", r.now.Sub(returned), changes(decs), r.ctrl.Rate(estimator.Down), held)
					}
					continue
				}
				want := []change{{Dir: estimator.Down, From: held, To: math.Round(held*1.2/1000) * 1000, Reason: policies.ReasonProbe, State: controller.Active}}
				if diff := cmp.Diff(want, changes(decs)); diff != "" {
					t.Errorf("first tick after recovery: decisions mismatch (-want +got):\n%s", diff)
				}
				break
			}
		})
	}
}

func TestStallWithoutAnyAnswer(t *testing.T) {
	var cfg controller.Config
	cfg.Directions[estimator.Down].Bounds = downBounds
	r := newRig(t, cfg)
	r.tick()
	for range 10 { // 1 s: not yet
		r.advance(step, loaded)
		r.tick()
	}
	if got := r.ctrl.State(); got != controller.Active {
		t.Fatalf("state 1s after start without answers = %v, want active", got)
	}
	r.advance(step, loaded)
	r.tick()
	if got := r.ctrl.State(); got != controller.Stall {
		t.Errorf("state 1.1s after start without answers = %v, want stall", got)
	}
}

func TestShaperError(t *testing.T) {
	boom := errors.New("boom")
	r := newRig(t, twoWay())
	up := r.shapers[estimator.Up]
	up.SetErr(boom)
	r.pols[estimator.Up].setThen(func(policies.Input) policies.Proposal {
		return policies.Proposal{Rate: 3e6, Reason: policies.ReasonProbe}
	})

	r.sample()
	decs, err := r.ctrl.Tick(context.Background(), r.now)
	if !errors.Is(err, boom) {
		t.Fatalf("Tick() error = %v, want one wrapping %v", err, boom)
	}
	if !strings.Contains(err.Error(), "up") {
		t.Errorf("Tick() error %q does not name the direction", err)
	}
	wantDown := []change{{Dir: estimator.Down, From: 10e6, To: 10e6, Reason: policies.ReasonStart, State: controller.Active}}
	if diff := cmp.Diff(wantDown, changes(decs)); diff != "" {
		t.Errorf("decisions with a failing up shaper mismatch (-want +got):\n%s", diff)
	}
	if got := r.ctrl.Rate(estimator.Up); got != upBounds.Base {
		t.Errorf("Rate(up) after a failed write = %v, want the old %v", got, upBounds.Base)
	}

	// The next tick retries; the first rate written is still the start.
	up.SetErr(nil)
	r.advance(step, loaded)
	r.sample()
	want := []change{{Dir: estimator.Up, From: 2e6, To: 3e6, Reason: policies.ReasonStart, State: controller.Active}}
	if diff := cmp.Diff(want, changes(r.tick())); diff != "" {
		t.Errorf("retry decisions mismatch (-want +got):\n%s", diff)
	}

	// A later failure keeps the old rate, and the retry reports the change
	// from it.
	down := r.shapers[estimator.Down]
	down.SetErr(boom)
	r.pols[estimator.Down].setThen(func(policies.Input) policies.Proposal {
		return policies.Proposal{Rate: 12e6, Reason: policies.ReasonProbe}
	})
	r.advance(step, loaded)
	r.sample()
	if _, err := r.ctrl.Tick(context.Background(), r.now); !errors.Is(err, boom) {
		t.Fatalf("Tick() error = %v, want one wrapping %v", err, boom)
	}
	if got := r.ctrl.Rate(estimator.Down); got != 10e6 {
		t.Errorf("Rate(down) after a failed write = %v, want the old 10e6", got)
	}
	down.SetErr(nil)
	r.advance(step, loaded)
	r.sample()
	want = []change{{Dir: estimator.Down, From: 10e6, To: 12e6, Reason: policies.ReasonProbe, State: controller.Active}}
	if diff := cmp.Diff(want, changes(r.tick())); diff != "" {
		t.Errorf("retry decisions mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]uint64{10e6, 12e6}, down.Writes()); diff != "" {
		t.Errorf("down writes mismatch (-want +got):\n%s", diff)
	}
}

func TestNilShaperIsSkipped(t *testing.T) {
	est, err := estimator.New(estimator.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var cfg controller.Config
	cfg.Directions[estimator.Down].Bounds = downBounds
	down := &fakeShaper{}
	downPol, upPol := &scriptPolicy{}, &scriptPolicy{}
	ctrl, err := controller.New(cfg, est, [2]controller.Shaper{down, nil}, [2]policies.Policy{downPol, upPol}, nil)
	if err != nil {
		t.Fatalf("New() failed: %v", err)
	}
	for i := range 3 {
		decs, err := ctrl.Tick(context.Background(), t0.Add(time.Duration(i)*step))
		if err != nil {
			t.Fatalf("Tick() failed: %v", err)
		}
		for _, d := range decs {
			if d.Direction != estimator.Down {
				t.Errorf("decision for uncontrolled direction: %+v", changes([]controller.Decision{d}))
			}
		}
	}
	if n := upPol.calls(); n != 0 {
		t.Errorf("the uncontrolled direction's policy was called %d times", n)
	}
	if n := downPol.calls(); n != 3 {
		t.Errorf("down policy called %d times, want 3", n)
	}
}

func TestNewErrors(t *testing.T) {
	withDown := func(b policies.Bounds, safe float64) controller.Config {
		var c controller.Config
		c.Directions[estimator.Down] = controller.DirectionConfig{Bounds: b, Safe: safe}
		return c
	}
	tests := []struct {
		name string
		cfg  controller.Config
		// noShaper/noPolicy leave Down without one; noEstimator passes nil.
		noShaper, noPolicy, noEstimator bool
		wantErr                         string // "" means valid
	}{
		{name: "valid", cfg: withDown(downBounds, 0)},
		{name: "valid safe", cfg: withDown(downBounds, 1e6)},
		{name: "no directions", cfg: controller.Config{}, noShaper: true, noPolicy: true},
		{name: "min above max", cfg: withDown(policies.Bounds{Min: 20e6, Base: 10e6, Max: 5e6}, 0),
			wantErr: "down: min rate 20000000 bit/s is above max rate 5000000 bit/s"},
		{name: "zero min", cfg: withDown(policies.Bounds{Min: 0, Base: 10e6, Max: 20e6}, 0),
			wantErr: "down: min rate 0 bit/s must be positive"},
		{name: "base below min", cfg: withDown(policies.Bounds{Min: 5e6, Base: 1e6, Max: 20e6}, 0),
			wantErr: "down: base rate 1000000 bit/s is outside"},
		{name: "base above max", cfg: withDown(policies.Bounds{Min: 1e6, Base: 30e6, Max: 20e6}, 0),
			wantErr: "down: base rate 30000000 bit/s is outside"},
		{name: "safe above max", cfg: withDown(downBounds, 30e6),
			wantErr: "down: safe rate 30000000 bit/s is outside"},
		{name: "safe below min", cfg: withDown(downBounds, 0.5e6),
			wantErr: "down: safe rate 500000 bit/s is outside"},
		{name: "up named", cfg: func() controller.Config {
			c := withDown(downBounds, 0)
			c.Directions[estimator.Up].Bounds = policies.Bounds{Min: 3e6, Base: 2e6, Max: 5e6}
			return c
		}(), wantErr: "up: base rate"},
		{name: "tick too short", cfg: func() controller.Config {
			c := withDown(downBounds, 0)
			c.Tick = 500 * time.Microsecond
			return c
		}(), wantErr: "tick"},
		{name: "idle load 1", cfg: func() controller.Config {
			c := withDown(downBounds, 0)
			c.IdleLoad = 1
			return c
		}(), wantErr: "idle load"},
		{name: "idle step 2", cfg: func() controller.Config {
			c := withDown(downBounds, 0)
			c.IdleStep = 2
			return c
		}(), wantErr: "idle step"},
		{name: "negative stall_after", cfg: func() controller.Config {
			c := withDown(downBounds, 0)
			c.StallAfter = -time.Second
			return c
		}(), wantErr: "stall_after"},
		{name: "negative recovery", cfg: func() controller.Config {
			c := withDown(downBounds, 0)
			c.Recovery = -time.Second
			return c
		}(), wantErr: "recovery"},
		{name: "shaper without policy", cfg: withDown(downBounds, 0), noPolicy: true,
			wantErr: "down has a shaper but no policy"},
		{name: "shaper without bounds", cfg: controller.Config{},
			wantErr: "down has a shaper but no bounds"},
		{name: "no estimator", cfg: withDown(downBounds, 0), noEstimator: true,
			wantErr: "no estimator"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var est *estimator.Estimator
			if !tt.noEstimator {
				var err error
				if est, err = estimator.New(estimator.Config{}); err != nil {
					t.Fatal(err)
				}
			}
			var shs [2]controller.Shaper
			var pols [2]policies.Policy
			if !tt.noShaper {
				shs[estimator.Down] = &fakeShaper{}
			}
			if !tt.noPolicy {
				pols[estimator.Down] = &scriptPolicy{}
			}
			_, err := controller.New(tt.cfg, est, shs, pols, nil)
			checkErr(t, "New()", err, tt.wantErr)
		})
	}
}

func checkErr(t *testing.T, what string, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("%s error = %v, want none", what, err)
	case want != "" && err == nil:
		t.Errorf("%s succeeded, want an error containing %q", what, want)
	case want != "" && !strings.Contains(err.Error(), want):
		t.Errorf("%s error = %q, want it to contain %q", what, err, want)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		b       policies.Bounds
		wantErr string
	}{
		{name: "ok", b: downBounds},
		{name: "all equal", b: policies.Bounds{Min: 1e6, Base: 1e6, Max: 1e6}},
		{name: "negative min", b: policies.Bounds{Min: -1, Base: 1e6, Max: 2e6}, wantErr: "must be positive"},
		{name: "min above max", b: policies.Bounds{Min: 3e6, Base: 3e6, Max: 2e6}, wantErr: "is above max rate"},
		{name: "base outside", b: policies.Bounds{Min: 1e6, Base: 3e6, Max: 2e6}, wantErr: "base rate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkErr(t, "ValidateBounds()", controller.ValidateBounds(tt.b), tt.wantErr)
			var cfg controller.Config
			cfg.Directions[estimator.Up].Bounds = tt.b
			err := cfg.Validate()
			checkErr(t, "Validate()", err, tt.wantErr)
			if err != nil && !strings.HasPrefix(err.Error(), "controller: up: ") {
				t.Errorf("Validate() error %q does not start with %q", err, "controller: up: ")
			}
		})
	}
}

// TestDecisionMarshalLogObject: the log line's fields are rounded (whole
// kbit/s, delays to 0.1 ms, the load to 0.01) and those that say nothing
// are left out.
func TestDecisionMarshalLogObject(t *testing.T) {
	tests := []struct {
		name string
		dec  controller.Decision
		want map[string]any
	}{
		{
			name: "bloat, rounded",
			dec: controller.Decision{
				Time: t0, Link: "wan", Direction: estimator.Down,
				From: 10e6, To: 9e6, Reason: policies.ReasonBloat, State: controller.Active,
				Obs: estimator.Observation{
					Delta: 22549 * time.Microsecond, Threshold: 16 * time.Millisecond, Bloat: true,
					Achieved: 8500381.11, Offered: 9100499.9, Load: 0.8471, CapacityEstimate: 9.5e6, Reflectors: 3,
				},
				Change: controller.Change{Iface: "ifb4wan", Kind: "cake", Wrote: true},
			},
			want: map[string]any{
				"dir": "down", "from_kbit": int64(10000), "rate_kbit": int64(9000), "reason": "bloat",
				"delay_ms": 22.5, "threshold_ms": 16.0, "bloat": true,
				"achieved_kbit": int64(8500), "offered_kbit": int64(9100), "load": 0.85,
				"capacity_estimate_kbit": int64(9500), "reflectors": 3,
			},
		},
		{
			name: "start names the shaper",
			dec: controller.Decision{
				Time: t0, Link: "wan", Direction: estimator.Down, From: 10e6, To: 10e6,
				Reason: policies.ReasonStart, Change: controller.Change{Iface: "ifb4wan", Kind: "cake", Wrote: true},
			},
			want: map[string]any{
				"dir": "down", "from_kbit": int64(10000), "rate_kbit": int64(10000), "reason": "start",
				"delay_ms": 0.0, "threshold_ms": 0.0, "achieved_kbit": int64(0), "load": 0.0, "reflectors": 0,
				"iface": "ifb4wan", "qdisc": "cake",
			},
		},
		{
			name: "stall, clamped, not written",
			dec: controller.Decision{
				Time: t0, Direction: estimator.Up, From: 2e6, To: 5e6,
				Reason: policies.ReasonProbe, State: controller.Stall, Clamped: true,
			},
			want: map[string]any{
				"dir": "up", "from_kbit": int64(2000), "rate_kbit": int64(5000), "reason": "probe_up", "state": "stall", "clamped": true,
				"delay_ms": 0.0, "threshold_ms": 0.0,
				"achieved_kbit": int64(0), "load": 0.0, "reflectors": 0, "written": false,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			enc := zapcore.NewMapObjectEncoder()
			if err := tt.dec.MarshalLogObject(enc); err != nil {
				t.Fatalf("MarshalLogObject() failed: %v", err)
			}
			if diff := cmp.Diff(tt.want, enc.Fields); diff != "" {
				t.Errorf("fields mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRestoreAndReattach(t *testing.T) {
	est, err := estimator.New(estimator.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var cfg controller.Config
	cfg.Directions[estimator.Down].Bounds = policies.Bounds{Min: 1e6, Base: 10e6, Max: 20e6}
	first := &fakeShaper{}
	c, err := controller.New(cfg, est, [2]controller.Shaper{first, nil}, [2]policies.Policy{holdPolicy{}, nil}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.Restore([2]float64{50e6, 3e6}) // clamped to max; up is uncontrolled
	if got := c.Rate(estimator.Down); got != 20e6 {
		t.Errorf("Rate(down) after Restore = %v, want 20e6 (clamped)", got)
	}
	ctx := context.Background()
	if _, err := c.Tick(ctx, time.Unix(1000, 0)); err != nil {
		t.Fatal(err)
	}
	if got := first.Rate(); got != 20e6 {
		t.Errorf("first shaper rate = %v, want the restored 20e6", got)
	}
	second := &fakeShaper{}
	c.Reattach([2]controller.Shaper{second, nil})
	decs, err := c.Tick(ctx, time.Unix(1001, 0))
	if err != nil {
		t.Fatal(err)
	}
	if got := second.Rate(); got != 20e6 || len(decs) != 1 || decs[0].Reason != policies.ReasonStart {
		t.Errorf("after Reattach: new shaper rate %v, decisions %+v: want 20e6 written once", got, decs)
	}
}

// holdPolicy proposes the current rate.
type holdPolicy struct{}

func (holdPolicy) Name() string { return "hold" }
func (holdPolicy) Next(in policies.Input) policies.Proposal {
	return policies.Proposal{Rate: in.Rate, Reason: policies.ReasonHold}
}

// With no answer ever (ICMP dropped upstream, a wrong reflector list, a
// start during an outage), the controller stalls StallAfter after the start
// and stays stalled: the rates never rise, and they fall back to the safe
// rate FallbackAfter into the stall. When answers come, it leaves the stall.
func TestStallWithoutAnyAnswerHolds(t *testing.T) {
	const (
		tick          = 50 * time.Millisecond
		stallAfter    = time.Second
		fallbackAfter = 5 * time.Second
		safe          = 4e6
	)
	cfg := twoWay()
	cfg.Tick = tick
	cfg.StallAfter, cfg.FallbackAfter = stallAfter, fallbackAfter
	cfg.Directions[estimator.Down].Safe = safe
	r := newRig(t, cfg)
	for _, d := range estimator.Directions {
		r.pols[d].setThen(raise) // a policy that always asks for more
	}
	var fellBack time.Duration
	for r.now.Sub(t0) < 10*time.Second {
		decs := r.tick()
		at := r.now.Sub(t0)
		for _, d := range estimator.Directions {
			if got, base := r.ctrl.Rate(d), cfg.Directions[d].Bounds.Base; got > base {
				t.Fatalf("%v after the start without any answer: %v rate %v above base %v", at, d, got, base)
			}
		}
		if at > stallAfter && r.ctrl.State() != controller.Stall {
			t.Fatalf("%v after the start without any answer: state %v, want stall (held until answers come)", at, r.ctrl.State())
		}
		for _, dec := range decs {
			if dec.Reason == policies.ReasonFallback && fellBack == 0 {
				fellBack = at
			}
		}
		r.advance(tick, loaded)
	}
	if fellBack < stallAfter+fallbackAfter || fellBack > stallAfter+fallbackAfter+2*tick {
		t.Errorf("fell back to the safe rate %v after the start, want FallbackAfter (%v) into the stall, which began %v after the start", fellBack, fallbackAfter, stallAfter)
	}
	if got := r.ctrl.Rate(estimator.Down); got != safe {
		t.Errorf("down rate after the fallback = %v, want the safe rate %v", got, safe)
	}
	if got := r.ctrl.Rate(estimator.Up); got != upBounds.Base {
		t.Errorf("up rate after the fallback = %v, want its safe rate, base %v", got, upBounds.Base)
	}

	// Answers come back: active again.
	r.sample()
	r.tick()
	if got := r.ctrl.State(); got != controller.Active {
		t.Errorf("state after an answer = %v, want active", got)
	}
}

// Until a probe sent since the start has been answered, a policy's rise is
// not obeyed (a cut is), though the stall has not begun yet.
func TestNoRiseBeforeTheFirstAnswer(t *testing.T) {
	var cfg controller.Config
	cfg.Directions[estimator.Down].Bounds = downBounds
	r := newRig(t, cfg)
	pol := r.pols[estimator.Down]
	pol.push(15e6, 15e6, 8e6)
	var got []change
	for range 3 {
		got = append(got, changes(r.tick())...)
		r.advance(step, loaded)
	}
	want := []change{
		{Dir: estimator.Down, From: 10e6, To: 10e6, Reason: policies.ReasonStart, State: controller.Active},
		{Dir: estimator.Down, From: 10e6, To: 8e6, Reason: policies.ReasonProbe, State: controller.Active},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("decisions without answers mismatch (-want +got):\n%s", diff)
	}
	r.sample()
	pol.push(9e6)
	want = []change{{Dir: estimator.Down, From: 8e6, To: 9e6, Reason: policies.ReasonProbe, State: controller.Active}}
	if diff := cmp.Diff(want, changes(r.tick())); diff != "" {
		t.Errorf("decisions after the first answer mismatch (-want +got):\n%s", diff)
	}
}

// Every rate written lies within [min, max], whatever the bounds (with no
// whole kbit/s between them, or no room at all but one rate) and whatever
// the policy, Restore, the idle drift and the stall's fallback ask for.
func TestWritesStayWithinOddBounds(t *testing.T) {
	bounds := []policies.Bounds{
		{Min: 1500, Base: 1500, Max: 1900}, // no whole kbit/s inside
		{Min: 1500, Base: 1700, Max: 2400},
		{Min: 1500, Base: 1500, Max: 1500},
		{Min: 1234.5, Base: 1500, Max: 1999.9},
		{Min: 999.5, Base: 999.7, Max: 1000.4},
		{Min: 0.4, Base: 0.6, Max: 1.2},
		{Min: 1, Base: 1, Max: 1},
		{Min: 100, Base: 500, Max: 999},
		{Min: 2500.5, Base: 2600, Max: 2999.5},
		{Min: 1_000_400, Base: 10e6, Max: 19_999_600},
		{Min: 1e6, Base: 1e6, Max: 1e6},
	}
	wants := func(b policies.Bounds) []float64 {
		return []float64{
			math.NaN(), math.Inf(1), math.Inf(-1), 0, -1, 1e300,
			b.Min - 1, b.Min - 0.4, b.Min, b.Min + 0.4, b.Min + 499, b.Min + 501,
			b.Base, b.Base + 0.5, (b.Min + b.Max) / 2,
			b.Max - 501, b.Max - 499, b.Max - 0.6, b.Max, b.Max + 0.4, b.Max + 600, 10 * b.Max,
		}
	}
	for _, b := range bounds {
		t.Run(fmt.Sprintf("%g-%g-%g", b.Min, b.Base, b.Max), func(t *testing.T) {
			for _, restore := range wants(b) {
				var cfg controller.Config
				cfg.IdleAfter = time.Second
				cfg.Directions[estimator.Down] = controller.DirectionConfig{Bounds: b, Safe: b.Min}
				r := newRig(t, cfg)
				r.ctrl.Restore([2]float64{restore, 0})
				pol := r.pols[estimator.Down]
				// Every rate handed to the shaper: the Fake does not record
				// a write of the rate it holds (0 at first).
				var written []float64
				tick := func() {
					for _, d := range r.tick() {
						written = append(written, d.To)
					}
					written = append(written, r.ctrl.Rate(estimator.Down))
				}
				r.sample()
				tick()
				for _, w := range wants(b) {
					pol.push(w)
					r.advance(step, loaded)
					r.sample()
					tick()
				}
				// A stall and its fallback, then idle and its drift to base.
				for range 100 {
					r.advance(step, loaded)
					tick()
				}
				for range 200 {
					r.advance(step, [2]float64{})
					tick()
				}
				for _, w := range r.shapers[estimator.Down].Writes() {
					written = append(written, float64(w))
				}
				for _, w := range written {
					if w < b.Min || w > b.Max || w != math.Trunc(w) {
						t.Fatalf("restored %g: wrote %g bit/s, outside [min %g, max %g] or not a whole bit/s", restore, w, b.Min, b.Max)
					}
				}
			}
		})
	}
}

// Bounds that hold no whole bit/s cannot be written within: refused, as are
// bounds that are not numbers.
func TestValidateRefusesUnholdableBounds(t *testing.T) {
	tests := []struct {
		name    string
		b       policies.Bounds
		wantErr string
	}{
		{name: "no whole bit/s", b: policies.Bounds{Min: 0.2, Base: 0.5, Max: 0.9},
			wantErr: "min rate 0.2 bit/s and max rate 0.9 bit/s hold no whole bit/s"},
		{name: "no whole bit/s above 1", b: policies.Bounds{Min: 1500.2, Base: 1500.5, Max: 1500.7},
			wantErr: "min rate 1500.2 bit/s and max rate 1500.7 bit/s hold no whole bit/s"},
		{name: "NaN max", b: policies.Bounds{Min: 1e6, Base: 1e6, Max: math.NaN()}, wantErr: "max rate NaN bit/s is not a finite number"},
		{name: "infinite max", b: policies.Bounds{Min: 1e6, Base: 1e6, Max: math.Inf(1)}, wantErr: "max rate +Inf bit/s is not a finite number"},
		{name: "huge max", b: policies.Bounds{Min: 1e6, Base: 1e6, Max: 1e30}, wantErr: "is above the largest rate accepted"},
		{name: "no whole kbit/s is fine", b: policies.Bounds{Min: 1500, Base: 1500, Max: 1900}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var cfg controller.Config
			cfg.Directions[estimator.Down].Bounds = tt.b
			checkErr(t, "Validate()", cfg.Validate(), tt.wantErr)
		})
	}
	var cfg controller.Config
	cfg.Directions[estimator.Down] = controller.DirectionConfig{Bounds: downBounds, Safe: math.NaN()}
	checkErr(t, "Validate() of a NaN safe rate", cfg.Validate(), "safe rate NaN bit/s is outside")
}

// A shaper's counter reset from between 2 and 4 GiB to a small value is no
// 32-bit wrap: the controller gives the estimator the rate bounds that tell
// them apart, and no tick reports more than the link can carry.
func TestCounterResetIsNotAWrap(t *testing.T) {
	var cfg controller.Config
	cfg.Directions[estimator.Down].Bounds = downBounds
	r := newRig(t, cfg)
	for _, b := range []uint64{3<<30 - 62_500, 3 << 30, 5_000, 67_500} {
		r.shapers[estimator.Down].SetStats(controller.ShaperStats{Bytes: b})
		r.sample()
		r.tick()
		if got := r.ctrl.Observation(estimator.Down).Achieved; got > downBounds.Max {
			t.Fatalf("after a reading of %d bytes: achieved %.0f bit/s, above the max rate %.0f", b, got, downBounds.Max)
		}
		r.now = r.now.Add(step)
	}
}

// An idle spell does not end a stall: with no answer ever and no traffic,
// the rates fall back to the safe rate and stay there through the idle
// spell (the idle drift to base would raise them with no answer), and
// through the load that comes back without answers; an answer ends it.
func TestStallSurvivesIdle(t *testing.T) {
	const safe = 4e6
	var cfg controller.Config
	cfg.Directions[estimator.Down] = controller.DirectionConfig{Bounds: downBounds, Safe: safe}
	cfg.IdleAfter = 3 * time.Second
	r := newRig(t, cfg)
	r.pols[estimator.Down].setThen(raise)
	var states []controller.State
	note := func() {
		if s := r.ctrl.State(); len(states) == 0 || states[len(states)-1] != s {
			states = append(states, s)
		}
	}
	for range 600 { // a minute without traffic or answers
		r.tick()
		note()
		r.advance(step, [2]float64{})
	}
	if got := r.ctrl.Rate(estimator.Down); got != safe {
		t.Errorf("after a minute without answers, idle: rate %v, want the safe rate %v", got, safe)
	}
	for range 100 { // traffic again, still no answer
		r.advance(step, loaded)
		r.tick()
		note()
		if got := r.ctrl.Rate(estimator.Down); got != safe {
			t.Fatalf("loaded again without answers: rate %v, want the safe rate %v held", got, safe)
		}
	}
	want := []controller.State{controller.Active, controller.Stall, controller.Idle, controller.Active, controller.Stall}
	if diff := cmp.Diff(want, states); diff != "" {
		t.Errorf("states (-want +got):\n%s", diff)
	}
	// Answers: active, and after the recovery the policy is obeyed again.
	for range 20 {
		r.advance(step, loaded)
		r.sample()
		r.tick()
	}
	if got := r.ctrl.Rate(estimator.Down); got <= safe || r.ctrl.State() != controller.Active {
		t.Errorf("2s after answers came back: rate %v state %v, want active and above the safe rate", got, r.ctrl.State())
	}
}

// A small rise the controller holds back (it waits for half a per cent) is
// not written when the answers stop: a stall holds the rate written.
func TestStallHoldsTheRateWritten(t *testing.T) {
	var cfg controller.Config
	cfg.Directions[estimator.Down].Bounds = downBounds
	r := newRig(t, cfg)
	pol := r.pols[estimator.Down]
	r.sample()
	r.tick() // the start, at base
	base := r.ctrl.Rate(estimator.Down)
	r.advance(step, loaded)
	r.sample()
	pol.push(base * 1.002) // too small to write yet
	if decs := r.tick(); len(decs) != 0 {
		t.Fatalf("a rise of 0.2 %% was written at once: %+v", changes(decs))
	}
	for range 40 { // two seconds without an answer
		r.advance(step, loaded)
		for _, c := range changes(r.tick()) {
			if c.To > c.From {
				t.Errorf("rose from %v to %v (%s, %s) without answers", c.From, c.To, c.Reason, c.State)
			}
		}
	}
	if got := r.ctrl.Rate(estimator.Down); got > base {
		t.Errorf("rate after two seconds without answers = %v, above the %v written before", got, base)
	}
}
