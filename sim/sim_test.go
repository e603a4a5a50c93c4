package sim_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/autoshape/autoshape/policies"
	"github.com/autoshape/autoshape/sim"
)

// scheme returns the named standard scheme with default settings.
func scheme(t testing.TB, name string) sim.Scheme {
	t.Helper()
	ss, err := sim.Schemes([]string{name}, policies.BudgetConfig{}, policies.DefaultClassicConfig())
	if err != nil {
		t.Fatalf("Schemes(%q) failed: %v", name, err)
	}
	return ss[0]
}

func run(t testing.TB, cfg sim.Config, s sim.Scheme) []sim.Result {
	t.Helper()
	res, err := sim.Run(cfg, s)
	if err != nil {
		t.Fatalf("Run(%s) failed: %v", s.Name, err)
	}
	return res
}

func TestRunIsDeterministic(t *testing.T) {
	link := mustSchedule(t, "10mbit")
	cfg := sim.Config{Down: link, Up: link, Duration: 10 * time.Second, Seed: 7}
	for _, name := range []string{"autoshape", "classic"} {
		t.Run(name, func(t *testing.T) {
			first := run(t, cfg, scheme(t, name))
			second := run(t, cfg, scheme(t, name))
			if len(first) != 2 {
				t.Fatalf("Run() gave %d results, want one per direction", len(first))
			}
			if diff := cmp.Diff(first, second); diff != "" {
				t.Errorf("two runs with the same seed differ (-first +second):\n%s", diff)
			}
			// Another seed moves jitter and reflectors; the result may
			// differ, but it must still be a result.
			other := cfg
			other.Seed = 8
			if diff := cmp.Diff(first, run(t, other, scheme(t, name))); diff == "" {
				t.Logf("seeds 7 and 8 gave identical results")
			}
		})
	}
}

// The model's physics: greedy TCP fills an unshaped bloated buffer, a shaper
// below capacity keeps it empty.
func TestModelPhysics(t *testing.T) {
	link := mustSchedule(t, "10mbit")
	cfg := sim.Config{Down: link, Duration: 10 * time.Second, Seed: 1}

	t.Run("unshaped", func(t *testing.T) {
		res := run(t, cfg, scheme(t, "unshaped"))
		if len(res) != 1 || res[0].Direction != "down" || res[0].Scheme != "unshaped" {
			t.Fatalf("results = %+v, want one for down", res)
		}
		r := res[0]
		if r.CapacityMbps != 10 {
			t.Errorf("capacity = %v Mbit/s, want 10", r.CapacityMbps)
		}
		if r.Utilization <= 0.9 {
			t.Errorf("unshaped utilization = %v, want > 0.9", r.Utilization)
		}
		if r.Delay.P95 <= 100 {
			t.Errorf("unshaped p95 delay = %v ms, want > 100 ms: the bloated buffer should fill", r.Delay.P95)
		}
		if r.ReactionS != nil || r.MeanRateMbps != 0 || r.RateChanges != 0 {
			t.Errorf("unshaped: reaction %v, mean rate %v, changes %d; want none", r.ReactionS, r.MeanRateMbps, r.RateChanges)
		}
	})
	t.Run("static90", func(t *testing.T) {
		r := run(t, cfg, scheme(t, "static90"))[0]
		if r.Delay.P95 >= 15 {
			t.Errorf("static90 p95 delay = %v ms, want < 15 ms on a constant link", r.Delay.P95)
		}
		if r.MeanRateMbps < 8.9 || r.MeanRateMbps > 9.1 {
			t.Errorf("static90 mean rate = %v Mbit/s, want 9", r.MeanRateMbps)
		}
		if r.Utilization > 0.91 || r.Utilization < 0.8 {
			t.Errorf("static90 utilization = %v, want about 0.9", r.Utilization)
		}
	})
}

