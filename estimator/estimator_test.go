package estimator_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/autoshape/autoshape/estimator"
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// at returns t0 plus d.
func at(d time.Duration) time.Time { return t0.Add(d) }

// approx compares durations to within a microsecond and rates to within a
// part in a billion: baselines move by rounded exponential weights.
var approx = cmp.Options{
	cmp.Comparer(func(a, b time.Duration) bool {
		d := a - b
		return d >= -time.Microsecond && d <= time.Microsecond
	}),
	cmpopts.EquateApprox(1e-9, 0),
}

func newEstimator(t testing.TB, cfg estimator.Config) *estimator.Estimator {
	t.Helper()
	e, err := estimator.New(cfg)
	if err != nil {
		t.Fatalf("failed to create estimator: %v", err)
	}
	return e
}

func addAll(e *estimator.Estimator, samples []estimator.Sample) {
	for _, s := range samples {
		e.AddSample(s)
	}
}

// names returns n reflector names r1..rn.
func names(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("r%d", i+1)
	}
	return out
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     estimator.Config
		wantErr string
	}{
		{name: "zero takes defaults", cfg: estimator.Config{}},
		{name: "full", cfg: estimator.Config{
			Budget: 5 * time.Millisecond, MTU: 1492, Overhead: 44, Window: 10, Delayed: 10,
			Fresh: 2 * time.Second, RiseTau: time.Minute, FallWeight: 1, LoadedAt: 1,
		}},
		{name: "delayed above default window", cfg: estimator.Config{Delayed: 7},
			wantErr: "estimator: Delayed (7) must be between 1 and Window (6)"},
		{name: "delayed above window", cfg: estimator.Config{Window: 4, Delayed: 5},
			wantErr: "estimator: Delayed (5) must be between 1 and Window (4)"},
		{name: "negative delayed", cfg: estimator.Config{Delayed: -1},
			wantErr: "estimator: Delayed (-1) must be between 1 and Window (6)"},
		{name: "negative window", cfg: estimator.Config{Window: -1},
			wantErr: "estimator: Window (-1) must be between 1 and 1024"},
		{name: "huge window", cfg: estimator.Config{Window: 5000},
			wantErr: "estimator: Window (5000) must be between 1 and 1024"},
		{name: "negative budget", cfg: estimator.Config{Budget: -time.Millisecond},
			wantErr: "estimator: Budget (-1ms) must be positive"},
		{name: "tiny MTU", cfg: estimator.Config{MTU: 20},
			wantErr: "estimator: MTU (20) must be between 68 and 65535"},
		{name: "negative overhead", cfg: estimator.Config{Overhead: -4},
			wantErr: "estimator: Overhead (-4) must be between 0 and 256"},
		{name: "huge overhead", cfg: estimator.Config{Overhead: 300},
			wantErr: "estimator: Overhead (300) must be between 0 and 256"},
		{name: "negative fresh", cfg: estimator.Config{Fresh: -time.Second},
			wantErr: "estimator: Fresh (-1s) must be positive"},
		{name: "negative rise tau", cfg: estimator.Config{RiseTau: -time.Second},
			wantErr: "estimator: RiseTau (-1s) must be positive"},
		{name: "fall weight above one", cfg: estimator.Config{FallWeight: 1.5},
			wantErr: "estimator: FallWeight (1.5) must be in (0, 1]"},
		{name: "fall weight NaN", cfg: estimator.Config{FallWeight: math.NaN()},
			wantErr: "estimator: FallWeight (NaN) must be in (0, 1]"},
		{name: "negative loaded at", cfg: estimator.Config{LoadedAt: -0.1},
			wantErr: "estimator: LoadedAt (-0.1) must be in (0, 1]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			got := ""
			if err != nil {
				got = err.Error()
			}
			if diff := cmp.Diff(tt.wantErr, got); diff != "" {
				t.Errorf("Validate error (-want +got):\n%s", diff)
			}
			e, err := estimator.New(tt.cfg)
			if (err != nil) != (tt.wantErr != "") || (err == nil) != (e != nil) {
				t.Errorf("New = %v, %v; want an error: %v", e, err, tt.wantErr != "")
			}
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	e := newEstimator(t, estimator.Config{Window: 8})
	want := estimator.Config{
		Budget: 15 * time.Millisecond, MTU: 1500, Overhead: 0, Window: 8, Delayed: 3,
		Fresh: time.Second, RiseTau: 60 * time.Second, FallWeight: 0.5, LoadedAt: 0.5,
	}
	if diff := cmp.Diff(want, e.Config()); diff != "" {
		t.Errorf("Config (-want +got):\n%s", diff)
	}
}

// series returns samples of one reflector and kind, one per step from start,
// with the given delays.
func series(name string, k estimator.Kind, start, step time.Duration, delays ...time.Duration) []estimator.Sample {
	out := make([]estimator.Sample, len(delays))
	for i, d := range delays {
		out[i] = estimator.Sample{Reflector: name, Kind: k, Sent: at(start + time.Duration(i)*step), Delay: d}
	}
	return out
}

// repeat returns n copies of d.
func repeat(d time.Duration, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = d
	}
	return out
}

