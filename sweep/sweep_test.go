package sweep_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap"

	"github.com/autoshape/autoshape/actuator"
	"github.com/autoshape/autoshape/estimator"
	"github.com/autoshape/autoshape/sweep"
)

func TestSweepFractions(t *testing.T) {
	for _, tc := range []struct {
		from, to, step float64
		want           []float64
		err            string
	}{
		{from: 0.7, to: 1, step: 0.025, want: []float64{0.7, 0.725, 0.75, 0.775, 0.8, 0.825, 0.85, 0.875, 0.9, 0.925, 0.95, 0.975, 1}},
		{from: 0.9, to: 0.99, step: 0.09, want: []float64{0.9, 0.99}},
		{from: 0.5, to: 0.5, step: 0.1, want: []float64{0.5}},
		{from: 0.8, to: 0.95, step: 0.1, want: []float64{0.8, 0.9}},
		{from: 0, to: 1, step: 0.1, err: "--from"},
		{from: 0.9, to: 0.8, step: 0.1, err: "--to"},
		{from: 0.5, to: 1, step: 0, err: "--step"},
		{from: 0.01, to: 2, step: 0.001, err: "at most 200"},
		// More steps than an int holds: the count overflowed to a
		// negative length (makeslice panicked).
		{from: 0.7, to: 1, step: 1e-20, err: "--from 0.7 --to 1 --step 1e-20 makes 3e+19 steps: at most 200"},
		{from: 0.7, to: 1, step: 5e-324, err: "makes +Inf steps: at most 200"},
		{from: 0.5, to: 1, step: math.Inf(1), err: "--step +Inf: want a positive fraction"},
		{from: 0.5, to: 1, step: 2, want: []float64{0.5}},
		{from: 0.5, to: 1, step: math.NaN(), err: "--step"},
		{from: math.NaN(), to: 1, step: 0.1, err: "--from"},
		{from: 0.5, to: math.Inf(1), step: 0.1, err: "--to"},
	} {
		p, err := sweep.NewPlan("down", "10mbit", "", tc.from, tc.to, tc.step, 20*time.Second, 15*time.Millisecond, 0)
		got := p.Fractions
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("NewPlan(fractions %v, %v, %v) = %v, %v; want an error naming %s", tc.from, tc.to, tc.step, got, err, tc.err)
			}
			continue
		}
		if err != nil || !cmp.Equal(got, tc.want) {
			t.Errorf("NewPlan(fractions %v, %v, %v) = %v, %v; want %v", tc.from, tc.to, tc.step, got, err, tc.want)
		}
	}
}

func TestSweepPlanErrors(t *testing.T) {
	for _, tc := range []struct {
		dir, down, up string
		hold          time.Duration
		err           string
	}{
		{dir: "sideways", down: "10mbit", up: "1mbit", hold: time.Minute, err: "--direction"},
		{dir: "both", down: "10mbit", hold: time.Minute, err: "--line-rate-up is required"},
		{dir: "down", down: "fast", hold: time.Minute, err: "--line-rate-down"},
		{dir: "down", down: "10mbit", hold: time.Millisecond, err: "--hold"},
		{dir: "down", down: "0", hold: time.Minute, err: "--line-rate-down 0: the rate must be positive"},
		{dir: "up", up: "1e300gbit", hold: time.Minute, err: `--line-rate-up: invalid rate "1e300gbit": above 10 Tbit/s`},
		{dir: "down", down: "10kbit", hold: time.Minute, err: "--from 0.7 of --line-rate-down 10kbit is 7kbit: below 8kbit, the lowest rate the link's shaper takes"},
	} {
		_, err := sweep.NewPlan(tc.dir, tc.down, tc.up, 0.7, 1, 0.1, tc.hold, 15*time.Millisecond, 8000)
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("sweep.NewPlan(%q, %q, %q, hold %v) = %v; want an error naming %s", tc.dir, tc.down, tc.up, tc.hold, err, tc.err)
		}
	}
	p, err := sweep.NewPlan("up", "", "2604kbit", 0.7, 1, 0.1, 20*time.Second, 15*time.Millisecond, 8000)
	if err != nil {
		t.Fatal(err)
	}
	if p.LineRate[estimator.Up] != 2604e3 || len(p.Fractions) != 4 || p.Settle != 5*time.Second || p.Pause != 3*time.Second {
		t.Errorf("plan = %+v", p)
	}
}