func TestReaction(t *testing.T) {
	step := mustSchedule(t, "20mbit@0s,5mbit@5s")
	constant := mustSchedule(t, "10mbit")
	tests := []struct {
		scheme       string
		link         *sim.Trace
		wantReaction bool
	}{
		{scheme: "autoshape", link: step, wantReaction: true},
		{scheme: "classic", link: step, wantReaction: true},
		{scheme: "oracle", link: step, wantReaction: true},
		{scheme: "unshaped", link: step},
		{scheme: "autoshape", link: constant},
		{scheme: "classic", link: constant},
	}
	for _, tt := range tests {
		t.Run(tt.scheme+" "+tt.link.Name, func(t *testing.T) {
			r := run(t, sim.Config{Down: tt.link, Duration: 10 * time.Second, Seed: 1}, scheme(t, tt.scheme))[0]
			if got := r.ReactionS != nil; got != tt.wantReaction {
				t.Fatalf("reaction_s present = %v, want %v", got, tt.wantReaction)
			}
			if !tt.wantReaction {
				return
			}
			if len(r.Reactions) != 1 || len(r.WorstDelayMs) != 1 {
				t.Fatalf("reactions %v, worst delays %v: want one per drop", r.Reactions, r.WorstDelayMs)
			}
			// The drop is at 5s of 10s: a reaction is at most the 5s left.
			if *r.ReactionS < 0 || *r.ReactionS > 5 || *r.ReactionS != r.Reactions[0] {
				t.Errorf("reaction_s = %v (reactions %v), want the one drop's, within [0, 5]", *r.ReactionS, r.Reactions)
			}
		})
	}
}

// The simulator scores a rise's recovery for a shaped scheme, none for an
// unshaped one or a constant link.
func TestRecovery(t *testing.T) {
	rise := mustSchedule(t, "5mbit@0s,20mbit@3s")
	tests := []struct {
		scheme string
		link   *sim.Trace
		want   bool
	}{
		{scheme: "oracle", link: rise, want: true},
		{scheme: "autoshape", link: rise, want: true},
		{scheme: "unshaped", link: rise},
		{scheme: "autoshape", link: mustSchedule(t, "10mbit")},
	}
	for _, tt := range tests {
		t.Run(tt.scheme+" "+tt.link.Name, func(t *testing.T) {
			r := run(t, sim.Config{Down: tt.link, Duration: 8 * time.Second, Seed: 1}, scheme(t, tt.scheme))[0]
			if got := r.RecoveryS != nil; got != tt.want {
				t.Fatalf("recovery_s present = %v, want %v", got, tt.want)
			}
			if !tt.want {
				return
			}
			// The rise is at 3s of 8s: a recovery takes at least a window
			// and at most the 5s left.
			if len(r.Recoveries) != 1 || len(r.RiseWorstDelayMs) != 1 || *r.RecoveryS < sim.RecoveryWindow.Seconds() || *r.RecoveryS > 5 {
				t.Errorf("recovery_s = %v, recoveries %v, worst delays %v: want one in [0.5, 5]", *r.RecoveryS, r.Recoveries, r.RiseWorstDelayMs)
			}
		})
	}
}

