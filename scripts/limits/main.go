// Command limits asks what perfect knowledge of the link, late, could do on
// the recorded LTE traces of issue #2: for each delay of that knowledge it
// runs a grid of oracles (sim.Oracle: a fraction of the true capacity over a
// window, less the true bottleneck queue over a drain time) and reports, per
// trace and direction, the most seeds on which one oracle of the grid meets
// the bars against classic on the same seed, and that oracle. A
// trace on which no late oracle meets the bars asks more of a controller than
// measuring the link can give it. With -alone each direction is loaded on its
// own. docs/limits.md quotes its output.
//
//	go run ./scripts/limits [-seeds 4] [-alone] [-traces ../shared/traces]
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/autoshape/autoshape/policies"
	"github.com/autoshape/autoshape/scripts/internal/bars"
	"github.com/autoshape/autoshape/sim"
)

// The grid of oracles tried at each lag.
var (
	lags      = []time.Duration{0, 20 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond}
	fractions = []float64{0.6, 0.7, 0.8, 0.9, 0.95}
	windows   = []time.Duration{50 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond, time.Second}
	drains    = []time.Duration{0, 100 * time.Millisecond, 300 * time.Millisecond}
)

func main() {
	seeds := flag.Int("seeds", 4, "seeds 1..N")
	traces := flag.String("traces", "../shared/traces", "folder of the recorded traces")
	alone := flag.Bool("alone", false, "load one direction at a time")
	flag.Parse()
	cases := bars.RecordedCases(*traces)
	if *alone {
		cases = bars.Alone(cases)
	}
	classic, err := sim.Schemes([]string{"classic"}, policies.BudgetConfig{}, policies.DefaultClassicConfig())
	if err != nil {
		fail(err)
	}
	var oracles []sim.Oracle
	for _, l := range lags {
		for _, f := range fractions {
			for _, w := range windows {
				for _, d := range drains {
					oracles = append(oracles, sim.Oracle{Fraction: f, Window: w, Lag: l, Drain: d})
				}
			}
		}
	}
	// classics[case][seed], results[case][seed][oracle]
	classics := make([][]map[string]sim.Result, len(cases))
	results := make([][][]map[string]sim.Result, len(cases))
	for c := range cases {
		classics[c] = make([]map[string]sim.Result, *seeds)
		results[c] = make([][]map[string]sim.Result, *seeds)
		for s := range *seeds {
			results[c][s] = make([]map[string]sim.Result, len(oracles))
		}
	}
	per := *seeds * (len(oracles) + 1)
	err = bars.Each(len(cases)*per, func(i int) error {
		c, s, o := i/per, i%per/(len(oracles)+1), i%per%(len(oracles)+1)
		if o == len(oracles) {
			out, err := cases[c].Run(s+1, classic)
			classics[c][s] = out
			return err
		}
		out, err := cases[c].Run(s+1, []sim.Scheme{{Name: "oracle", Oracle: &oracles[o]}})
		results[c][s][o] = out
		return err
	})
	if err != nil {
		fail(err)
	}

	fmt.Printf("seeds 1-%d, budget %d ms; %d oracles per lag: fraction %v × window %v × drain %v (0: none).\n",
		*seeds, bars.BudgetMs, len(oracles)/len(lags), fractions, windows, drains)
	fmt.Println("Each cell: the seeds on which the best oracle at that lag meets the bars, that oracle (fraction, window, drain)")
	fmt.Println("and its median utilization @ p95, p50 ms over the seeds.")
	fmt.Println()
	head := "| case | dir |"
	rule := "|---|---|"
	for _, l := range lags {
		if l == 0 {
			head += " foresight (lag 0) |"
		} else {
			head += fmt.Sprintf(" %v late |", l)
		}
		rule += "---|"
	}
	fmt.Println(head)
	fmt.Println(rule)
	for c, cs := range cases {
		for _, dir := range cs.Dirs() {
			row := fmt.Sprintf("| %s | %s |", cs.Name, dir)
			for _, l := range lags {
				best, bestN, bestU := -1, -1, 0.0
				for o, or := range oracles {
					if or.Lag != l {
						continue
					}
					n := 0
					var util []float64
					for s := range *seeds {
						a := results[c][s][o]["oracle "+dir]
						if bars.Meets(cs.Kind, a, classics[c][s]["classic "+dir]) {
							n++
						}
						util = append(util, a.Utilization)
					}
					if u := bars.Median(util); n > bestN || n == bestN && u > bestU {
						best, bestN, bestU = o, n, u
					}
				}
				or := oracles[best]
				var util, p95, p50 []float64
				for s := range *seeds {
					a := results[c][s][best]["oracle "+dir]
					util, p95, p50 = append(util, a.Utilization), append(p95, a.Delay.P95), append(p50, a.Delay.P50)
				}
				row += fmt.Sprintf(" %d/%d: %.2f, %v, %v: %.2f @ %.0f, %.1f |", bestN, *seeds, or.Fraction, or.Window, or.Drain,
					bars.Median(util), bars.Median(p95), bars.Median(p50))
			}
			fmt.Println(row)
		}
	}
	fmt.Println()
	fmt.Println("classic, medians over the seeds (utilization @ p95 ms):")
	for c, cs := range cases {
		for _, dir := range cs.Dirs() {
			var util, p95 []float64
			for s := range *seeds {
				r := classics[c][s]["classic "+dir]
				util, p95 = append(util, r.Utilization), append(p95, r.Delay.P95)
			}
			fmt.Printf("- %s %s: %.2f @ %.0f\n", cs.Name, dir, bars.Median(util), bars.Median(p95))
		}
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "limits:", err)
	os.Exit(1)
}
