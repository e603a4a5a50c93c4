// Command linklab runs schemes over an emulated bloated line in network
// namespaces: real packets through the real kernel (needs root).
//
//	linklab run --scenario step|dsl|lte [--trace-down FILE] [--trace-up FILE]
//	            --scheme SCHEME [--scheme SCHEME ...] [--duration D] [--budget B] [--json]
//	linklab sweep --scenario dsl --direction down|up|both [...]
//	linklab load --ns NS --addr HOST:PORT --direction down|up (the sweep's load)
//
// The schemes and the environment it reads are in the usage text.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/autoshape/autoshape/estimator"
	"github.com/autoshape/autoshape/lab"
	"github.com/autoshape/autoshape/lab/uml"
	"github.com/autoshape/autoshape/policies"
	"github.com/autoshape/autoshape/sim"
)

const usage = `usage: linklab run --scenario step|dsl|lte --scheme SCHEME [--scheme SCHEME ...] [flags]
       linklab sweep --scenario dsl --direction down|up|both [--from F --to F --step F --hold D] [--json]
       linklab load --ns NS --addr HOST:PORT --direction down|up [--streams N]   (the sweep's load, run by it)
       linklab router [run's flags] DIR   (the router half of run --kernel uml, run by it inside the kernel)

schemes:
  unshaped
  static:FRACTION     HTB in rtr at a fraction of the mean capacity
  autoshape[:CONFIG]  the daemon in rtr; by default HTB, srv's reflectors and
                      bounds derived from the capacities
  classic             the same daemon with policy = "classic" (cake-autorate's
                      documented default rules)
  supervise           the same daemon with policy = "supervise": the budget
                      policy supervising CAKE's autorate-ingress on the
                      download (CAKE backend)
  autorate            CAKE's autorate-ingress alone on the download (CAKE
                      backend): the exec scheme running
                      tc qdisc change dev $LINKLAB_DOWN_IFACE root cake autorate-ingress
  exec:COMMAND        any other controller: HTB set up as for static at the
                      daemon's base rates, then sh -c COMMAND in rtr with
      LINKLAB_DOWN_IFACE   the download shaper's interface (the IFB)
      LINKLAB_UP_IFACE     the upload shaper's interface (rtr's WAN)
      LINKLAB_REFLECTORS   srv's reflector addresses, space separated
      LINKLAB_DOWN_MIN_KBIT LINKLAB_DOWN_BASE_KBIT LINKLAB_DOWN_MAX_KBIT
      LINKLAB_UP_MIN_KBIT   LINKLAB_UP_BASE_KBIT   LINKLAB_UP_MAX_KBIT
                           the bounds in kbit/s (the shaping starts at base)
      LINKLAB_BUDGET_MS    the latency budget in ms
      LINKLAB_DIR          its working directory (its output: command.log)
                      its rates are read from the shapers every 100 ms; at the
                      end it gets SIGTERM (its process group), SIGKILL 5 s later

environment:
  LINKLAB_PREFIX  the start of the lab's namespace names (default aslab-, at
                  most 8 characters); namespaces under it are removed first
  LINKLAB_KEEP=1  keep the daemon's and the exec command's directories
`

// errInterrupted ends a command that SIGINT or SIGTERM stopped, after it
// removed what it had set up.
var errInterrupted = errors.New("interrupted: the lab is removed")