func TestParseLoad(t *testing.T) {
	for _, tc := range []struct {
		spec    string
		streams int
		err     string
	}{
		{spec: "", streams: 4, err: "--load is required"},
		{spec: "exec:", streams: 4, err: "no command"},
		{spec: "ftp://x/y", streams: 4, err: "want tcp:HOST:PORT or exec:COMMAND"},
		// No HTTP client in the router's binary: the message says what to run.
		{spec: "http://10.0.0.1/big", streams: 4, err: "exec:'wget -q -O /dev/null http://10.0.0.1/big'"},
		{spec: "https://10.0.0.1/big", streams: 4, err: "no HTTP client"},
		{spec: "exec:iperf3 -c 10.0.0.1 -t 30", streams: 4},
		{spec: "tcp:10.91.3.2:5201", streams: 4},
		{spec: "tcp:10.91.3.2", streams: 4, err: "tcp:HOST:PORT"},
		{spec: "tcp:10.91.3.2:5201", streams: 100, err: "--streams"},
	} {
		_, err := sweep.ParseLoad(tc.spec, tc.streams)
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("sweep.ParseLoad(%q, %d) = %v; want error %q", tc.spec, tc.streams, err, tc.err)
		}
	}
}

func TestRecommend(t *testing.T) {
	steps := []sweep.Step{
		{Direction: "down", RateKbit: 14000, Delay: sweep.Delay{P95: 4}},
		{Direction: "down", RateKbit: 15000, Delay: sweep.Delay{P95: 15}}, // at the budget: within
		{Direction: "down", RateKbit: 16000, Delay: sweep.Delay{P95: 15.1}},
		{Direction: "down", RateKbit: 0, Delay: sweep.Delay{P95: 3}}, // unshaped never counts
		{Direction: "up", RateKbit: 2000, Delay: sweep.Delay{P95: 40}},
	}
	got := sweep.Recommend(steps, 15*time.Millisecond)
	want := sweep.Recommendation{DownKbit: 15000, UpKbit: 0, BudgetMs: 15}
	if got != want {
		t.Errorf("recommend = %+v, want %+v", got, want)
	}
	var out bytes.Buffer
	sweep.WriteTable(&out, sweep.Output{Report: sweep.Report{Steps: steps, Recommendation: got}},
		sweep.Plan{Directions: []estimator.Direction{estimator.Down, estimator.Up}, LineRate: [2]float64{estimator.Down: 17613e3, estimator.Up: 2604e3}})
	for _, want := range []string{"unshaped", "[link.download]", `base = "15000kbit"`, `max = "17613kbit"`, "up: no step was within the budget"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the table lacks %q:\n%s", want, out.String())
		}
	}
}

// fakeLine is a link whose added delay under load is small while the shaper
// is below its capacity and large above it; the load counts bytes into the
// shaper's statistics at the shaper's rate.
type fakeLine struct {
	capacity float64 // bit/s
	shaper   *actuator.Fake
	loaded   atomic.Bool
	loads    atomic.Int32
}

func (f *fakeLine) Load(ctx context.Context, d estimator.Direction, _ float64, _ time.Duration) error {
	f.loaded.Store(true)
	f.loads.Add(1)
	defer f.loaded.Store(false)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			st, _ := f.shaper.Stats(ctx)
			rate := min(float64(f.shaper.Rate()), f.capacity)
			st.Bytes += uint64(rate / 8 / 100)
			f.shaper.SetStats(st)
		}
	}
}

// probe sends round-trip samples from two reflectors every 5 ms.
func (f *fakeLine) probe(ctx context.Context, out chan<- estimator.Sample) {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			added := time.Millisecond
			if f.loaded.Load() && float64(f.shaper.Rate()) > f.capacity {
				added = 80 * time.Millisecond
			}
			name := []string{"10.0.0.1", "10.0.0.2"}[i%2]
			base := []time.Duration{20 * time.Millisecond, 35 * time.Millisecond}[i%2]
			select {
			case out <- estimator.Sample{Reflector: name, Kind: estimator.RTT, Sent: now, Delay: base + added}:
			default:
			}
		}
	}
}