func TestBaseline(t *testing.T) {
	const ms = time.Millisecond
	rise := func(base, target time.Duration, elapsed time.Duration) time.Duration {
		w := 1 - math.Exp(-elapsed.Seconds()/60)
		return base + time.Duration(w*float64(target-base))
	}
	tests := []struct {
		name         string
		samples      []estimator.Sample
		wantBaseline time.Duration
		wantDeltas   []time.Duration // of Down; nil: not checked
	}{
		{
			name:         "first sample sets it",
			samples:      series("a", estimator.RTT, 0, time.Second, 42*ms),
			wantBaseline: 42 * ms,
			wantDeltas:   []time.Duration{0},
		},
		{
			name:         "falls fast",
			samples:      series("a", estimator.RTT, 0, time.Second, 50*ms, 10*ms, 10*ms, 10*ms),
			wantBaseline: 15 * ms, // 50 -> 30 -> 20 -> 15
			wantDeltas:   []time.Duration{0, 0, 0, 0},
		},
		{
			name:         "delta is taken before the baseline moves",
			samples:      series("a", estimator.RTT, 0, time.Second, 50*ms, 10*ms, 10*ms, 30*ms),
			wantBaseline: rise(20*ms, 30*ms, time.Second),
			wantDeltas:   []time.Duration{0, 0, 0, 10 * ms},
		},
		{
			name:         "rises slowly",
			samples:      series("a", estimator.RTT, 0, time.Second, append([]time.Duration{10 * ms}, repeat(30*ms, 60)...)...),
			wantBaseline: rise(10*ms, 30*ms, 60*time.Second), // about 22.6ms after one RiseTau
		},
		{
			name:         "rise depends on time, not on the probe rate",
			samples:      series("a", estimator.RTT, 0, 100*time.Millisecond, append([]time.Duration{10 * ms}, repeat(30*ms, 600)...)...),
			wantBaseline: rise(10*ms, 30*ms, 60*time.Second),
		},
		{
			name: "no rise without elapsed send time",
			samples: []estimator.Sample{
				{Reflector: "a", Sent: at(time.Second), Delay: 10 * ms},
				{Reflector: "a", Sent: at(time.Second), Delay: 30 * ms},
				{Reflector: "a", Sent: at(0), Delay: 30 * ms},
			},
			wantBaseline: 10 * ms,
			wantDeltas:   []time.Duration{0, 20 * ms, 20 * ms},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEstimator(t, estimator.Config{})
			addAll(e, tt.samples)
			got, ok := e.Baseline("a", estimator.RTT)
			if !ok {
				t.Fatal("no baseline")
			}
			if diff := cmp.Diff(tt.wantBaseline, got, approx); diff != "" {
				t.Errorf("baseline (-want +got):\n%s", diff)
			}
			obs := e.Observe(tt.samples[len(tt.samples)-1].Sent, [2]float64{})
			if tt.wantDeltas == nil {
				return
			}
			for _, d := range estimator.Directions {
				if diff := cmp.Diff(tt.wantDeltas, obs[d].Deltas, approx); diff != "" {
					t.Errorf("%v deltas (-want +got):\n%s", d, diff)
				}
			}
		})
	}
}

