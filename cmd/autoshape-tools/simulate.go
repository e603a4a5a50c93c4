package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/autoshape/autoshape/controller"
	"github.com/autoshape/autoshape/estimator"
	"github.com/autoshape/autoshape/internal/cli"
	"github.com/autoshape/autoshape/policies"
	"github.com/autoshape/autoshape/sim"
)

// simReport is the JSON shape of `autoshape-tools simulate --json`.
type simReport struct {
	TraceDown string       `json:"trace_down"`
	TraceUp   string       `json:"trace_up"`
	DurationS float64      `json:"duration_s"`
	BudgetMs  float64      `json:"budget_ms"`
	Seed      uint64       `json:"seed"`
	Results   []sim.Result `json:"results"`
}

// simFile is the --config file: advanced overrides of the budget policy and of
// the link model. Unknown keys are errors.
type simFile struct {
	Budget struct {
		Budget     duration `toml:"budget"`
		Hold       duration `toml:"hold"`
		Drain      duration `toml:"drain"`
		MinCut     float64  `toml:"min_cut"`
		MaxCut     float64  `toml:"max_cut"`
		Refractory duration `toml:"refractory"`
		Step       float64  `toml:"step"`
		Memory     duration `toml:"memory"`
		Standing   duration `toml:"standing"`
		Loaded     float64  `toml:"loaded"`
		Decay      float64  `toml:"decay"`
	} `toml:"budget"`
	Bounds map[string]struct {
		Min  string `toml:"min"`
		Base string `toml:"base"`
		Max  string `toml:"max"`
	} `toml:"bounds"`
	Sim struct {
		Flows              int      `toml:"flows"`
		Reno               bool     `toml:"reno"`
		BaseRTT            duration `toml:"base_rtt"`
		Buffer             duration `toml:"buffer"`
		Reflectors         int      `toml:"reflectors"`
		ProbeRate          float64  `toml:"probe_rate"`
		ProbeLoss          float64  `toml:"probe_loss"`
		Echo               bool     `toml:"echo"`
		NoCapacityEstimate bool     `toml:"no_capacity_estimate"`
		Tick               duration `toml:"tick"`
	} `toml:"sim"`
}

// duration decodes TOML strings such as "15ms".
type duration struct{ time.Duration }

func (d *duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("invalid duration %q", b)
	}
	if v < 0 {
		return fmt.Errorf("negative duration %q", b)
	}
	d.Duration = v
	return nil
}

