// Command seedbars runs the simulator over several seeds on the six recorded
// LTE traces and the two stable links of issue #2 and counts, per case and
// direction, the seeds on which autoshape meets the bars, with the
// medians over seeds beside classic's. The README quotes its output.
//
//	go run ./scripts/seedbars [-seeds 8] [-traces ../shared/traces]
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/autoshape/autoshape/policies"
	"github.com/autoshape/autoshape/sim"
)

// A simCase is one link of the acceptance.
type simCase struct {
	name, down, up string
	kind           barKind
}

type barKind int

const (
	constant barKind = iota // p95 within the budget, utilization ≥ 0.90
	step                    // p95 within the budget, utilization ≥ 0.85, reaction ≤ 1 s
	recorded                // median within the budget, utilization ≥ 0.50, beats classic
)

// budgetMs is the latency budget.
const budgetMs = 15

// meets reports whether autoshape's result a meets the bars of kind k, with
// classic's result c on the same run.
func meets(k barKind, a, c sim.Result) bool {
	switch k {
	case constant:
		return a.Delay.P95 <= budgetMs && a.Utilization >= 0.90
	case step:
		return a.Delay.P95 <= budgetMs && a.Utilization >= 0.85 && a.ReactionS != nil && *a.ReactionS <= 1
	}
	trade := (a.Delay.P95 <= 0.75*c.Delay.P95 && a.Utilization >= c.Utilization-0.10) ||
		(a.Utilization >= c.Utilization+0.05 && a.Delay.P95 <= c.Delay.P95)
	return a.Delay.P50 <= budgetMs && a.Utilization >= 0.50 && trade
}

func main() {
	seeds := flag.Int("seeds", 8, "seeds 1..N")
	traces := flag.String("traces", "../shared/traces", "folder of the recorded traces")
	flag.Parse()
	var cases []simCase
	for _, p := range []string{"TMobile-LTE-short", "Verizon-LTE-short", "ATT-LTE-driving-2016"} {
		cases = append(cases, simCase{p, filepath.Join(*traces, p+".down"), filepath.Join(*traces, p+".up"), recorded})
	}
	cases = append(cases, simCase{"20mbit", "20mbit", "20mbit", constant},
		simCase{"step", "40mbit@0s,10mbit@30s,40mbit@60s", "", step})
	schemes, err := sim.Schemes([]string{"autoshape", "classic"}, policies.BudgetConfig{}, policies.DefaultClassicConfig())
	if err != nil {
		fail(err)
	}

	// results[case][seed] holds the run's results by scheme and direction.
	results := make([][]map[string]sim.Result, len(cases))
	type job struct{ c, s int }
	jobs := make(chan job)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				out, err := runCase(cases[j.c], j.s+1, schemes)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				results[j.c][j.s] = out
				mu.Unlock()
			}
		}()
	}
	for c := range cases {
		results[c] = make([]map[string]sim.Result, *seeds)
		for s := range *seeds {
			jobs <- job{c, s}
		}
	}
	close(jobs)
	wg.Wait()
	if firstErr != nil {
		fail(firstErr)
	}

	fmt.Printf("seeds 1-%d, budget %d ms: seeds within the bars, then medians over seeds\n\n", *seeds, budgetMs)
	fmt.Println("| case | dir | within bars | util | p50 ms | p95 ms | classic util | classic p95 ms |")
	fmt.Println("|---|---|---:|---:|---:|---:|---:|---:|")
	total, met := 0, 0
	for c, cs := range cases {
		for _, dir := range []string{"down", "up"} {
			var n int
			var util, p50, p95, cutil, cp95 []float64
			for _, r := range results[c] {
				a, ok := r["autoshape "+dir]
				if !ok {
					continue
				}
				cl := r["classic "+dir]
				if meets(cs.kind, a, cl) {
					n++
				}
				util, p50, p95 = append(util, a.Utilization), append(p50, a.Delay.P50), append(p95, a.Delay.P95)
				cutil, cp95 = append(cutil, cl.Utilization), append(cp95, cl.Delay.P95)
			}
			if len(util) == 0 {
				continue
			}
			total += len(util)
			met += n
			fmt.Printf("| %s | %s | %d/%d | %.2f | %.1f | %.1f | %.2f | %.1f |\n", cs.name, dir, n, len(util),
				median(util), median(p50), median(p95), median(cutil), median(cp95))
		}
	}
	fmt.Printf("\nwithin the bars: %d of %d runs\n", met, total)
}

// runCase runs autoshape and classic on one case and seed.
func runCase(c simCase, seed int, schemes []sim.Scheme) (map[string]sim.Result, error) {
	cfg := sim.Config{Seed: uint64(seed), Budget: budgetMs * time.Millisecond}
	for _, t := range []struct {
		spec string
		dst  **sim.Trace
	}{{c.down, &cfg.Down}, {c.up, &cfg.Up}} {
		if t.spec == "" {
			continue
		}
		tr, err := sim.LoadTrace(t.spec)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.name, err)
		}
		*t.dst = tr
	}
	out := map[string]sim.Result{}
	for _, s := range schemes {
		res, err := sim.Run(cfg, s)
		if err != nil {
			return nil, fmt.Errorf("%s, seed %d, %s: %w", c.name, seed, s.Name, err)
		}
		for _, r := range res {
			out[r.Scheme+" "+r.Direction] = r
		}
	}
	return out, nil
}

// median is the middle value (the upper one of an even count, as the README
// has always quoted it).
func median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "seedbars:", err)
	os.Exit(1)
}