func TestOneWayDelayOffset(t *testing.T) {
	const ms = time.Millisecond
	tests := []struct {
		name         string
		offUp, offDn time.Duration
	}{
		{name: "no offset"},
		{name: "large negative", offUp: -3 * time.Hour, offDn: 3 * time.Hour},
		{name: "both negative", offUp: -23 * time.Hour, offDn: -5 * time.Hour},
		{name: "both positive", offUp: 11 * time.Hour, offDn: 13 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEstimator(t, estimator.Config{})
			var samples []estimator.Sample
			samples = append(samples, series("a", estimator.OWDUp, 0, 100*time.Millisecond,
				tt.offUp+5*ms, tt.offUp+5*ms, tt.offUp+5*ms, tt.offUp+25*ms)...)
			samples = append(samples, series("a", estimator.OWDDown, 0, 100*time.Millisecond,
				tt.offDn+8*ms, tt.offDn+6*ms, tt.offDn+9*ms, tt.offDn+6*ms)...)
			addAll(e, samples)
			obs := e.Observe(at(300*time.Millisecond), [2]float64{})
			type result struct {
				Delta  time.Duration
				Deltas []time.Duration
			}
			want := [2]result{
				estimator.Down: {Delta: 0, Deltas: []time.Duration{0, 0, 2 * ms, 0}},
				estimator.Up:   {Delta: 20 * ms, Deltas: []time.Duration{0, 0, 0, 20 * ms}},
			}
			got := [2]result{
				{obs[0].Delta, obs[0].Deltas},
				{obs[1].Delta, obs[1].Deltas},
			}
			if diff := cmp.Diff(want, got, approx); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestMedianAcrossReflectors(t *testing.T) {
	const ms = time.Millisecond
	tests := []struct {
		name   string
		deltas []time.Duration // one per reflector
		want   time.Duration
	}{
		{name: "six agree roughly", deltas: []time.Duration{1 * ms, 2 * ms, 3 * ms, 4 * ms, 5 * ms, 6 * ms}, want: 3 * ms},
		{name: "one of six at +200ms", deltas: []time.Duration{1 * ms, 2 * ms, 3 * ms, 4 * ms, 5 * ms, 200 * ms}, want: 3 * ms},
		{name: "two of six at +200ms", deltas: []time.Duration{1 * ms, 2 * ms, 3 * ms, 4 * ms, 200 * ms, 200 * ms}, want: 3 * ms},
		{name: "two of four at +200ms", deltas: []time.Duration{200 * ms, 3 * ms, 200 * ms, 3 * ms}, want: 3 * ms},
		{name: "two of five at +200ms", deltas: []time.Duration{200 * ms, 3 * ms, 200 * ms, 3 * ms, 4 * ms}, want: 4 * ms},
		{name: "single", deltas: []time.Duration{7 * ms}, want: 7 * ms},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEstimator(t, estimator.Config{})
			for i, name := range names(len(tt.deltas)) {
				addAll(e, series(name, estimator.RTT, time.Duration(i)*time.Millisecond, 500*time.Millisecond,
					20*ms, 20*ms+tt.deltas[i]))
			}
			obs := e.Observe(at(time.Second), [2]float64{})
			for _, d := range estimator.Directions {
				if diff := cmp.Diff(tt.want, obs[d].Delta, approx); diff != "" {
					t.Errorf("%v Delta (-want +got):\n%s", d, diff)
				}
				if obs[d].Reflectors != len(tt.deltas) {
					t.Errorf("%v Reflectors = %d, want %d", d, obs[d].Reflectors, len(tt.deltas))
				}
			}
		})
	}
}

func TestFreshness(t *testing.T) {
	const ms = time.Millisecond
	// Six reflectors answer every 200ms; r4..r6 fall silent after 800ms and
	// r1..r3 after 2s.
	var samples []estimator.Sample
	for i, name := range names(6) {
		end := 800 * time.Millisecond
		if i < 3 {
			end = 2 * time.Second
		}
		for s := time.Duration(0); s <= end; s += 200 * time.Millisecond {
			delay := 20 * ms
			if s > 0 {
				delay = 60 * ms // every sample after the first is delayed by 40ms
			}
			samples = append(samples, estimator.Sample{Reflector: name, Kind: estimator.OWDDown, Sent: at(s), Delay: delay})
		}
	}
	tests := []struct {
		name    string
		observe time.Duration
		want    estimator.Observation
	}{
		{name: "all answering", observe: time.Second,
			want: estimator.Observation{Delta: 40 * ms, Bloat: true, Reflectors: 6, LastSample: at(time.Second)}},
		{name: "half answering", observe: 2 * time.Second,
			want: estimator.Observation{Delta: 40 * ms, Bloat: true, Reflectors: 3, LastSample: at(2 * time.Second)}},
		{name: "just within fresh", observe: 3 * time.Second,
			want: estimator.Observation{Delta: 40 * ms, Bloat: true, Reflectors: 3, LastSample: at(2 * time.Second)}},
		{name: "none answering", observe: 3*time.Second + time.Nanosecond,
			want: estimator.Observation{Delta: 0, Bloat: false, Reflectors: 0, LastSample: at(2 * time.Second)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A slow rise keeps the deltas at 40ms.
			e := newEstimator(t, estimator.Config{RiseTau: 1000 * time.Hour})
			for _, s := range samples {
				if !s.Sent.After(at(tt.observe)) {
					e.AddSample(s)
				}
			}
			o := e.Observe(at(tt.observe), [2]float64{})[estimator.Down]
			got := estimator.Observation{Delta: o.Delta, Bloat: o.Bloat, Reflectors: o.Reflectors, LastSample: o.LastSample}
			if diff := cmp.Diff(tt.want, got, approx); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestBaselineJump(t *testing.T) {
	const ms = time.Millisecond
	// Every reflector answers each second at 20ms; from 10s on, the route to
	// r1 is 80ms longer.
	feed := func(e *estimator.Estimator, reflectors []string, until time.Duration) {
		for s := time.Duration(0); s <= until; s += time.Second {
			for _, name := range reflectors {
				delay := 20 * ms
				if name == "r1" && s >= 10*time.Second {
					delay += 80 * ms
				}
				e.AddSample(estimator.Sample{Reflector: name, Kind: estimator.RTT, Sent: at(s), Delay: delay})
			}
		}
	}
	tests := []struct {
		name       string
		reflectors int
		until      time.Duration
		wantMax    time.Duration // largest acceptable Delta
		wantMin    time.Duration
	}{
		{name: "six reflectors at the jump", reflectors: 6, until: 10 * time.Second, wantMax: 0},
		{name: "six reflectors soon after", reflectors: 6, until: 20 * time.Second, wantMax: 0},
		{name: "alone at the jump", reflectors: 1, until: 10 * time.Second, wantMin: 80 * ms, wantMax: 80 * ms},
		{name: "alone after one RiseTau", reflectors: 1, until: 70 * time.Second, wantMin: 25 * ms, wantMax: 35 * ms},
		{name: "alone after ten RiseTau", reflectors: 1, until: 610 * time.Second, wantMax: 100 * time.Microsecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEstimator(t, estimator.Config{})
			feed(e, names(tt.reflectors), tt.until)
			obs := e.Observe(at(tt.until), [2]float64{})
			for _, d := range estimator.Directions {
				if got := obs[d].Delta; got < tt.wantMin || got > tt.wantMax {
					t.Errorf("%v Delta = %v, want within [%v, %v]", d, got, tt.wantMin, tt.wantMax)
				}
			}
		})
	}
}

func TestBloat(t *testing.T) {
	const ms = time.Millisecond
	tests := []struct {
		name         string
		cfg          estimator.Config
		rate         float64
		deltas       []time.Duration // one OWDDown sample each after a baseline sample
		observeLater time.Duration   // observe this long after the last sample
		wantSer      time.Duration   // Serialisation; the threshold is the budget plus it
		wantBloat    bool
	}{
		{name: "20ms under threshold at 1 Mbit/s", rate: 1e6,
			deltas:  []time.Duration{20 * ms, 0, 20 * ms, 0, 20 * ms, 0},
			wantSer: 12 * ms},
		{name: "20ms over threshold at 100 Mbit/s", rate: 100e6,
			deltas:  []time.Duration{20 * ms, 0, 20 * ms, 0, 20 * ms, 0},
			wantSer: 120 * time.Microsecond, wantBloat: true},
		{name: "30ms over threshold at 1 Mbit/s", rate: 1e6,
			deltas:  []time.Duration{30 * ms, 0, 30 * ms, 0, 30 * ms, 0},
			wantSer: 12 * ms, wantBloat: true},
		{name: "unknown rate: budget alone", rate: 0,
			deltas:  []time.Duration{20 * ms, 20 * ms, 20 * ms},
			wantSer: 0, wantBloat: true},
		{name: "27.2ms over threshold without overhead", rate: 1e6,
			deltas:  []time.Duration{27200 * time.Microsecond, 27200 * time.Microsecond, 27200 * time.Microsecond},
			wantSer: 12 * ms, wantBloat: true},
		{name: "overhead counts", cfg: estimator.Config{Overhead: 44}, rate: 1e6,
			deltas:  []time.Duration{27200 * time.Microsecond, 27200 * time.Microsecond, 27200 * time.Microsecond},
			wantSer: 12*ms + 352*time.Microsecond},
		{name: "two of six", rate: 100e6,
			deltas:  []time.Duration{20 * ms, 0, 0, 0, 20 * ms, 0},
			wantSer: 120 * time.Microsecond},
		{name: "three delayed but out of the window", rate: 100e6,
			deltas:  []time.Duration{20 * ms, 20 * ms, 20 * ms, 0, 0, 0, 0, 0, 0},
			wantSer: 120 * time.Microsecond},
		{name: "custom window: 2 of 3", cfg: estimator.Config{Window: 3, Delayed: 2}, rate: 100e6,
			deltas:  []time.Duration{0, 0, 0, 20 * ms, 0, 20 * ms},
			wantSer: 120 * time.Microsecond, wantBloat: true},
		{name: "stale window", rate: 100e6,
			deltas:       []time.Duration{20 * ms, 20 * ms, 20 * ms},
			observeLater: 1500 * time.Millisecond,
			wantSer:      120 * time.Microsecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEstimator(t, tt.cfg)
			delays := []time.Duration{10 * ms}
			for _, d := range tt.deltas {
				delays = append(delays, 10*ms+d)
			}
			samples := series("a", estimator.OWDDown, 0, 100*time.Millisecond, delays...)
			addAll(e, samples)
			now := samples[len(samples)-1].Sent.Add(tt.observeLater)
			o := e.Observe(now, [2]float64{estimator.Down: tt.rate})[estimator.Down]
			type result struct {
				Serialisation, Threshold time.Duration
				Bloat                    bool
			}
			want := result{tt.wantSer, estimator.DefaultBudget + tt.wantSer, tt.wantBloat}
			if diff := cmp.Diff(want, result{o.Serialisation, o.Threshold, o.Bloat}); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestEchoBlame(t *testing.T) {
	const ms = time.Millisecond
	const rate = 10e6
	rtt := func(extra time.Duration) []estimator.Sample {
		return series("a", estimator.RTT, 0, 100*time.Millisecond, 20*ms, 20*ms+extra, 20*ms+extra, 20*ms+extra)
	}
	tests := []struct {
		name    string
		loads   [2]float64 // by Direction
		samples []estimator.Sample
		want    [2]bool // Bloat by Direction
	}{
		{name: "download loaded, upload idle", loads: [2]float64{0.9, 0.01}, samples: rtt(50 * ms),
			want: [2]bool{true, false}},
		{name: "upload loaded, download idle", loads: [2]float64{0.02, 0.95}, samples: rtt(50 * ms),
			want: [2]bool{false, true}},
		{name: "both loaded", loads: [2]float64{0.9, 0.6}, samples: rtt(50 * ms),
			want: [2]bool{true, true}},
		{name: "both idle: no way to tell", loads: [2]float64{0, 0}, samples: rtt(50 * ms),
			want: [2]bool{true, true}},
		{name: "neither loaded: the busier takes it", loads: [2]float64{0.2, 0.3}, samples: rtt(50 * ms),
			want: [2]bool{false, true}},
		{name: "not delayed", loads: [2]float64{0.9, 0.9}, samples: rtt(10 * ms),
			want: [2]bool{false, false}},
		{name: "one-way delay needs no blame", loads: [2]float64{0.9, 0.01},
			samples: series("a", estimator.OWDUp, 0, 100*time.Millisecond, 5*ms, 55*ms, 55*ms, 55*ms),
			want:    [2]bool{false, true}},
		{
			// The reflector answers timestamps: its one-way delays show the
			// bloat is upstream, and the round trips it also reports are
			// not blamed on the loaded download.
			name: "round trips beside one-way delays are not used", loads: [2]float64{0.9, 0.6},
			samples: func() []estimator.Sample {
				var out []estimator.Sample
				for i, extra := range []time.Duration{0, 50 * ms, 50 * ms, 50 * ms} {
					sent := at(time.Duration(i) * 100 * time.Millisecond)
					out = append(out,
						estimator.Sample{Reflector: "a", Kind: estimator.RTT, Sent: sent, Delay: 20*ms + extra},
						estimator.Sample{Reflector: "a", Kind: estimator.OWDUp, Sent: sent, Delay: -time.Hour + 5*ms + extra},
						estimator.Sample{Reflector: "a", Kind: estimator.OWDDown, Sent: sent, Delay: time.Hour + 15*ms},
					)
				}
				return out
			}(),
			want: [2]bool{false, true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEstimator(t, estimator.Config{})
			for _, d := range estimator.Directions {
				e.AddCounter(d, at(-time.Second), 0)
				e.AddCounter(d, at(0), uint64(tt.loads[d]*rate/8))
			}
			addAll(e, tt.samples)
			obs := e.Observe(tt.samples[len(tt.samples)-1].Sent, [2]float64{rate, rate})
			got := [2]bool{obs[0].Bloat, obs[1].Bloat}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Bloat [down up] (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAchievedRate(t *testing.T) {
	type reading struct {
		at    time.Duration
		bytes uint64
	}
	tests := []struct {
		name     string
		readings []reading
		want     float64
	}{
		{name: "no readings", want: 0},
		{name: "first reading gives no rate", readings: []reading{{0, 5000}}, want: 0},
		{name: "normal", readings: []reading{{0, 1000}, {time.Second, 126000}}, want: 1e6},
		{name: "last interval counts", readings: []reading{{0, 0}, {time.Second, 125000}, {1500 * time.Millisecond, 250000}}, want: 2e6},
		{name: "32-bit wrap",
			readings: []reading{{0, math.MaxUint32 - 999}, {time.Second, 124000}}, want: 1e6},
		{name: "64-bit wrap",
			readings: []reading{{0, math.MaxUint64 - 999}, {time.Second, 124000}}, want: 1e6},
		{name: "reset of a small counter keeps the last rate",
			readings: []reading{{0, 999_875_000}, {time.Second, 1_000_000_000}, {2 * time.Second, 10}}, want: 1e6},
		{name: "reset of a large counter keeps the last rate",
			readings: []reading{{0, 1e12}, {time.Second, 1e12 + 125000}, {2 * time.Second, 5}}, want: 1e6},
		{name: "after a reset the new reading is the base",
			readings: []reading{{0, 999_875_000}, {time.Second, 1_000_000_000}, {2 * time.Second, 10}, {3 * time.Second, 250010}}, want: 2e6},
		{name: "readings without elapsed time are ignored",
			readings: []reading{{0, 0}, {time.Second, 125000}, {time.Second, 999999}, {500 * time.Millisecond, 5}, {2 * time.Second, 250000}}, want: 1e6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, d := range estimator.Directions {
				e := newEstimator(t, estimator.Config{})
				for _, r := range tt.readings {
					e.AddCounter(d, at(r.at), r.bytes)
				}
				obs := e.Observe(at(10*time.Second), [2]float64{})
				got := [2]float64{obs[0].Achieved, obs[1].Achieved}
				var want [2]float64
				want[d] = tt.want
				if diff := cmp.Diff(want, got, approx); diff != "" {
					t.Errorf("%v: Achieved [down up] (-want +got):\n%s", d, diff)
				}
			}
		})
	}
}

// TestOfferedRate checks the rate at which traffic reached the shaper: the
// achieved (wire) rate scaled by what reached the shaper over what it sent.
func TestOfferedRate(t *testing.T) {
	type reading struct {
		at                  time.Duration
		wire, sent, offered uint64
	}
	tests := []struct {
		name     string
		readings []reading
		want     float64
	}{
		{name: "no readings", want: 0},
		{name: "first reading gives no rate", readings: []reading{{0, 1000, 900, 900}}, want: 0},
		// 1 Mbit/s on the wire; twice as much reached the shaper as it sent
		// (the rest it dropped or queued).
		{name: "twice what was sent", readings: []reading{{0, 0, 0, 0}, {time.Second, 125_000, 100_000, 200_000}}, want: 2e6},
		{name: "all of it sent", readings: []reading{{0, 0, 0, 0}, {time.Second, 125_000, 100_000, 100_000}}, want: 1e6},
		{name: "nothing sent: unknown", readings: []reading{{0, 0, 0, 0}, {time.Second, 0, 0, 5000}}, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, d := range estimator.Directions {
				e := newEstimator(t, estimator.Config{})
				for _, r := range tt.readings {
					e.AddCounter(d, at(r.at), r.wire)
					e.AddOffered(d, at(r.at), r.sent, r.offered)
				}
				obs := e.Observe(at(10*time.Second), [2]float64{})
				got := [2]float64{obs[0].Offered, obs[1].Offered}
				var want [2]float64
				want[d] = tt.want
				if diff := cmp.Diff(want, got, approx); diff != "" {
					t.Errorf("%v: Offered [down up] (-want +got):\n%s", d, diff)
				}
			}
		})
	}
}

func TestObserveWithoutSamples(t *testing.T) {
	const ms = time.Millisecond
	e := newEstimator(t, estimator.Config{})
	e.AddCounter(estimator.Down, at(0), 0)
	e.AddCounter(estimator.Down, at(time.Second), 625_000) // 5 Mbit/s
	e.AddCounter(estimator.Up, at(0), 0)
	e.AddCounter(estimator.Up, at(2*time.Second), 250_000) // 1 Mbit/s
	e.SetCapacityEstimate(estimator.Down, 20e6)
	e.SetCapacityEstimate(estimator.Up, 3e6)
	e.SetCapacityEstimate(estimator.Up, 0)
	now := at(3 * time.Second)
	got := e.Observe(now, [2]float64{estimator.Down: 10e6, estimator.Up: 0})
	want := [2]estimator.Observation{
		estimator.Down: {
			Time: now, Direction: estimator.Down, Serialisation: 1200 * time.Microsecond, Threshold: 15*ms + 1200*time.Microsecond,
			Achieved: 5e6, ShaperRate: 10e6, Load: 0.5, CapacityEstimate: 20e6,
		},
		estimator.Up: {
			Time: now, Direction: estimator.Up, Threshold: 15 * ms,
			Achieved: 1e6, ShaperRate: 0, Load: 0, CapacityEstimate: 0,
		},
	}
	if diff := cmp.Diff(want, got, approx); diff != "" {
		t.Errorf("Observe (-want +got):\n%s", diff)
	}
}

func TestDeltas(t *testing.T) {
	const ms = time.Millisecond
	tests := []struct {
		name    string
		samples []estimator.Sample
		want    [2][]time.Duration
	}{
		{name: "none"},
		{name: "round trips go both ways",
			samples: series("a", estimator.RTT, 0, 100*time.Millisecond, 10*ms, 15*ms, 12*ms),
			want:    [2][]time.Duration{{0, 5 * ms, 2 * ms}, {0, 5 * ms, 2 * ms}}},
		{name: "one-way delays go their way",
			samples: append(series("a", estimator.OWDUp, 0, 100*time.Millisecond, 10*ms, 13*ms),
				series("b", estimator.OWDDown, 0, 100*time.Millisecond, 10*ms, 17*ms, 19*ms)...),
			want: [2][]time.Duration{{0, 7 * ms, 9 * ms}, {0, 3 * ms}}},
		{name: "arrival order across reflectors",
			samples: []estimator.Sample{
				{Reflector: "a", Kind: estimator.OWDDown, Sent: at(0), Delay: 10 * ms},
				{Reflector: "b", Kind: estimator.OWDDown, Sent: at(0), Delay: 50 * ms},
				{Reflector: "b", Kind: estimator.OWDDown, Sent: at(100 * ms), Delay: 51 * ms},
				{Reflector: "a", Kind: estimator.OWDDown, Sent: at(50 * ms), Delay: 14 * ms},
			},
			want: [2][]time.Duration{{0, 0, 1 * ms, 4 * ms}, nil}},
		{name: "only the newest are kept",
			samples: series("a", estimator.OWDUp, 0, 10*time.Millisecond, append(repeat(10*ms, 100), 11*ms)...),
			want:    [2][]time.Duration{nil, append(repeat(0, estimator.MaxPendingDeltas-1), 1*ms)}},
		{name: "unknown kind is ignored",
			samples: []estimator.Sample{{Reflector: "a", Kind: estimator.Kind(7), Sent: at(0), Delay: 10 * ms}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A slow rise keeps the deltas round.
			e := newEstimator(t, estimator.Config{RiseTau: 1000 * time.Hour})
			addAll(e, tt.samples)
			obs := e.Observe(at(time.Second), [2]float64{})
			got := [2][]time.Duration{obs[0].Deltas, obs[1].Deltas}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Deltas [down up] (-want +got):\n%s", diff)
			}
			obs = e.Observe(at(2*time.Second), [2]float64{})
			if obs[0].Deltas != nil || obs[1].Deltas != nil {
				t.Errorf("second Observe: Deltas = %v, %v; want none", obs[0].Deltas, obs[1].Deltas)
			}
		})
	}
}

func TestDeltasValidUntilNextObserve(t *testing.T) {
	const ms = time.Millisecond
	e := newEstimator(t, estimator.Config{RiseTau: 1000 * time.Hour})
	addAll(e, series("a", estimator.OWDUp, 0, 100*time.Millisecond, 10*ms, 12*ms))
	first := e.Observe(at(time.Second), [2]float64{})[estimator.Up].Deltas
	addAll(e, series("a", estimator.OWDUp, time.Second, 100*time.Millisecond, 17*ms, 18*ms, 19*ms))
	if diff := cmp.Diff([]time.Duration{0, 2 * ms}, first, approx); diff != "" {
		t.Errorf("first Deltas after more samples (-want +got):\n%s", diff)
	}
	second := e.Observe(at(2*time.Second), [2]float64{})[estimator.Up].Deltas
	if diff := cmp.Diff([]time.Duration{7 * ms, 8 * ms, 9 * ms}, second, approx); diff != "" {
		t.Errorf("second Deltas (-want +got):\n%s", diff)
	}
}

func TestForgetReflector(t *testing.T) {
	const ms = time.Millisecond
	e := newEstimator(t, estimator.Config{})
	addAll(e, series("a", estimator.RTT, 0, 100*time.Millisecond, 10*ms, 20*ms))
	addAll(e, series("b", estimator.RTT, 0, 100*time.Millisecond, 10*ms, 10*ms))
	e.ForgetReflector("b")
	e.ForgetReflector("never seen")
	o := e.Observe(at(200*ms), [2]float64{})[estimator.Down]
	if o.Reflectors != 1 {
		t.Errorf("Reflectors = %d, want 1", o.Reflectors)
	}
	if b, ok := e.Baseline("b", estimator.RTT); ok {
		t.Errorf("Baseline of a forgotten reflector = %v, want none", b)
	}
	e.ForgetReflector("a")
	addAll(e, series("a", estimator.RTT, 300*ms, 100*time.Millisecond, 40*ms))
	o = e.Observe(at(400*ms), [2]float64{})[estimator.Down]
	if diff := cmp.Diff([]time.Duration{0}, o.Deltas); diff != "" {
		t.Errorf("Deltas after forgetting (-want +got):\n%s", diff)
	}
	if b, _ := e.Baseline("a", estimator.RTT); b != 40*ms {
		t.Errorf("Baseline after forgetting = %v, want 40ms", b)
	}
}

func BenchmarkAddSampleObserve(b *testing.B) {
	e := newEstimator(b, estimator.Config{})
	refl := names(6)
	rates := [2]float64{50e6, 10e6}
	b.ReportAllocs()
	var sent time.Duration
	for i := 0; b.Loop(); i++ {
		for j, name := range refl {
			sent += 10 * time.Millisecond
			delay := 20*time.Millisecond + time.Duration(i%7+j)*time.Millisecond
			e.AddSample(estimator.Sample{Reflector: name, Kind: estimator.OWDUp, Sent: at(sent), Delay: delay})
			e.AddSample(estimator.Sample{Reflector: name, Kind: estimator.OWDDown, Sent: at(sent), Delay: delay})
		}
		e.AddCounter(estimator.Down, at(sent), uint64(i)*100_000)
		e.AddCounter(estimator.Up, at(sent), uint64(i)*20_000)
		e.Observe(at(sent), rates)
	}
}

// A counter that falls from between 2 and 4 GiB to a small value was reset
// (a 32-bit wrap would mean an advance far beyond what the link carries):
// the interval gives no rate. A true wrap at the link's rate still counts.
func TestCounterResetIsNotAWrap(t *testing.T) {
	const (
		gib     = 1 << 30
		maxRate = 100e6 // bit/s
		tick    = 50 * time.Millisecond
	)
	tests := []struct {
		name     string
		readings []uint64 // one per tick
		want     float64
	}{
		// 1 Mbit/s, then a reset from 3 GiB to a few bytes.
		{name: "reset from 3 GiB", readings: []uint64{3*gib - 6250, 3 * gib, 5}, want: 1e6},
		{name: "reset from 2.5 GiB", readings: []uint64{5*gib/2 - 6250, 5 * gib / 2, 100_000}, want: 1e6},
		// 80 Mbit/s across a 32-bit wrap.
		{name: "32-bit wrap at the link's rate", readings: []uint64{math.MaxUint32 - 400_000, math.MaxUint32 - 200_000, 299_999}, want: 80e6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, d := range estimator.Directions {
				e := newEstimator(t, estimator.Config{})
				e.SetMaxRate(d, maxRate)
				for i, b := range tt.readings {
					e.AddCounter(d, at(time.Duration(i)*tick), b)
					e.AddOffered(d, at(time.Duration(i)*tick), b, b)
				}
				obs := e.Observe(at(time.Duration(len(tt.readings))*tick), [2]float64{maxRate, maxRate})
				if got := obs[d].Achieved; math.Abs(got-tt.want) > 1 {
					t.Errorf("%v: Achieved = %.0f bit/s, want %.0f", d, got, tt.want)
				}
				if got := obs[d].Offered; math.Abs(got-tt.want) > 1 {
					t.Errorf("%v: Offered = %.0f bit/s, want %.0f", d, got, tt.want)
				}
			}
		})
	}
}