// prefix is the lab's namespace prefix: LINKLAB_PREFIX or the default.
func prefix() (string, error) {
	p := os.Getenv("LINKLAB_PREFIX")
	if p == "" {
		return lab.DefaultPrefix, nil
	}
	if err := lab.CheckPrefix(p); err != nil {
		return "", usageError{fmt.Errorf("LINKLAB_PREFIX: %w", err)}
	}
	return p, nil
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

type usageError struct{ error }

func run(args []string, stdout, stderr io.Writer) int {
	var err error
	switch {
	case len(args) == 0:
		fmt.Fprint(stderr, usage)
		return 2
	case args[0] == "run":
		err = runCmd(args[1:], stdout, stderr)
	case args[0] == "sweep":
		err = sweepCmd(args[1:], stdout, stderr)
	case args[0] == "uml":
		err = umlCmd(args[1:], stdout, stderr)
	case args[0] == "router":
		err = routerCmd(args[1:], stderr)
	case args[0] == "load":
		err = loadCmd(args[1:], stderr)
	default:
		fmt.Fprint(stderr, usage)
		return 2
	}
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	var code exitCode
	if errors.As(err, &code) {
		return int(code) // the linklab inside has said why
	}
	fmt.Fprintf(stderr, "linklab: %v\n", err)
	var ue usageError
	if errors.As(err, &ue) {
		return 2
	}
	if errors.Is(err, errInterrupted) {
		return 130
	}
	return 1
}

type schemeList []string

func (s *schemeList) String() string     { return strings.Join(*s, ",") }
func (s *schemeList) Set(v string) error { *s = append(*s, v); return nil }

// A scenario is a line to emulate.
type scenario struct {
	down, up   string // capacities: schedules, trace files or embedded traces
	bottleneck lab.BottleneckOptions
	duration   time.Duration
	// rtt is the path's base round trip where the kernel has netem.
	rtt time.Duration
}

var scenarios = map[string]scenario{
	// ADSL2+ as in the classic manual sweep: ATM cells, 44 bytes of overhead.
	"dsl":  {down: "17613kbit", up: "2604kbit", bottleneck: lab.BottleneckOptions{ATM: true, Overhead: 44}, duration: 60 * time.Second, rtt: 20 * time.Millisecond},
	"step": {down: "40mbit@0s,10mbit@30s,40mbit@60s", duration: 90 * time.Second, rtt: 20 * time.Millisecond},
	"lte":  {down: sim.EmbeddedDownName, up: sim.EmbeddedUpName, duration: 120 * time.Second, rtt: 50 * time.Millisecond},
}

// Report is `linklab run --json`: the shape of `autoshape-tools simulate --json`.
type Report struct {
	TraceDown string  `json:"trace_down"`
	TraceUp   string  `json:"trace_up"`
	DurationS float64 `json:"duration_s"`
	BudgetMs  float64 `json:"budget_ms"`
	// Kernel is where the lab ran (host or uml), Backend the router's
	// shaper, RTTMs the path's base round trip that netem added.
	Kernel  string       `json:"kernel,omitempty"`
	Backend string       `json:"backend,omitempty"`
	RTTMs   float64      `json:"rtt_ms"`
	Seed    uint64       `json:"seed"`
	Results []sim.Result `json:"results"`
	// Sim holds the simulator's results on the same line (--sim).
	Sim []sim.Result `json:"sim,omitempty"`
}

// lineFlags are the flags that pick the emulated line, shared by run and
// sweep.
type lineFlags struct {
	name, traceDown, traceUp *string
	budget                   *time.Duration
}

func addLineFlags(fs *flag.FlagSet, defaultScenario string) lineFlags {
	return lineFlags{
		name:      fs.String("scenario", defaultScenario, "dsl, step or lte"),
		traceDown: fs.String("trace-down", "", "download capacity: a Mahimahi trace, a schedule or a generated trace (gen:poisson.down#1) (overrides the scenario's)"),
		traceUp:   fs.String("trace-up", "", "upload capacity: a Mahimahi trace, a schedule or a generated trace (gen:poisson.up#1) (overrides the scenario's)"),
		budget:    fs.Duration("budget", estimator.DefaultBudget, "latency budget"),
	}
}

// line returns the chosen scenario, the traces overriding its capacities,
// and the capacities loaded (by estimator.Direction).
func (f lineFlags) line() (scenario, [2]*sim.Trace, error) {
	var caps [2]*sim.Trace
	sc, ok := scenarios[*f.name]
	if !ok {
		return sc, caps, usageError{fmt.Errorf("--scenario %q: want dsl, step or lte", *f.name)}
	}
	if *f.traceDown != "" {
		sc.down = *f.traceDown
	}
	if *f.traceUp != "" {
		sc.up = *f.traceUp
	}
	for d, spec := range map[estimator.Direction]string{estimator.Down: sc.down, estimator.Up: sc.up} {
		if spec == "" {
			continue
		}
		t, err := loadCapacity(spec)
		if err != nil {
			return sc, caps, usageError{err}
		}
		caps[d] = t
	}
	return sc, caps, nil
}

// parseArgs parses a subcommand's flags: -h is not an error, a bad flag or a
// stray argument is a usage error.
func parseArgs(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	return nil
}

// needRoot refuses to go on without root.
func needRoot() error {
	if os.Geteuid() != 0 {
		return errors.New("linklab needs root: it creates network namespaces")
	}
	return nil
}

// openLab builds the lab under its prefix, once root is checked, with a
// context that ends on SIGINT or SIGTERM; closeLab removes the lab and stops
// catching the signals.
//
// split builds a split lab's host half (lab.BuildHosts): the router half is
// built inside the kernel for each run, with the round trip.
func openLab(rtt time.Duration, split bool) (ctx context.Context, top *lab.Topology, closeLab func(), err error) {
	pfx, err := prefix()
	if err != nil {
		return nil, nil, nil, err
	}
	if err := needRoot(); err != nil {
		return nil, nil, nil, err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	if split {
		if top, err = lab.BuildHosts(pfx); err != nil {
			stop()
			return nil, nil, nil, err
		}
		return ctx, top, func() { top.Close(); stop() }, nil
	}
	if top, err = lab.Build(pfx); err != nil {
		stop()
		return nil, nil, nil, err
	}
	if err := top.SetRTT(rtt); err != nil {
		top.Close()
		stop()
		return nil, nil, nil, err
	}
	return ctx, top, func() { top.Close(); stop() }, nil
}

// runOpts is `linklab run`'s command line, read.
type runOpts struct {
	name    string // the scenario's
	sc      scenario
	caps    [2]*sim.Trace
	cfg     lab.RunConfig
	schemes []lab.Scheme
	// rawSchemes are the schemes as given, for the router half.
	rawSchemes []string
	kernel     string
	asJSON     bool
	withSim    bool
	extraArg   []string // what parseRun left: the router half's directory
}

// parseRun reads `linklab run`'s flags; router is `linklab router`, which
// takes the same and its directory after them.
func parseRun(args []string, stderr io.Writer, router bool) (runOpts, error) {
	var o runOpts
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	lf := addLineFlags(fs, "step")
	var schemes schemeList
	fs.Var(&schemes, "scheme", "a scheme to run (repeatable; they run one after another)")
	duration := fs.Duration("duration", 0, "loaded time per scheme (default: the scenario's)")
	streams := fs.Int("streams", 4, "TCP streams per loaded direction")
	cc := fs.String("cc", "cubic", "the load's TCP congestion control")
	autoshape := fs.String("autoshape", "", "the autoshape binary (default: beside linklab, else in PATH)")
	asJSON := fs.Bool("json", false, "print the JSON report (with series) instead of the table")
	withSim := fs.Bool("sim", false, "also run the simulator on the same line and schemes, with the lab's round trip, and print them side by side")
	kernel := fs.String("kernel", kernelHost, "host (HTB, no netem) or uml: the router and the ISP inside the User-mode Linux kernel, with CAKE and netem, the hosts (load, reflectors, probe) outside")
	backendName := fs.String("backend", "", "the router's shaper, cake or htb (default: cake with --kernel uml, else htb)")
	rtt := fs.Duration("rtt", -1, "the path's base round trip, added with netem (default: the scenario's with --kernel uml: step and dsl 20ms, lte 50ms; 0 on the host)")
	if router {
		if err := fs.Parse(args); err != nil {
			return o, usageError{err}
		}
		o.extraArg = fs.Args()
	} else if err := parseArgs(fs, args); err != nil {
		return o, err
	}
	if err := checkKernel(*kernel); err != nil {
		return o, err
	}
	sc, caps, err := lf.line()
	if err != nil {
		return o, err
	}
	backend, err := lineBackend(*backendName, *kernel == kernelUML)
	if err != nil {
		return o, err
	}
	if *rtt < 0 {
		*rtt = 0
		if *kernel == kernelUML {
			*rtt = sc.rtt
		}
	}
	budget := lf.budget
	if *duration > 0 {
		sc.duration = *duration
	}
	if sc.duration < 5*time.Second || *budget <= 0 || *streams < 1 {
		return o, usageError{fmt.Errorf("want --duration of 5s or more, a positive --budget and --streams")}
	}
	if len(schemes) == 0 {
		schemes = schemeList{"unshaped", "autoshape"}
	}
	for _, s := range schemes {
		p, err := lab.ParseScheme(s)
		if err != nil {
			return o, usageError{err}
		}
		o.schemes = append(o.schemes, p)
		o.rawSchemes = append(o.rawSchemes, s)
	}
	o.cfg = lab.RunConfig{Capacity: caps, Duration: sc.duration, Budget: *budget, Streams: *streams, CC: *cc, Bottleneck: sc.bottleneck,
		Backend: backend, RTT: *rtt}
	for _, s := range o.schemes {
		if s.NeedsAutoshape() {
			bin, err := findAutoshape(*autoshape)
			if err != nil {
				return o, usageError{err}
			}
			o.cfg.Autoshape = bin
		}
	}
	o.name, o.sc, o.caps, o.kernel, o.asJSON, o.withSim = *lf.name, sc, caps, *kernel, *asJSON, *withSim
	return o, nil
}

func runCmd(args []string, stdout, stderr io.Writer) error {
	o, err := parseRun(args, stderr, false)
	if err != nil {
		return err
	}
	if o.kernel == kernelUML {
		if err := needRoot(); err != nil {
			return err
		}
		if err := uml.Install(stderr); err != nil {
			return err
		}
	}
	ctx, top, closeLab, err := openLab(o.cfg.RTT, o.kernel == kernelUML)
	if err != nil {
		return err
	}
	defer closeLab()
	rep := Report{TraceDown: o.sc.down, TraceUp: o.sc.up, DurationS: o.sc.duration.Seconds(), BudgetMs: float64(o.cfg.Budget) / 1e6,
		Kernel: o.kernel, Backend: string(o.cfg.Backend), RTTMs: float64(o.cfg.RTT) / 1e6}
	for i, s := range o.schemes {
		fmt.Fprintf(stderr, "linklab: %s on %s for %v\n", s.Name, o.name, o.sc.duration)
		var rs []sim.Result
		if o.kernel == kernelUML {
			var guest lab.GuestCommand
			if guest, err = routerCommand(args, o.rawSchemes[i], stderr); err == nil {
				rs, err = lab.RunSplit(ctx, top, o.cfg, s, guest)
			}
		} else {
			rs, err = lab.Run(ctx, top, o.cfg, s)
		}
		if ctx.Err() != nil {
			return errInterrupted
		}
		if err != nil {
			return fmt.Errorf("%s: %w", s.Name, err)
		}
		for _, r := range rs {
			if b := r.Bottleneck; b != nil {
				fmt.Fprintf(stderr, "linklab: %s\n", deliveryLine(r.Direction, *b))
			}
		}
		rep.Results = append(rep.Results, rs...)
	}
	if o.withSim {
		if rep.Sim, err = simulate(o.caps, o.cfg, o.schemes); err != nil {
			return err
		}
	}
	if o.asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	if o.withSim {
		writeSideBySide(stdout, rep)
		return nil
	}
	writeTable(stdout, rep)
	return nil
}

// labRTT is the round trip the simulator gets when it runs beside the lab
// without netem: the lab's veths add no delay, so its round trip is the
// queues' alone.
const labRTT = 2 * time.Millisecond

// simulate runs the simulator on the lab's line with the schemes it knows
// (unshaped, static:F, autoshape with its default budget policy, classic),
// with the lab's streams, budget and round trip, seed 1.
func simulate(caps [2]*sim.Trace, cfg lab.RunConfig, schemes []lab.Scheme) ([]sim.Result, error) {
	var out []sim.Result
	for _, s := range schemes {
		var ss sim.Scheme
		switch {
		case s.Name == "unshaped" || s.Name == "autoshape" && s.Config == "" || s.Name == "classic" || s.Name == sim.AutorateName || s.Name == sim.SuperviseName:
			name := s.Name
			std, err := sim.Schemes([]string{name}, policies.BudgetConfig{Budget: cfg.Budget}, policies.DefaultClassicConfig())
			if err != nil {
				return nil, err
			}
			ss = std[0]
		case s.Fraction > 0:
			f := s.Fraction
			ss = sim.Scheme{Name: s.Name, Policy: func(_ estimator.Direction, _ policies.Bounds, mean float64) (policies.Policy, error) {
				return policies.NewFixed(f * mean), nil
			}}
		default:
			continue // exec: and autoshape with a config of its own
		}
		ss.Name = s.Name
		rs, err := sim.Run(sim.Config{Down: caps[estimator.Down], Up: caps[estimator.Up], Duration: cfg.Duration,
			Budget: cfg.Budget, Flows: cfg.Streams, BaseRTT: max(cfg.RTT, labRTT), Seed: 1, Series: true}, ss)
		if err != nil {
			return nil, fmt.Errorf("simulating %s: %w", s.Name, err)
		}
		out = append(out, rs...)
	}
	return out, nil
}

// writeSideBySide prints each lab result beside the simulator's for the
// same scheme and direction.
func writeSideBySide(w io.Writer, rep Report) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scheme\tdir\tutil lab\tutil sim\tp50 lab\tp50 sim\tp95 lab\tp95 sim\tover budget lab\tover budget sim\treaction lab\treaction sim\t")
	for _, r := range rep.Results {
		var m *sim.Result
		for i := range rep.Sim {
			if rep.Sim[i].Scheme == r.Scheme && rep.Sim[i].Direction == r.Direction {
				m = &rep.Sim[i]
			}
		}
		if m == nil {
			m = &sim.Result{}
		}
		fmt.Fprintf(tw, "%s\t%s\t%.2f\t%.2f\t%.1f\t%.1f\t%.1f\t%.1f\t%.2f\t%.2f\t%s\t%s\t\n", r.Scheme, r.Direction,
			r.Utilization, m.Utilization, r.Delay.P50, m.Delay.P50, r.Delay.P95, m.Delay.P95, r.OverBudget, m.OverBudget,
			seconds(r.ReactionS), seconds(m.ReactionS))
	}
	tw.Flush()
	// The estimate is live only under autorate-ingress alone: a
	// controller's first write freezes it, in the kernel and the model.
	for _, r := range rep.Results {
		for _, m := range rep.Sim {
			if r.Scheme != sim.AutorateName || m.Scheme != r.Scheme || m.Direction != r.Direction {
				continue
			}
			if mae, ok := lab.EstimateError(r, m); ok {
				fmt.Fprintf(w, "%s %s: CAKE's capacity estimate, simulator against kernel: median absolute difference %.2f Mbit/s, %.1f %% of the mean capacity\n",
					r.Scheme, r.Direction, mae, 100*mae/r.CapacityMbps)
			}
		}
	}
}

func seconds(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.2f", *v)
}

// loadCapacity reads a schedule, a Mahimahi file or an embedded trace.
func loadCapacity(spec string) (*sim.Trace, error) {
	down, up := sim.EmbeddedTraces()
	switch spec {
	case sim.EmbeddedDownName:
		return down, nil
	case sim.EmbeddedUpName:
		return up, nil
	}
	return sim.LoadTrace(spec)
}

// findAutoshape finds the daemon's binary.
func findAutoshape(flagged string) (string, error) {
	if flagged != "" {
		if _, err := os.Stat(flagged); err != nil {
			return "", fmt.Errorf("--autoshape: %w", err)
		}
		return filepath.Abs(flagged)
	}
	if self, err := os.Executable(); err == nil {
		beside := filepath.Join(filepath.Dir(self), "autoshape")
		if _, err := os.Stat(beside); err == nil {
			return beside, nil
		}
	}
	p, err := exec.LookPath("autoshape")
	if err != nil {
		return "", errors.New("the autoshape scheme needs the autoshape binary: give --autoshape PATH (go build ./cmd/autoshape)")
	}
	return filepath.Abs(p)
}

func writeTable(w io.Writer, rep Report) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scheme\tdir\tcapacity Mbit/s\tgoodput Mbit/s\tutil\tp50 ms\tp95 ms\tp99 ms\tover budget\treaction s\t")
	for _, r := range rep.Results {
		react := "-"
		if r.ReactionS != nil {
			react = fmt.Sprintf("%.2f", *r.ReactionS)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.2f\t%.2f\t%.2f\t%.1f\t%.1f\t%.1f\t%.2f\t%s\t\n", r.Scheme, r.Direction, r.CapacityMbps,
			r.GoodputMbps, r.Utilization, r.Delay.P50, r.Delay.P95, r.Delay.P99, r.OverBudget, react)
	}
	tw.Flush()
}

