package bars

import (
	"slices"
	"testing"

	"github.com/autoshape/autoshape/sim"
)

// meets applies issue #2's bars: each row moves one figure just across one.
func TestMeets(t *testing.T) {
	res := func(util, p50, p95 float64) sim.Result {
		return sim.Result{Utilization: util, Delay: sim.Delay{P50: p50, P95: p95}}
	}
	react := func(r sim.Result, s float64) sim.Result { r.ReactionS = &s; return r }
	classic := res(0.60, 20, 200)
	// Against a classic that gets little through, only the 0.5 floor fails.
	low := res(0.45, 20, 200)
	high := res(0.62, 20, 200)
	tests := []struct {
		name string
		kind Kind
		a    sim.Result
		c    *sim.Result // classic's, when not the default
		want bool
	}{
		{"constant within", Constant, res(0.90, 1, 15), nil, true},
		{"constant p95 over", Constant, res(0.95, 1, 15.1), nil, false},
		{"constant utilization under", Constant, res(0.89, 1, 10), nil, false},
		{"step within", Step, react(res(0.85, 1, 15), 1), nil, true},
		{"step slow reaction", Step, react(res(0.90, 1, 10), 1.01), nil, false},
		{"step no reaction", Step, res(0.90, 1, 10), nil, false},
		{"step utilization under", Step, react(res(0.84, 1, 10), 0.3), nil, false},
		{"recorded lower p95", Recorded, res(0.50, 15, 150), nil, true},
		{"recorded p95 just over 0.75x", Recorded, res(0.55, 10, 150.1), nil, false},
		{"recorded utilization 0.11 under", Recorded, res(0.51, 10, 100), &high, false},
		{"recorded more utilization", Recorded, res(0.65, 10, 200), nil, true},
		{"recorded more utilization, worse p95", Recorded, res(0.65, 10, 201), nil, false},
		{"recorded median over", Recorded, res(0.60, 15.1, 100), nil, false},
		{"recorded utilization under 0.5", Recorded, res(0.49, 10, 100), &low, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := classic
			if tt.c != nil {
				c = *tt.c
			}
			if got := Meets(tt.kind, tt.a, c); got != tt.want {
				t.Errorf("Meets(%v, %+v, classic %+v) = %v, want %v", tt.kind, tt.a, c, got, tt.want)
			}
		})
	}
}

// Alone splits a pair into its loaded directions; a case's Dirs follow them.
func TestAlone(t *testing.T) {
	pair := Case{"x", "a.down", "a.up", Recorded}
	got := Alone([]Case{pair})
	want := []Case{{"x (down alone)", "a.down", "", Recorded}, {"x (up alone)", "", "a.up", Recorded}}
	if !slices.Equal(got, want) {
		t.Fatalf("Alone() = %v, want %v", got, want)
	}
	for _, tt := range []struct {
		c    Case
		want []string
	}{{pair, []string{"down", "up"}}, {got[0], []string{"down"}}, {got[1], []string{"up"}}} {
		if d := tt.c.Dirs(); !slices.Equal(d, tt.want) {
			t.Errorf("%s: Dirs() = %v, want %v", tt.c.Name, d, tt.want)
		}
	}
}

func TestMedian(t *testing.T) {
	for _, tt := range []struct {
		v    []float64
		want float64
	}{{[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 3}, {[]float64{5}, 5}} {
		if got := Median(tt.v); got != tt.want {
			t.Errorf("Median(%v) = %v, want %v", tt.v, got, tt.want)
		}
	}
}