// TestSweeperFindsTheKnee: on a 10 Mbit/s line with 9 Mbit/s of real
// capacity, the steps at 50 % and 80 % stay within the budget, 100 % and the
// unshaped step do not, and the recommendation is the 80 % step.
func TestSweeperFindsTheKnee(t *testing.T) {
	line := &fakeLine{capacity: 9e6, shaper: &actuator.Fake{}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	samples := make(chan estimator.Sample, 1024)
	go line.probe(ctx, samples)
	s := &sweep.Sweeper{Shapers: [2]actuator.Shaper{estimator.Down: line.shaper, estimator.Up: &actuator.Fake{}},
		Samples: samples, Load: line, Log: zap.NewNop(), Now: time.Now}
	p := sweep.Plan{Directions: []estimator.Direction{estimator.Down}, LineRate: [2]float64{estimator.Down: 10e6},
		Fractions: []float64{0.5, 0.8, 1}, Hold: 400 * time.Millisecond, Settle: 50 * time.Millisecond,
		Pause: 100 * time.Millisecond, Budget: 15 * time.Millisecond}
	rep, err := s.Run(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Steps) != 4 || line.loads.Load() != 4 {
		t.Fatalf("%d steps and %d loads, want 4 of each: %+v", len(rep.Steps), line.loads.Load(), rep.Steps)
	}
	for i, want := range []struct {
		rate    float64
		bloated bool
	}{{5000, false}, {8000, false}, {10000, true}, {0, true}} {
		st := rep.Steps[i]
		if st.Direction != "down" || st.RateKbit != want.rate || (st.Delay.P95 > 15) != want.bloated {
			t.Errorf("step %d = %+v; want rate %v kbit, bloated %v", i, st, want.rate, want.bloated)
		}
		if st.Delay.P50 > st.Delay.P95 || st.Delay.P95 > st.Delay.P99 {
			t.Errorf("step %d: percentiles out of order: %+v", i, st.Delay)
		}
	}
	// The load counted bytes at min(rate, capacity): goodput follows the
	// rate below the capacity and stops at it above.
	if g := rep.Steps[0].GoodputKbit; g < 2500 || g > 5500 {
		t.Errorf("goodput at 5 Mbit/s = %v kbit/s", g)
	}
	if g := rep.Steps[3].GoodputKbit; g > 9900 {
		t.Errorf("unshaped goodput = %v kbit/s, above the 9 Mbit/s capacity", g)
	}
	if want := (sweep.Recommendation{DownKbit: 8000, BudgetMs: 15}); rep.Recommendation != want {
		t.Errorf("recommendation = %+v, want %+v", rep.Recommendation, want)
	}
	if got := line.shaper.Writes(); !cmp.Equal(got, []uint64{5e6, 8e6, 10e6, 100e6}) {
		t.Errorf("rates written %v", got)
	}
}

// TestSweeperStopsWithoutAnswers: a sweep whose probes go unanswered fails
// with an error naming the reflectors instead of reporting empty steps.
func TestSweeperStopsWithoutAnswers(t *testing.T) {
	line := &fakeLine{capacity: 9e6, shaper: &actuator.Fake{}}
	s := &sweep.Sweeper{Shapers: [2]actuator.Shaper{estimator.Down: line.shaper, estimator.Up: &actuator.Fake{}},
		Samples: make(chan estimator.Sample), Load: line, Log: zap.NewNop(), Now: time.Now}
	p := sweep.Plan{Directions: []estimator.Direction{estimator.Down}, LineRate: [2]float64{estimator.Down: 10e6},
		Fractions: []float64{0.5}, Hold: 100 * time.Millisecond, Settle: 10 * time.Millisecond, Pause: 10 * time.Millisecond, Budget: 15 * time.Millisecond}
	if _, err := s.Run(context.Background(), p); err == nil || !strings.Contains(err.Error(), "reflectors") {
		t.Errorf("run = %v, want an error about the probes", err)
	}
	if line.loaded.Load() {
		t.Error("the load is still running")
	}
}

// dropWhenLoaded passes a line's probes on only while it is unloaded.
type dropWhenLoaded struct{ *fakeLine }

func (f dropWhenLoaded) probe(ctx context.Context, out chan<- estimator.Sample) {
	in := make(chan estimator.Sample, 16)
	go f.fakeLine.probe(ctx, in)
	for {
		select {
		case <-ctx.Done():
			return
		case x := <-in:
			if !f.loaded.Load() {
				out <- x
			}
		}
	}
}

// TestSweeperCountsLostProbes: a step under which every probe is lost,
// though they were answered unloaded, is recorded at the probes' deadline,
// over the budget, not an error.
func TestSweeperCountsLostProbes(t *testing.T) {
	line := dropWhenLoaded{&fakeLine{capacity: 9e6, shaper: &actuator.Fake{}}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	samples := make(chan estimator.Sample, 1024)
	go line.probe(ctx, samples)
	s := &sweep.Sweeper{Shapers: [2]actuator.Shaper{estimator.Down: line.shaper, estimator.Up: &actuator.Fake{}},
		Samples: samples, Load: line.fakeLine, Log: zap.NewNop(), Now: time.Now}
	p := sweep.Plan{Directions: []estimator.Direction{estimator.Down}, LineRate: [2]float64{estimator.Down: 10e6},
		Fractions: []float64{0.5}, Hold: 200 * time.Millisecond, Settle: 20 * time.Millisecond, Pause: 100 * time.Millisecond, Budget: 15 * time.Millisecond}
	rep, err := s.Run(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	want := sweep.Delay{P50: 1000, P95: 1000, P99: 1000}
	if len(rep.Steps) != 2 || rep.Steps[0].Delay != want || rep.Recommendation.DownKbit != 0 {
		t.Errorf("steps %+v, recommendation %+v; want the lost steps at the 1 s deadline and no recommendation", rep.Steps, rep.Recommendation)
	}
}

// failingLoad is a fakeLine whose load calls numbered in fail (from 1) lose
// their connection partway through the step.
type failingLoad struct {
	*fakeLine
	fail  map[int32]bool
	calls atomic.Int32
}

func (f *failingLoad) Load(ctx context.Context, d estimator.Direction, rate float64, hold time.Duration) error {
	if !f.fail[f.calls.Add(1)] {
		return f.fakeLine.Load(ctx, d, rate, hold)
	}
	lctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel()
	f.fakeLine.Load(lctx, d, rate, hold)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return errors.New("write: connection timed out")
}

// TestSweeperRetriesAFailedLoadOnce: a step whose load fails partway is run
// again with a new load, once. A sweep whose retry succeeds is complete; a
// direction whose retry fails too is given up, the steps already finished
// are kept, the other direction is still swept and recommended, and the
// error names the direction that was not completed.
func TestSweeperRetriesAFailedLoadOnce(t *testing.T) {
	type result struct {
		Steps      []string // direction and rate of each step kept
		Loads      int32
		Rec        sweep.Recommendation
		Incomplete []string // the directions named not completed
	}
	for _, tc := range []struct {
		name string
		dirs []estimator.Direction
		fail []int32
		want result
	}{{
		name: "retried step completes the sweep",
		dirs: []estimator.Direction{estimator.Down},
		fail: []int32{2},
		want: result{Steps: []string{"down 5000", "down 8000", "down 0"}, Loads: 4,
			Rec: sweep.Recommendation{DownKbit: 8000, BudgetMs: 15}},
	}, {
		name: "upload fails twice after a step: download and the finished step kept",
		dirs: []estimator.Direction{estimator.Down, estimator.Up},
		fail: []int32{5, 6},
		want: result{Steps: []string{"down 5000", "down 8000", "down 0", "up 5000"}, Loads: 6,
			Rec: sweep.Recommendation{DownKbit: 8000, BudgetMs: 15}, Incomplete: []string{"up"}},
	}, {
		name: "download fails twice at its first step: upload still swept",
		dirs: []estimator.Direction{estimator.Down, estimator.Up},
		fail: []int32{1, 2},
		want: result{Steps: []string{"up 5000", "up 8000", "up 0"}, Loads: 5,
			Rec: sweep.Recommendation{UpKbit: 8000, BudgetMs: 15}, Incomplete: []string{"down"}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			line := &fakeLine{capacity: 9e6, shaper: &actuator.Fake{}}
			load := &failingLoad{fakeLine: line, fail: map[int32]bool{}}
			for _, n := range tc.fail {
				load.fail[n] = true
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			samples := make(chan estimator.Sample, 1024)
			go line.probe(ctx, samples)
			s := &sweep.Sweeper{Shapers: [2]actuator.Shaper{estimator.Down: line.shaper, estimator.Up: line.shaper},
				Samples: samples, Load: load, Log: zap.NewNop(), Now: time.Now}
			p := sweep.Plan{Directions: tc.dirs, LineRate: [2]float64{estimator.Down: 10e6, estimator.Up: 10e6},
				Fractions: []float64{0.5, 0.8}, Hold: 200 * time.Millisecond, Settle: 20 * time.Millisecond,
				Pause: 50 * time.Millisecond, Budget: 15 * time.Millisecond}
			rep, err := s.Run(ctx, p)
			got := result{Loads: load.calls.Load(), Rec: rep.Recommendation}
			for _, st := range rep.Steps {
				got.Steps = append(got.Steps, fmt.Sprintf("%s %.0f", st.Direction, st.RateKbit))
			}
			var inc *sweep.IncompleteError
			if errors.As(err, &inc) {
				for _, f := range inc.Failed {
					got.Incomplete = append(got.Incomplete, f.Direction)
					if !strings.Contains(f.Error, "connection timed out") || !strings.Contains(f.Error, "retried once") {
						t.Errorf("%s: failure %q should give the load's error and say the step was retried", f.Direction, f.Error)
					}
				}
			} else if err != nil {
				t.Fatalf("run = %v, want nil or a *sweep.IncompleteError", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if line.loaded.Load() {
				t.Error("the load is still running")
			}

			// The table keeps the finished steps, the completed direction's
			// recommendation, and names the one not completed.
			var out bytes.Buffer
			o := sweep.Output{Report: rep}
			if inc != nil {
				o.Incomplete = inc.Failed
			}
			sweep.WriteTable(&out, o, p)
			for _, f := range o.Incomplete {
				if !strings.Contains(out.String(), f.Direction+": not completed, no recommendation: ") {
					t.Errorf("the table does not name %s as not completed:\n%s", f.Direction, out.String())
				}
			}
			if rec := max(rep.Recommendation.DownKbit, rep.Recommendation.UpKbit); !strings.Contains(out.String(), fmt.Sprintf(`base = "%.0fkbit"`, rec)) {
				t.Errorf("the table lacks the completed direction's recommendation:\n%s", out.String())
			}
		})
	}
}

// TestOutputJSON: `autoshape sweep --json` keeps its keys, which plot and
// users' scripts read.
func TestOutputJSON(t *testing.T) {
	out := sweep.Output{
		Report: sweep.Report{
			Steps: []sweep.Step{{Direction: "down", Fraction: 0.9, RateKbit: 9000, GoodputKbit: 8500,
				Delay: sweep.Delay{P50: 1, P95: 2, P99: 3}, Drops: 4}},
			Recommendation: sweep.Recommendation{DownKbit: 9000, BudgetMs: 15},
		},
		Incomplete: []sweep.Failure{{Direction: "up", Error: "the up load failed"}},
	}
	b, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"steps":[{"direction":"down","fraction":0.9,"rate_kbit":9000,"goodput_kbit":8500,` +
		`"delay_ms":{"p50":1,"p95":2,"p99":3},"drops":4}],` +
		`"recommendation":{"down_kbit":9000,"up_kbit":0,"budget_ms":15},` +
		`"incomplete":[{"direction":"up","error":"the up load failed"}]}`
	if diff := cmp.Diff(want, string(b)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