// sweepCmd runs `autoshape sweep` on rtr against the lab's line, its load
// (sweepLoad: streams from cli to srv's endpoint) and passes its output
// through. When a direction could not be completed, autoshape sweep prints
// the steps it finished and the recommendation of each completed direction,
// names the failed direction and exits 1, and so does linklab.
func sweepCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sweep", flag.ContinueOnError)
	fs.SetOutput(stderr)
	lf := addLineFlags(fs, "dsl")
	direction := fs.String("direction", "both", "down, up or both")
	from := fs.String("from", "0.70", "lowest fraction of the line rate")
	to := fs.String("to", "1.00", "highest fraction of the line rate")
	step := fs.String("step", "0.025", "fraction step")
	hold := fs.String("hold", "20s", "time under load per step")
	streams := fs.Int("streams", 4, "TCP streams per step")
	autoshape := fs.String("autoshape", "", "the autoshape binary (default: beside linklab, else in PATH)")
	asJSON := fs.Bool("json", false, "print the sweep's JSON")
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	sc, caps, err := lf.line()
	if err != nil {
		return err
	}
	cfg := lab.RunConfig{Capacity: caps, Duration: sc.duration, Budget: *lf.budget, Bottleneck: sc.bottleneck}
	bin, err := findAutoshape(*autoshape)
	if err != nil {
		return usageError{err}
	}
	ctx, top, closeLab, err := openLab(0, false)
	if err != nil {
		return err
	}
	defer closeLab()
	devs := map[estimator.Direction]string{estimator.Down: lab.ISPDown, estimator.Up: lab.ISPUp}
	sweepArgs := []string{"netns", "exec", top.Rtr, bin, "sweep", "--direction", *direction,
		"--from", *from, "--to", *to, "--step", *step, "--hold", *hold, "--streams", fmt.Sprint(*streams)}
	start := time.Now()
	for _, d := range estimator.Directions {
		if cfg.Capacity[d] == nil {
			continue
		}
		b, err := lab.NewBottleneck(top.ISP, devs[d], cfg.Capacity[d], cfg.Bottleneck)
		if err != nil {
			return err
		}
		defer b.Close()
		go b.Follow(ctx, start)
		line := cfg.Capacity[d].MeanRate(cfg.Capacity[d].DefaultDuration())
		sweepArgs = append(sweepArgs, "--line-rate-"+d.String(), fmt.Sprintf("%.0f", line))
	}
	ep, err := lab.StartEndpoint(top, "0", "cubic")
	if err != nil {
		return err
	}
	defer ep.Close()
	dir, err := os.MkdirTemp("", "linklab-sweep-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	conf, _, err := lab.WriteDaemonConfig(top, cfg, dir, "")
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("the sweep's load runs linklab itself: %w", err)
	}
	sweepArgs = append(sweepArgs, "-c", conf, "--load", sweepLoad(self, top.Cli, ep.Addr(), *streams))
	if *asJSON {
		sweepArgs = append(sweepArgs, "--json")
	}
	cmd := exec.CommandContext(ctx, "ip", sweepArgs...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return errInterrupted
		}
		return fmt.Errorf("autoshape sweep: %w", err)
	}
	return nil
}

// deliveryLine says what a direction's line sent while it held a queue,
// and, when it sent less than its rate, that the run's delays hold a queue
// that is the lab's.
func deliveryLine(dir string, d sim.Delivery) string {
	if d.QueuedS == 0 {
		return fmt.Sprintf("the %s line never held a queue", dir)
	}
	s := fmt.Sprintf("the %s line held a queue for %.1f s and sent %.0f %% of its rate then (%.1f s under %.0f %%)",
		dir, d.QueuedS, 100*d.Share, d.ShortS, 100*sim.ShortShare)
	if d.Share < lineShortfall {
		s += "; the kernel did not forward the line's rate, and the run's delays hold the queue that left"
	}
	return s
}

// lineShortfall is the share of its rate under which a line that held a
// queue sent short overall: HTB on a kernel with time to spare sends its
// rate to within a per cent.
const lineShortfall = 0.95