func simulate(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("simulate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	down := fs.String("trace-down", "", "download capacity: a Mahimahi trace file, a schedule (20mbit, 40mbit@0s,10mbit@30s) or a generated trace (gen:poisson.down#1)")
	up := fs.String("trace-up", "", "upload capacity, as --trace-down")
	budget := fs.Duration("budget", estimator.DefaultBudget, "latency budget: added delay under load to keep within")
	dur := fs.Duration("duration", 0, "simulated time (default: the trace's length; a schedule's last step + 30s)")
	seed := fs.Uint64("seed", 1, "random seed; the same seed gives the same output")
	pol := fs.String("policy", strings.Join(sim.SchemeNames, ","), "comma-separated schemes to run: "+strings.Join(sim.SchemeNames, ", "))
	cfgFile := fs.String("config", "", "TOML file with advanced overrides ([budget] policy, [sim] link model)")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	series := fs.Bool("series", false, "with --json: add per-direction time series at 100 ms resolution (the input of autoshape-tools plot)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: autoshape-tools simulate [FLAGS]\n\nWith neither trace, replays the embedded Verizon LTE trace pair.\n\n")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *budget <= 0 {
		return cli.Usagef("--budget %v must be positive", *budget)
	}
	if *dur < 0 {
		return cli.Usagef("--duration %v is negative", *dur)
	}

	if *series && !*asJSON {
		return cli.Usagef("--series needs --json")
	}
	cfg := sim.Config{Duration: *dur, Seed: *seed, Budget: *budget, Series: *series}
	if *down == "" && *up == "" {
		cfg.Down, cfg.Up = sim.EmbeddedTraces()
	}
	for _, t := range []struct {
		flag, val string
		dst       **sim.Trace
	}{{"--trace-down", *down, &cfg.Down}, {"--trace-up", *up, &cfg.Up}} {
		if t.val == "" {
			continue
		}
		tr, err := sim.LoadTrace(t.val)
		if err != nil {
			return cli.Usagef("%s: %v", t.flag, err)
		}
		*t.dst = tr
	}

	bc := policies.BudgetConfig{Budget: *budget}
	if *cfgFile != "" {
		var f simFile
		md, err := toml.DecodeFile(*cfgFile, &f)
		if err != nil {
			return cli.Usagef("--config %s: %v", *cfgFile, err)
		}
		if und := md.Undecoded(); len(und) > 0 {
			return cli.Usagef("--config %s: unknown key %q", *cfgFile, und[0].String())
		}
		b := f.Budget
		if b.Budget.Duration != 0 {
			bc.Budget = b.Budget.Duration
			cfg.Budget = b.Budget.Duration
		}
		bc.Hold, bc.Drain, bc.MinCut, bc.MaxCut = b.Hold.Duration, b.Drain.Duration, b.MinCut, b.MaxCut
		bc.Refractory, bc.Step = b.Refractory.Duration, b.Step
		bc.Memory, bc.Standing, bc.Loaded, bc.Decay = b.Memory.Duration, b.Standing.Duration, b.Loaded, b.Decay
		s := f.Sim
		cfg.Flows, cfg.Reno, cfg.BaseRTT, cfg.Buffer = s.Flows, s.Reno, s.BaseRTT.Duration, s.Buffer.Duration
		cfg.Reflectors, cfg.ProbeRate, cfg.ProbeLoss = s.Reflectors, s.ProbeRate, s.ProbeLoss
		cfg.Echo, cfg.NoCapacityEstimate, cfg.Tick = s.Echo, s.NoCapacityEstimate, s.Tick.Duration
		for dir, b := range f.Bounds {
			d, err := parseDirection(dir)
			if err != nil {
				return cli.Usagef("--config %s: bounds.%s: %v", *cfgFile, dir, err)
			}
			tr := cfg.Down
			if d == estimator.Up {
				tr = cfg.Up
			}
			if tr == nil {
				return cli.Usagef("--config %s: bounds.%s: that direction carries no load", *cfgFile, dir)
			}
			// Unset values keep what the trace suggests.
			bounds := sim.DefaultBounds(tr, effectiveDuration(cfg))
			for _, v := range []struct {
				key, val string
				dst      *float64
			}{{"min", b.Min, &bounds.Min}, {"base", b.Base, &bounds.Base}, {"max", b.Max, &bounds.Max}} {
				if v.val == "" {
					continue
				}
				r, err := controller.ParseRate(v.val)
				if err != nil {
					return cli.Usagef("--config %s: bounds.%s.%s: %v", *cfgFile, dir, v.key, err)
				}
				*v.dst = r
			}
			cfg.Bounds[d] = &bounds
		}
	}
	if err := cfg.Validate(); err != nil {
		return cli.UsageError{Err: err}
	}
	schemes, err := sim.Schemes(splitList(*pol), bc, policies.DefaultClassicConfig())
	if err != nil {
		return cli.UsageError{Err: err}
	}

	rep := simReport{Seed: *seed, BudgetMs: float64(cfg.Budget) / float64(time.Millisecond)}
	if cfg.Down != nil {
		rep.TraceDown = cfg.Down.Name
	}
	if cfg.Up != nil {
		rep.TraceUp = cfg.Up.Name
	}
	for _, s := range schemes {
		res, err := sim.Run(cfg, s)
		if err != nil {
			return fmt.Errorf("scheme %s: %w", s.Name, err)
		}
		rep.Results = append(rep.Results, res...)
	}
	rep.DurationS = effectiveDuration(cfg).Seconds()
	if *asJSON {
		return writeJSON(stdout, rep)
	}
	return printTable(stdout, rep)
}

func effectiveDuration(cfg sim.Config) time.Duration {
	if cfg.Duration > 0 {
		return cfg.Duration
	}
	var d time.Duration
	for _, t := range []*sim.Trace{cfg.Down, cfg.Up} {
		if t != nil && t.DefaultDuration() > d {
			d = t.DefaultDuration()
		}
	}
	return d
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// printTable prints the results as a Markdown table, readable as it is in a
// terminal.
func printTable(w io.Writer, rep simReport) error {
	var b strings.Builder
	fmt.Fprintf(&b, "down: %s  up: %s  duration: %gs  budget: %gms  seed: %d\n\n",
		orNone(rep.TraceDown), orNone(rep.TraceUp), rep.DurationS, rep.BudgetMs, rep.Seed)
	b.WriteString("| scheme | dir | capacity Mbit/s | goodput Mbit/s | utilization | delay p50 ms | p95 ms | p99 ms | over budget | reaction s |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rep.Results {
		react := ""
		if r.ReactionS != nil {
			react = fmt.Sprintf("%.2f", *r.ReactionS)
		}
		fmt.Fprintf(&b, "| %s | %s | %.2f | %.2f | %.2f | %.1f | %.1f | %.1f | %.1f %% | %s |\n",
			r.Scheme, r.Direction, r.CapacityMbps, r.GoodputMbps, r.Utilization,
			r.Delay.P50, r.Delay.P95, r.Delay.P99, 100*r.OverBudget, react)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func orNone(s string) string {
	if s == "" {
		return "(no load)"
	}
	return s
}

// parseDirection accepts "down" or "up".
func parseDirection(s string) (estimator.Direction, error) {
	switch s {
	case "down":
		return estimator.Down, nil
	case "up":
		return estimator.Up, nil
	}
	return 0, fmt.Errorf("unknown direction %q (want down or up)", s)
}
