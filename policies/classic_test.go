package policies_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/autoshape/autoshape/estimator"
	"github.com/autoshape/autoshape/policies"
)

// base is the fixed instant all test times are built from.
var base = time.Date(2024, 1, 1, 12, 0, 0, 0, time.UTC)

// ms returns the deltas, given in milliseconds.
func ms(v ...int) []time.Duration {
	out := make([]time.Duration, len(v))
	for i, x := range v {
		out[i] = time.Duration(x) * time.Millisecond
	}
	return out
}

// A classicStep is one controller tick fed to the policy.
type classicStep struct {
	at     time.Duration // since base
	deltas []time.Duration
	load   float64
	rate   float64
}

func TestClassicNext(t *testing.T) {
	// Base equals the usual starting rate so that low-load ticks at that rate
	// hold and show the detector's decision alone.
	bounds := policies.Bounds{Min: 1e6, Base: 100e6, Max: 200e6}
	lowBase := policies.Bounds{Min: 1e6, Base: 50e6, Max: 200e6}

	type proposal = policies.Proposal
	const (
		hold  = policies.ReasonHold
		bloat = policies.ReasonBloat
		probe = policies.ReasonProbe
		decay = policies.ReasonDecay
	)

	tests := []struct {
		name   string
		bounds policies.Bounds // bounds when zero
		steps  []classicStep
		want   []proposal
	}{
		{
			name:  "2 of 6 delayed is no bloat",
			steps: []classicStep{{deltas: ms(40, 40, 0, 0, 0, 0), load: 0.5, rate: 100e6}},
			want:  []proposal{{Rate: 100e6, Reason: hold}},
		},
		{
			name:  "3 of 6 delayed is bloat",
			steps: []classicStep{{deltas: ms(40, 40, 40, 0, 0, 0), load: 0.5, rate: 100e6}},
			want:  []proposal{{Rate: 99e6, Reason: bloat}},
		},
		{
			name:  "a delta equal to the threshold is not delayed",
			steps: []classicStep{{deltas: ms(30, 30, 30, 30, 30, 30), load: 0.5, rate: 100e6}},
			want:  []proposal{{Rate: 100e6, Reason: hold}},
		},
		{
			name: "bloat with fewer samples than the window",
			// Mean 40ms: the factor is interpolated to 0.91.
			steps: []classicStep{{deltas: ms(40, 40, 40), load: 0.5, rate: 100e6}},
			want:  []proposal{{Rate: 91e6, Reason: bloat}},
		},
		{
			name:  "cut at mean 30ms is mildest",
			steps: []classicStep{{deltas: ms(40, 40, 40, 20, 20, 20), load: 0.9, rate: 100e6}},
			want:  []proposal{{Rate: 99e6, Reason: bloat}},
		},
		{
			name:  "cut at mean 45ms is interpolated",
			steps: []classicStep{{deltas: ms(45, 45, 45, 45, 45, 45), load: 0.9, rate: 100e6}},
			want:  []proposal{{Rate: 87e6, Reason: bloat}},
		},
		{
			name:  "cut at mean 60ms is deepest",
			steps: []classicStep{{deltas: ms(60, 60, 60, 60, 60, 60), load: 0.9, rate: 100e6}},
			want:  []proposal{{Rate: 75e6, Reason: bloat}},
		},
		{
			name:  "cut at mean 90ms stays deepest",
			steps: []classicStep{{deltas: ms(90, 90, 90, 90, 90, 90), load: 0.9, rate: 100e6}},
			want:  []proposal{{Rate: 75e6, Reason: bloat}},
		},
		{
			name: "bloat refractory: hold within 300ms, cut again at 300ms",
			steps: []classicStep{
				{at: 0, deltas: ms(45, 45, 45, 45, 45, 45), load: 0.9, rate: 100e6},
				{at: 250 * time.Millisecond, deltas: ms(45), load: 0.9, rate: 87e6},
				{at: 300 * time.Millisecond, deltas: ms(45), load: 0.9, rate: 87e6},
				{at: 350 * time.Millisecond, deltas: ms(45), load: 0.9, rate: 75.69e6},
			},
			want: []proposal{
				{Rate: 87e6, Reason: bloat},
				{Rate: 87e6, Reason: hold},
				{Rate: 75.69e6, Reason: bloat},
				{Rate: 75.69e6, Reason: hold},
			},
		},
		{
			name:  "raise x1.04 at mean 5ms under load",
			steps: []classicStep{{deltas: ms(5, 5, 5, 5, 5, 5), load: 0.9, rate: 100e6}},
			want:  []proposal{{Rate: 104e6, Reason: probe}},
		},
		{
			name:  "raise x1.04 at mean 10ms under load",
			steps: []classicStep{{deltas: ms(10, 10, 10, 10, 10, 10), load: 0.9, rate: 100e6}},
			want:  []proposal{{Rate: 104e6, Reason: probe}},
		},
		{
			name:  "raise x1.02 at mean 20ms under load",
			steps: []classicStep{{deltas: ms(20, 20, 20, 20, 20, 20), load: 0.9, rate: 100e6}},
			want:  []proposal{{Rate: 102e6, Reason: probe}},
		},
		{
			name:  "no raise at mean 30ms under load",
			steps: []classicStep{{deltas: ms(30, 30, 30, 30, 30, 30), load: 0.9, rate: 100e6}},
			want:  []proposal{{Rate: 100e6, Reason: hold}},
		},
		{
			name:  "no raise at load 0.5",
			steps: []classicStep{{deltas: ms(5, 5, 5, 5, 5, 5), load: 0.5, rate: 100e6}},
			want:  []proposal{{Rate: 100e6, Reason: hold}},
		},
		{
			name:  "no raise at load exactly HighLoad",
			steps: []classicStep{{deltas: ms(5, 5, 5, 5, 5, 5), load: 0.75, rate: 100e6}},
			want:  []proposal{{Rate: 100e6, Reason: hold}},
		},
		{
			name:  "no raise under load before any sample",
			steps: []classicStep{{load: 0.9, rate: 100e6}},
			want:  []proposal{{Rate: 100e6, Reason: hold}},
		},
		{
			name: "no raise within the refractory period after a cut",
			steps: []classicStep{
				{at: 0, deltas: ms(40, 40, 40, 20, 20, 20), load: 0.9, rate: 100e6},
				{at: 50 * time.Millisecond, deltas: ms(0, 0, 0, 0, 0, 0), load: 0.9, rate: 99e6},
				{at: 299 * time.Millisecond, deltas: ms(0), load: 0.9, rate: 99e6},
				{at: 300 * time.Millisecond, deltas: ms(0), load: 0.9, rate: 99e6},
			},
			want: []proposal{
				{Rate: 99e6, Reason: bloat},
				{Rate: 99e6, Reason: hold},
				{Rate: 99e6, Reason: hold},
				{Rate: 102.96e6, Reason: probe},
			},
		},
		{
			name:   "decay down towards base at most once per second",
			bounds: lowBase,
			steps: []classicStep{
				{at: 0, load: 0.1, rate: 100e6},
				{at: 500 * time.Millisecond, load: 0.1, rate: 99e6},
				{at: time.Second, load: 0.1, rate: 99e6},
				{at: 1500 * time.Millisecond, load: 0.1, rate: 98.01e6},
			},
			want: []proposal{
				{Rate: 99e6, Reason: decay},
				{Rate: 99e6, Reason: hold},
				{Rate: 98.01e6, Reason: decay},
				{Rate: 98.01e6, Reason: hold},
			},
		},
		{
			name:   "decay up towards base at most once per second",
			bounds: lowBase,
			steps: []classicStep{
				{at: 0, deltas: ms(1, 2, 3), load: 0.1, rate: 40e6},
				{at: 999 * time.Millisecond, load: 0.1, rate: 40.4e6},
				{at: time.Second, load: 0.1, rate: 40.4e6},
			},
			want: []proposal{
				{Rate: 40.4e6, Reason: decay},
				{Rate: 40.4e6, Reason: hold},
				{Rate: 40.804e6, Reason: decay},
			},
		},
		{
			name:   "decay down stops at base",
			bounds: lowBase,
			steps: []classicStep{
				{at: 0, load: 0.1, rate: 50.3e6},
				{at: time.Second, load: 0.1, rate: 50e6},
				{at: 2 * time.Second, load: 0.1, rate: 50e6},
			},
			want: []proposal{
				{Rate: 50e6, Reason: decay},
				{Rate: 50e6, Reason: hold},
				{Rate: 50e6, Reason: hold},
			},
		},
		{
			name:   "decay up stops at base",
			bounds: lowBase,
			steps: []classicStep{
				{at: 0, load: 0.1, rate: 49.8e6},
				{at: time.Second, load: 0.1, rate: 50e6},
			},
			want: []proposal{
				{Rate: 50e6, Reason: decay},
				{Rate: 50e6, Reason: hold},
			},
		},
		{
			name:  "raise clamped at max",
			steps: []classicStep{{deltas: ms(0), load: 0.9, rate: 199e6}},
			want:  []proposal{{Rate: 200e6, Reason: probe}},
		},
		{
			name:  "cut clamped at min",
			steps: []classicStep{{deltas: ms(90, 90, 90), load: 0.9, rate: 1.2e6}},
			want:  []proposal{{Rate: 1e6, Reason: bloat}},
		},
		{
			name:  "hold clamps a rate above max",
			steps: []classicStep{{deltas: ms(30), load: 0.9, rate: 250e6}},
			want:  []proposal{{Rate: 200e6, Reason: hold}},
		},
		{
			name: "the window keeps only the last 6 samples",
			steps: []classicStep{
				{at: 0, deltas: ms(40, 40, 0, 0, 0, 0), load: 0.5, rate: 100e6},
				// The oldest 40 ages out as the new one arrives: still 2 of 6.
				{at: 50 * time.Millisecond, deltas: ms(40), load: 0.5, rate: 100e6},
				{at: 100 * time.Millisecond, deltas: ms(40), load: 0.5, rate: 100e6},
				{at: 150 * time.Millisecond, deltas: ms(40), load: 0.5, rate: 100e6},
			},
			want: []proposal{
				{Rate: 100e6, Reason: hold},
				{Rate: 100e6, Reason: hold},
				{Rate: 100e6, Reason: hold},
				{Rate: 99e6, Reason: bloat},
			},
		},
		{
			name: "delayed samples in one tick age out within the same tick",
			steps: []classicStep{
				{deltas: ms(90, 90, 90, 0, 0, 0, 0, 0, 0), load: 0.5, rate: 100e6},
			},
			want: []proposal{{Rate: 100e6, Reason: hold}},
		},
		{
			name: "raise resumes once delayed samples age out",
			steps: []classicStep{
				{at: 0, deltas: ms(60, 60, 60, 60, 60, 60), load: 0.9, rate: 100e6},
				// 2 of 6 delayed, mean 20ms: no bloat, raise x1.02.
				{at: 300 * time.Millisecond, deltas: ms(0, 0, 0, 0), load: 0.9, rate: 75e6},
				// 1 of 6 delayed, mean 10ms: raise x1.04.
				{at: 350 * time.Millisecond, deltas: ms(0), load: 0.9, rate: 76.5e6},
			},
			want: []proposal{
				{Rate: 75e6, Reason: bloat},
				{Rate: 76.5e6, Reason: probe},
				{Rate: 79.56e6, Reason: probe},
			},
		},
	}
	opt := cmpopts.EquateApprox(1e-9, 0)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := policies.NewClassic(policies.DefaultClassicConfig())
			if err != nil {
				t.Fatalf("NewClassic: %v", err)
			}
			b := tt.bounds
			if b == (policies.Bounds{}) {
				b = bounds
			}
			var got []proposal
			for _, s := range tt.steps {
				now := base.Add(s.at)
				got = append(got, p.Next(policies.Input{
					Now: now,
					Obs: estimator.Observation{
						Time:   now,
						Deltas: s.deltas,
						Load:   s.load,
					},
					Rate:   s.rate,
					Bounds: b,
				}))
			}
			if diff := cmp.Diff(tt.want, got, opt); diff != "" {
				t.Errorf("proposals mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestClassicName(t *testing.T) {
	p, err := policies.NewClassic(policies.DefaultClassicConfig())
	if err != nil {
		t.Fatalf("NewClassic: %v", err)
	}
	if diff := cmp.Diff("classic", p.Name()); diff != "" {
		t.Errorf("Name() mismatch (-want +got):\n%s", diff)
	}
}

func TestNewClassic(t *testing.T) {
	tests := []struct {
		name   string
		change func(*policies.ClassicConfig)
		// field is the name the error must mention; empty when valid.
		field string
	}{
		{name: "defaults", change: func(*policies.ClassicConfig) {}},
		{name: "MildCut 1 and DeepCut equal", change: func(c *policies.ClassicConfig) { c.MildCut, c.DeepCut = 1, 1 }},
		{name: "Detect equal to Window", change: func(c *policies.ClassicConfig) { c.Detect = c.Window }},
		{name: "DelayThreshold zero", change: func(c *policies.ClassicConfig) { c.DelayThreshold = 0 }, field: "DelayThreshold"},
		{name: "Window zero", change: func(c *policies.ClassicConfig) { c.Window = 0 }, field: "Window"},
		{name: "Detect above Window", change: func(c *policies.ClassicConfig) { c.Detect = 7 }, field: "Detect"},
		{name: "Detect zero", change: func(c *policies.ClassicConfig) { c.Detect = 0 }, field: "Detect"},
		{name: "CutAt negative", change: func(c *policies.ClassicConfig) { c.CutAt = -time.Millisecond }, field: "CutAt"},
		{name: "CutMax not above CutAt", change: func(c *policies.ClassicConfig) { c.CutMax = c.CutAt }, field: "CutMax"},
		{name: "MildCut zero", change: func(c *policies.ClassicConfig) { c.MildCut = 0 }, field: "MildCut"},
		{name: "MildCut above 1", change: func(c *policies.ClassicConfig) { c.MildCut = 1.01 }, field: "MildCut"},
		{name: "MildCut NaN", change: func(c *policies.ClassicConfig) { c.MildCut = math.NaN() }, field: "MildCut"},
		{name: "DeepCut above MildCut", change: func(c *policies.ClassicConfig) { c.DeepCut = 0.995 }, field: "DeepCut"},
		{name: "DeepCut zero", change: func(c *policies.ClassicConfig) { c.DeepCut = 0 }, field: "DeepCut"},
		{name: "BloatRefractory negative", change: func(c *policies.ClassicConfig) { c.BloatRefractory = -1 }, field: "BloatRefractory"},
		{name: "HighLoad above 1", change: func(c *policies.ClassicConfig) { c.HighLoad = 1.5 }, field: "HighLoad"},
		{name: "HighLoad NaN", change: func(c *policies.ClassicConfig) { c.HighLoad = math.NaN() }, field: "HighLoad"},
		{name: "MaxRaise below 1", change: func(c *policies.ClassicConfig) { c.MaxRaise = 0.9 }, field: "MaxRaise"},
		{name: "RaiseFullBelow negative", change: func(c *policies.ClassicConfig) { c.RaiseFullBelow = -1 }, field: "RaiseFullBelow"},
		{name: "RaiseNoneAt not above RaiseFullBelow", change: func(c *policies.ClassicConfig) { c.RaiseNoneAt = 5 * time.Millisecond }, field: "RaiseNoneAt"},
		{name: "DecayDown above 1", change: func(c *policies.ClassicConfig) { c.DecayDown = 1.01 }, field: "DecayDown"},
		{name: "DecayUp below 1", change: func(c *policies.ClassicConfig) { c.DecayUp = 0.99 }, field: "DecayUp"},
		{name: "DecayRefractory negative", change: func(c *policies.ClassicConfig) { c.DecayRefractory = -1 }, field: "DecayRefractory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := policies.DefaultClassicConfig()
			tt.change(&cfg)
			p, err := policies.NewClassic(cfg)
			if tt.field == "" {
				if err != nil || p == nil {
					t.Fatalf("NewClassic() = %v, %v; want a policy and no error", p, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("NewClassic() succeeded; want an error naming %s", tt.field)
			}
			if !strings.Contains(err.Error(), tt.field+" ") {
				t.Errorf("NewClassic() error %q does not name %s", err, tt.field)
			}
		})
	}
}
