// Package bars holds issue #2's acceptance bars for simulator runs and its
// cases (the six recorded LTE traces and the two stable links), shared by the
// scripts that count runs against them.
package bars

import (
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/autoshape/autoshape/sim"
)

// A Kind is the set of bars a case is held to.
type Kind int

const (
	Constant Kind = iota // p95 within the budget, utilization ≥ 0.90
	Step                 // p95 within the budget, utilization ≥ 0.85, reaction ≤ 1 s
	Recorded             // median within the budget, utilization ≥ 0.50, beats classic
)

// BudgetMs is the latency budget.
const BudgetMs = 15

// Meets reports whether the result a meets the bars of kind k, with classic's
// result c on the same run.
func Meets(k Kind, a, c sim.Result) bool {
	switch k {
	case Constant:
		return a.Delay.P95 <= BudgetMs && a.Utilization >= 0.90
	case Step:
		return a.Delay.P95 <= BudgetMs && a.Utilization >= 0.85 && a.ReactionS != nil && *a.ReactionS <= 1
	}
	trade := (a.Delay.P95 <= 0.75*c.Delay.P95 && a.Utilization >= c.Utilization-0.10) ||
		(a.Utilization >= c.Utilization+0.05 && a.Delay.P95 <= c.Delay.P95)
	return a.Delay.P50 <= BudgetMs && a.Utilization >= 0.50 && trade
}

// A Case is one link of the acceptance: a trace or schedule per
// direction ("" for none) and the bars it is held to.
type Case struct {
	Name, Down, Up string
	Kind           Kind
}

// RecordedCases lists the three recorded LTE trace pairs in traces (a folder).
func RecordedCases(traces string) []Case {
	var out []Case
	for _, p := range []string{"TMobile-LTE-short", "Verizon-LTE-short", "ATT-LTE-driving-2016"} {
		out = append(out, Case{p, filepath.Join(traces, p+".down"), filepath.Join(traces, p+".up"), Recorded})
	}
	return out
}

// Alone splits each case into one case per loaded direction, the other
// carrying no load.
func Alone(cases []Case) []Case {
	var out []Case
	for _, c := range cases {
		if c.Down != "" {
			out = append(out, Case{c.Name + " (down alone)", c.Down, "", c.Kind})
		}
		if c.Up != "" {
			out = append(out, Case{c.Name + " (up alone)", "", c.Up, c.Kind})
		}
	}
	return out
}

// Dirs lists the directions c loads.
func (c Case) Dirs() []string {
	var out []string
	if c.Down != "" {
		out = append(out, "down")
	}
	if c.Up != "" {
		out = append(out, "up")
	}
	return out
}

// Cases lists every case: the recorded pairs in traces, then the stable links.
func Cases(traces string) []Case {
	return append(RecordedCases(traces),
		Case{"20mbit", "20mbit", "20mbit", Constant},
		Case{"step", "40mbit@0s,10mbit@30s,40mbit@60s", "", Step})
}

// Config returns the simulator's configuration for c with seed, its traces
// loaded, at the budget.
func (c Case) Config(seed int) (sim.Config, error) {
	cfg := sim.Config{Seed: uint64(seed), Budget: BudgetMs * time.Millisecond}
	for _, t := range []struct {
		spec string
		dst  **sim.Trace
	}{{c.Down, &cfg.Down}, {c.Up, &cfg.Up}} {
		if t.spec == "" {
			continue
		}
		tr, err := sim.LoadTrace(t.spec)
		if err != nil {
			return sim.Config{}, fmt.Errorf("%s: %w", c.Name, err)
		}
		*t.dst = tr
	}
	return cfg, nil
}

// Run runs schemes on c with seed and returns the results keyed by scheme
// and direction ("autoshape down").
func (c Case) Run(seed int, schemes []sim.Scheme) (map[string]sim.Result, error) {
	cfg, err := c.Config(seed)
	if err != nil {
		return nil, err
	}
	out := map[string]sim.Result{}
	for _, s := range schemes {
		res, err := sim.Run(cfg, s)
		if err != nil {
			return nil, fmt.Errorf("%s, seed %d, %s: %w", c.Name, seed, s.Name, err)
		}
		for _, r := range res {
			out[r.Scheme+" "+r.Direction] = r
		}
	}
	return out, nil
}

// Median is the middle value of v (the upper one of an even count).
func Median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}

// Each calls f(0) … f(n-1) on as many goroutines as there are CPUs and
// returns the first error.
func Each(n int, f func(i int) error) error {
	jobs := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	return first
}