// Any link a schedule can describe must simulate: the bounds derived from a
// very slow trace must still satisfy min <= base <= max.
func TestSlowLink(t *testing.T) {
	for _, rate := range []string{"50kbit", "200kbit"} {
		t.Run(rate, func(t *testing.T) {
			link := mustSchedule(t, rate)
			b := sim.DefaultBounds(link, 2*time.Second)
			_, err := sim.Run(sim.Config{Down: link, Duration: 2 * time.Second, Seed: 1}, scheme(t, "autoshape"))
			if err != nil || b.Min > b.Base || b.Base > b.Max {
				t.Fatalf("DefaultBounds(%s) = %+v (min is floored at 64 kbit/s, max is not), Run() = %v", rate, b, err)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	link := mustSchedule(t, "10mbit")
	tests := []struct {
		name    string
		cfg     sim.Config
		wantErr string
	}{
		{name: "down only", cfg: sim.Config{Down: link}},
		{name: "up only", cfg: sim.Config{Up: link}},
		{name: "zero flows take the default", cfg: sim.Config{Down: link, Flows: 0}},
		{name: "no traces", cfg: sim.Config{}, wantErr: "no trace"},
		{name: "negative budget", cfg: sim.Config{Down: link, Budget: -time.Millisecond}, wantErr: "budget -1ms is negative"},
		{name: "100 flows", cfg: sim.Config{Down: link, Flows: 100}, wantErr: "flows 100"},
		{name: "negative flows", cfg: sim.Config{Down: link, Flows: -1}, wantErr: "flows -1"},
		{name: "probe loss 2", cfg: sim.Config{Down: link, ProbeLoss: 2}, wantErr: "probe loss 2"},
		{name: "negative probe loss", cfg: sim.Config{Down: link, ProbeLoss: -0.1}, wantErr: "probe loss"},
		{name: "too short", cfg: sim.Config{Down: link, Duration: 500 * time.Millisecond}, wantErr: "shorter than 1s"},
		{name: "too long", cfg: sim.Config{Down: link, Duration: 49 * time.Hour}, wantErr: "longer than 48h"},
		{name: "base RTT", cfg: sim.Config{Down: link, BaseRTT: 3 * time.Second}, wantErr: "base RTT"},
		{name: "negative buffer", cfg: sim.Config{Down: link, Buffer: -time.Second}, wantErr: "buffer"},
		{name: "no reflectors", cfg: sim.Config{Down: link, Reflectors: -1}, wantErr: "reflectors"},
		{name: "probe rate", cfg: sim.Config{Down: link, ProbeRate: 2000}, wantErr: "probe rate"},
		{name: "tick", cfg: sim.Config{Down: link, Tick: time.Microsecond}, wantErr: "tick"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("Validate() = %v, want an error containing %q", err, tt.wantErr)
			}
			if tt.wantErr == "" {
				return
			}
			// Run refuses the same config before simulating anything.
			if _, err := sim.Run(tt.cfg, scheme(t, "unshaped")); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Run() = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestSchemes(t *testing.T) {
	ss, err := sim.Schemes(sim.SchemeNames, policies.BudgetConfig{}, policies.DefaultClassicConfig())
	if err != nil {
		t.Fatalf("Schemes(all) failed: %v", err)
	}
	var names []string
	for _, s := range ss {
		names = append(names, s.Name)
	}
	if diff := cmp.Diff(sim.SchemeNames, names); diff != "" {
		t.Errorf("scheme names mismatch (-want +got):\n%s", diff)
	}
	tests := []struct {
		name    string
		names   []string
		budget  policies.BudgetConfig
		wantErr string
	}{
		{name: "unknown", names: []string{"autoshape", "nosuch"}, wantErr: `unknown policy "nosuch"`},
		{name: "bad budget", names: []string{"autoshape"}, budget: policies.BudgetConfig{Budget: -time.Millisecond}, wantErr: "budget"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := sim.Schemes(tt.names, tt.budget, policies.DefaultClassicConfig())
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Schemes(%q) = %v, want an error containing %q", tt.names, err, tt.wantErr)
			}
		})
	}
}

// BenchmarkSimulateHour measures how long one simulated hour of the embedded
// LTE trace pair takes under the autoshape scheme.
func BenchmarkSimulateHour(b *testing.B) {
	down, up := sim.EmbeddedTraces()
	cfg := sim.Config{Down: down, Up: up, Duration: time.Hour, Seed: 1}
	s := scheme(b, "autoshape")
	n := 0
	for b.Loop() {
		if _, err := sim.Run(cfg, s); err != nil {
			b.Fatal(err)
		}
		n++
	}
	b.ReportMetric(b.Elapsed().Seconds()/float64(n), "s/simhour")
}

// ScoreDelays takes one delay per probe slot; a lost probe (NaN) is left
// out of the percentiles but is not under the budget in a reaction.
func TestScoreDelaysLostProbes(t *testing.T) {
	nan := float32(math.NaN())
	step := mustSchedule(t, "20mbit@0s,5mbit@1s")
	every := 100 * time.Millisecond
	// 1 s before the drop, then: over, under, lost, 2.5 s under.
	delays := []float32{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 40, 2, nan}
	for range 25 {
		delays = append(delays, 2)
	}
	var r sim.Result
	sim.ScoreDelays(&r, delays, every, step, 15*time.Millisecond, 3800*time.Millisecond, true)
	if r.ReactionS == nil || *r.ReactionS != 0.3 {
		t.Errorf("reaction_s = %v, want 0.3 (the lost probe is not under the budget)", r.ReactionS)
	}
	if len(r.WorstDelayMs) != 1 || r.WorstDelayMs[0] != 40 {
		t.Errorf("worst delays %v, want [40]", r.WorstDelayMs)
	}
	if r.Delay.P99 != 40 || r.Delay.P50 != 2 {
		t.Errorf("delays %+v: want p50 2 and p99 40 from the 37 answered probes", r.Delay)
	}
	if r.SteadyDelay == nil || r.SteadyDelay.P99 != 2 {
		t.Errorf("steady delays %+v, want p99 2 (the reaction window left out)", r.SteadyDelay)
	}
	if want := 1.0 / 37; math.Abs(r.OverBudget-want) > 1e-9 {
		t.Errorf("over budget %v, want %v", r.OverBudget, want)
	}
}

// ScoreRecoveries times each rise of the capacity to the end of the first
// RecoveryWindow (five 100 ms intervals) whose mean goodput reaches 90 % of
// the new capacity.
func TestScoreRecoveries(t *testing.T) {
	every := 100 * time.Millisecond
	// series is 1 s at before, then the given goodputs, then after for ever
	// (to 5 s in all): one value per 100 ms interval.
	series := func(before float64, ramp []float64, after float64) []float64 {
		var out []float64
		for range 10 {
			out = append(out, before)
		}
		out = append(out, ramp...)
		for len(out) < 50 {
			out = append(out, after)
		}
		return out
	}
	tests := []struct {
		name    string
		sched   string
		goodput []float64
		dur     time.Duration
		want    []float64 // nil: no recovery scored
	}{
		{
			name:    "at once: the first window after the rise",
			sched:   "10mbit@0s,40mbit@1s",
			goodput: series(10, nil, 40),
			dur:     5 * time.Second,
			want:    []float64{0.5},
		},
		{
			// Windows ending at 1.6, 1.7, 1.8 s average 21.2, 27.2 and
			// 33.2 Mbit/s; the one ending at 1.9 s, 37.2.
			name:    "a ramp: the end of the first window at 36 Mbit/s",
			sched:   "10mbit@0s,40mbit@1s",
			goodput: series(10, []float64{10, 10, 10, 20, 30, 36, 40, 40, 40}, 40),
			dur:     5 * time.Second,
			want:    []float64{0.9},
		},
		{
			name:    "one interval at the capacity is not enough",
			sched:   "10mbit@0s,40mbit@1s",
			goodput: series(10, []float64{40, 10, 10, 10, 10, 10, 10}, 40),
			dur:     5 * time.Second,
			want:    []float64{1.2},
		},
		{
			name:    "never: until the next change",
			sched:   "10mbit@0s,40mbit@1s,10mbit@3s",
			goodput: series(10, nil, 30),
			dur:     5 * time.Second,
			want:    []float64{2},
		},
		{
			name:    "never: until the run's end",
			sched:   "10mbit@0s,40mbit@1s",
			goodput: series(10, nil, 30),
			dur:     5 * time.Second,
			want:    []float64{4},
		},
		{
			name:    "a rise under RiseFactor is not scored",
			sched:   "10mbit@0s,14mbit@1s",
			goodput: series(10, nil, 14),
			dur:     5 * time.Second,
		},
		{
			name:    "nor one after the run's end",
			sched:   "10mbit@0s,40mbit@6s",
			goodput: series(10, nil, 10),
			dur:     5 * time.Second,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r sim.Result
			sim.ScoreRecoveries(&r, tt.goodput, every, mustSchedule(t, tt.sched), tt.dur, true)
			if diff := cmp.Diff(tt.want, r.Recoveries); diff != "" {
				t.Fatalf("recoveries mismatch (-want +got):\n%s", diff)
			}
			if tt.want == nil {
				if r.RecoveryS != nil {
					t.Errorf("recovery_s = %v, want none", *r.RecoveryS)
				}
				return
			}
			if r.RecoveryS == nil || *r.RecoveryS != slices.Max(tt.want) {
				t.Errorf("recovery_s = %v, want the worst, %v", r.RecoveryS, slices.Max(tt.want))
			}
		})
	}
	var r sim.Result
	sim.ScoreRecoveries(&r, series(10, nil, 40), every, mustSchedule(t, "10mbit@0s,40mbit@1s"), 5*time.Second, false)
	if r.RecoveryS != nil || r.Recoveries != nil {
		t.Errorf("unshaped: recoveries %v, want none", r.Recoveries)
	}
}

// sortDelays orders as a comparison sort does and leaves lost probes out.
func TestSortDelays(t *testing.T) {
	nan := float32(math.NaN())
	rng := rand.New(rand.NewPCG(1, 2))
	random := make([]float32, 10000)
	for i := range random {
		random[i] = float32(rng.NormFloat64() * 100)
		if i%97 == 0 {
			random[i] = nan
		}
	}
	tests := []struct {
		name string
		in   []float32
	}{
		{"empty", nil},
		{"only lost probes", []float32{nan, nan}},
		{"mixed signs and lost probes", []float32{3, -1, nan, 0, 1498, -0.5, 0.25, 2, 2, nan, float32(math.Inf(1)), float32(math.Inf(-1))}},
		{"random", random},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := slices.DeleteFunc(slices.Clone(tt.in), func(v float32) bool { return v != v })
			slices.Sort(want)
			got := sim.SortDelays(tt.in)
			if !slices.Equal(got, want) {
				t.Errorf("sortDelays(%v) = %v, want %v", tt.in[:min(len(tt.in), 12)], got[:min(len(got), 12)], want[:min(len(want), 12)])
			}
		})
	}
}

// TestAutorateIngress: CAKE's autorate-ingress alone, starting above the
// capacity. Its download rate is 15/16 of its estimate; the estimate falls
// slowly (by 1/256 per packet train), so after a drop the bottleneck's
// queue fills.
func TestAutorateIngress(t *testing.T) {
	link := mustSchedule(t, "20mbit@0s,5mbit@20s")
	start := policies.Bounds{Min: 1e6, Base: 24e6, Max: 30e6}
	cfg := sim.Config{Down: link, Duration: 40 * time.Second, Seed: 1, Series: true}
	cfg.Bounds[0] = &start // estimator.Down
	res := run(t, cfg, scheme(t, sim.AutorateName))
	s := res[0].Series
	at := func(sec float64) int { return int(sec*10) - 1 }
	for _, sec := range []float64{10, 19, 30, 39} {
		i := at(sec)
		est, rate := s.CapacityEstimate[i], s.Rate[i]
		if math.Abs(rate-est*15/16) > 0.02*est {
			t.Errorf("at %v s: rate %.2f Mbit/s, want 15/16 of the estimate %.2f", sec, rate, est)
		}
	}
	if e := slices.Max(s.CapacityEstimate); e > 24 {
		t.Errorf("estimate up to %.2f Mbit/s, above the start, 24, on a link of 20", e)
	}
	if before, after := s.CapacityEstimate[at(19)], s.CapacityEstimate[at(25)]; after < 0.5*before {
		t.Errorf("estimate 5 s after the drop %.2f Mbit/s, before it %.2f: want a slow fall", after, before)
	}
	if res[0].Delay.P95 < 100 {
		t.Errorf("p95 added delay %.1f ms, want the bottleneck's queue", res[0].Delay.P95)
	}
}

// TestControllerTakesTheRateOver: a controller's first write turns
// autorate-ingress off, as a bandwidth change with AUTORATE 0 does in the
// kernel: the estimate then keeps its value.
func TestControllerTakesTheRateOver(t *testing.T) {
	link := mustSchedule(t, "20mbit@0s,5mbit@10s")
	res := run(t, sim.Config{Down: link, Duration: 20 * time.Second, Seed: 1, Series: true}, scheme(t, "autoshape"))
	s := downSeries(t, res)
	last := s.CapacityEstimate[len(s.CapacityEstimate)-1]
	if n := len(s.CapacityEstimate); s.CapacityEstimate[n/2] != last || s.CapacityEstimate[n/4] != last {
		t.Errorf("the estimate moved after the controller took the rate over: %v", s.CapacityEstimate)
	}
}

// TestSuperviseHandsTheRateBack: the supervise scheme's hand-back turns
// autorate-ingress on again: the estimate, frozen while the controller owns
// the rate, moves again, and the rate follows it at 15/16 (the model's
// estimate settles at what the shaper lets through, since its arrivals
// have no bursts: see docs/sim-vs-lab.md, "Supervising the estimate").
func TestSuperviseHandsTheRateBack(t *testing.T) {
	link := mustSchedule(t, "20mbit")
	res := run(t, sim.Config{Down: link, Duration: 20 * time.Second, Seed: 1, Series: true}, scheme(t, sim.SuperviseName))
	s := downSeries(t, res)
	moves := 0
	for i := 1; i < len(s.CapacityEstimate); i++ {
		if s.CapacityEstimate[i] != s.CapacityEstimate[i-1] {
			moves++
		}
	}
	if moves < 10 {
		t.Fatalf("the estimate moved %d times in 20 s: no hand-back", moves)
	}
	n := len(s.Rate) - 1
	if est, rate := s.CapacityEstimate[n], s.Rate[n]; math.Abs(rate-est*15/16) > 0.02*est {
		t.Errorf("at the end: rate %.2f Mbit/s, want CAKE's 15/16 of the estimate %.2f", rate, est)
	}
}

// downSeries is the download's series of res, which must carry CAKE's
// estimate.
func downSeries(t *testing.T, res []sim.Result) *sim.Series {
	t.Helper()
	for _, r := range res {
		if r.Direction == "down" && r.Series != nil && len(r.Series.CapacityEstimate) > 0 {
			return r.Series
		}
	}
	t.Fatal("no estimate series")
	return nil
}

// DelayIn takes the points whose intervals end after from and by to.
func TestSeriesDelayIn(t *testing.T) {
	s := &sim.Series{T: []float64{0.1, 0.2, 0.3, 0.4, 0.5}, Delay: []float64{50, 1, 2, 3, 40}}
	d, ok := s.DelayIn(0.1, 0.4)
	if !ok || d.P50 != 2 || d.P99 != 3 {
		t.Errorf("DelayIn(0.1, 0.4) = %+v, %v, want p50 2 and p99 3 of the three points in it", d, ok)
	}
	if _, ok := s.DelayIn(1, 2); ok {
		t.Error("DelayIn over a window with no point says it has one")
	}
}

// UtilisationIn weighs the points whose intervals end after from and by to
// by their capacity: the phase's goodput over its capacity, not the mean
// of the points' shares.
func TestSeriesUtilisationIn(t *testing.T) {
	s := &sim.Series{T: []float64{0.1, 0.2, 0.3, 0.4}, Capacity: []float64{40, 10, 40, 0}, Goodput: []float64{40, 5, 30, 0}}
	for _, c := range []struct {
		from, to float64
		want     float64
		ok       bool
	}{
		{0.1, 0.3, 35.0 / 50, true},
		{0, 0.4, 75.0 / 90, true},
		{0.3, 0.4, 0, false}, // only a point without capacity
		{1, 2, 0, false},     // no point
	} {
		got, ok := s.UtilisationIn(c.from, c.to)
		if ok != c.ok || math.Abs(got-c.want) > 1e-12 {
			t.Errorf("UtilisationIn(%g, %g) = %v, %v, want %v, %v", c.from, c.to, got, ok, c.want, c.ok)
		}
	}
}
