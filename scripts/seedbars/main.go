// Command seedbars runs the simulator over several seeds on the six recorded
// LTE traces and the two stable links of issue #2 and counts, per case and
// direction, the seeds on which autoshape meets the bars, with the
// medians over seeds beside classic's. With -alone each direction is loaded
// on its own. The README quotes its output.
//
//	go run ./scripts/seedbars [-seeds 8] [-alone] [-traces ../shared/traces]
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/autoshape/autoshape/policies"
	"github.com/autoshape/autoshape/scripts/internal/bars"
	"github.com/autoshape/autoshape/sim"
)

func main() {
	seeds := flag.Int("seeds", 8, "seeds 1..N")
	traces := flag.String("traces", "../shared/traces", "folder of the recorded traces")
	alone := flag.Bool("alone", false, "load one direction at a time")
	flag.Parse()
	cases := bars.Cases(*traces)
	if *alone {
		cases = bars.Alone(cases)
	}
	schemes, err := sim.Schemes([]string{"autoshape", "classic"}, policies.BudgetConfig{}, policies.DefaultClassicConfig())
	if err != nil {
		fail(err)
	}

	// results[case][seed] holds the run's results by scheme and direction.
	results := make([][]map[string]sim.Result, len(cases))
	for c := range cases {
		results[c] = make([]map[string]sim.Result, *seeds)
	}
	err = bars.Each(len(cases)**seeds, func(i int) error {
		c, s := i / *seeds, i%*seeds
		out, err := cases[c].Run(s+1, schemes)
		results[c][s] = out // each job its own element
		return err
	})
	if err != nil {
		fail(err)
	}

	fmt.Printf("seeds 1-%d, budget %d ms: seeds within the bars, then medians over seeds\n\n", *seeds, bars.BudgetMs)
	fmt.Println("| case | dir | within bars | util | p50 ms | p95 ms | classic util | classic p95 ms |")
	fmt.Println("|---|---|---:|---:|---:|---:|---:|---:|")
	total, met := 0, 0
	for c, cs := range cases {
		for _, dir := range cs.Dirs() {
			var n int
			var util, p50, p95, cutil, cp95 []float64
			for _, r := range results[c] {
				a, ok := r["autoshape "+dir]
				if !ok {
					continue
				}
				cl := r["classic "+dir]
				if bars.Meets(cs.Kind, a, cl) {
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
			fmt.Printf("| %s | %s | %d/%d | %.2f | %.1f | %.1f | %.2f | %.1f |\n", cs.Name, dir, n, len(util),
				bars.Median(util), bars.Median(p50), bars.Median(p95), bars.Median(cutil), bars.Median(cp95))
		}
	}
	fmt.Printf("\nwithin the bars: %d of %d runs\n", met, total)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "seedbars:", err)
	os.Exit(1)
}
