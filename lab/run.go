package lab

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vishvananda/netns"

	"github.com/autoshape/autoshape/actuator"
	"github.com/autoshape/autoshape/config"
	"github.com/autoshape/autoshape/controller"
	"github.com/autoshape/autoshape/estimator"
	"github.com/autoshape/autoshape/policies"
	"github.com/autoshape/autoshape/probe"
	"github.com/autoshape/autoshape/sim"
)

// A Scheme is what shapes rtr's WAN during a run.
type Scheme struct {
	// Name is the scheme's name in results: unshaped, static:FRACTION,
	// autoshape, classic, supervise (the daemon with policy = "supervise",
	// CAKE only), autorate (CAKE's autorate-ingress alone on the download)
	// or exec.
	Name string
	// Fraction of the nominal rate, for static:FRACTION.
	Fraction float64
	// Config is the autoshape scheme's configuration file ("" generates
	// one from the capacities).
	Config string
	// Policy is the policy the generated daemon configuration names: ""
	// (the daemon's default, budget), "classic" or "supervise".
	Policy string
	// Command is the exec scheme's shell command, run in rtr with sh -c.
	Command string
}

// ParseScheme reads unshaped, static:FRACTION, autoshape[:CONFIG], classic,
// autorate or exec:COMMAND.
func ParseScheme(s string) (Scheme, error) {
	name, arg, hasArg := strings.Cut(s, ":")
	switch name {
	case "unshaped":
		if hasArg {
			return Scheme{}, fmt.Errorf("scheme %q: unshaped takes no argument", s)
		}
		return Scheme{Name: s}, nil
	case "static":
		f, err := strconv.ParseFloat(arg, 64)
		if err != nil || !(f > 0 && f <= 2) {
			return Scheme{}, fmt.Errorf("scheme %q: want static:FRACTION with a fraction in (0, 2]", s)
		}
		return Scheme{Name: s, Fraction: f}, nil
	case "autoshape":
		return Scheme{Name: "autoshape", Config: arg}, nil
	case "classic":
		if hasArg {
			return Scheme{}, fmt.Errorf("scheme %q: classic takes no argument (for a configuration of your own, set policy = \"classic\" in it and use autoshape:CONFIG)", s)
		}
		return Scheme{Name: "classic", Policy: "classic"}, nil
	case "supervise":
		if hasArg {
			return Scheme{}, fmt.Errorf("scheme %q: supervise takes no argument", s)
		}
		return Scheme{Name: "supervise", Policy: "supervise"}, nil
	case "autorate":
		if hasArg {
			return Scheme{}, fmt.Errorf("scheme %q: autorate takes no argument", s)
		}
		return Scheme{Name: s, Command: autorateCommand}, nil
	case "exec":
		if strings.TrimSpace(arg) == "" {
			return Scheme{}, fmt.Errorf("scheme %q: want exec:COMMAND with a shell command", s)
		}
		return Scheme{Name: "exec", Command: arg}, nil
	}
	return Scheme{}, fmt.Errorf("scheme %q: want unshaped, static:FRACTION, autoshape[:CONFIG], classic, supervise, autorate or exec:COMMAND", s)
}

// autorateCommand is the autorate scheme: CAKE's autorate-ingress alone on
// the download, turned on over the exec scheme's CAKE shaping at the base
// rates, as a user would by hand.
const autorateCommand = `tc qdisc change dev "$` + EnvDownIface + `" root cake autorate-ingress && exec sleep 1000000`

// NeedsAutoshape reports whether the scheme runs the autoshape daemon (and
// so needs RunConfig.Autoshape).
func (s Scheme) NeedsAutoshape() bool {
	return s.Name == "autoshape" || s.Name == "classic" || s.Name == "supervise"
}

// RunConfig is one run of a scenario.
type RunConfig struct {
	// Capacity per direction (by estimator.Direction); a direction without
	// one is neither limited nor loaded.
	Capacity   [2]*sim.Trace
	Bottleneck BottleneckOptions
	Duration   time.Duration
	Budget     time.Duration
	// Streams is the number of TCP streams per loaded direction (default 4).
	Streams int
	// CC is the load's congestion control (default cubic).
	CC string
	// Autoshape is the autoshape binary for the autoshape and classic
	// schemes.
	Autoshape string
	// Warmup is how long the scheme runs before the load starts (default 3 s).
	Warmup time.Duration
	// Backend is the router's shaper for every shaped scheme (default HTB).
	Backend actuator.Backend
	// RTT is the base round trip the topology was given (Topology.SetRTT).
	RTT time.Duration
}

// withDefaults fills in the streams and the warm-up.
func (cfg RunConfig) withDefaults() RunConfig {
	if cfg.Streams == 0 {
		cfg.Streams = 4
	}
	if cfg.Warmup == 0 {
		cfg.Warmup = 3 * time.Second
	}
	return cfg
}

// Run runs one scheme on the built topology: bottlenecks following the
// capacities, the scheme on rtr, the load and the independent probe. It
// returns one result per loaded direction, in the simulator's shape, with
// 100 ms series.
func Run(ctx context.Context, top *Topology, cfg RunConfig, scheme Scheme) ([]sim.Result, error) {
	return runOn(ctx, top, cfg, scheme, func(cfg RunConfig) (router, error) { return startLocal(top, cfg, scheme) })
}

// runOn runs one scheme with the router that start puts on rtr and isp.
func runOn(ctx context.Context, top *Topology, cfg RunConfig, scheme Scheme, start func(RunConfig) (router, error)) (results []sim.Result, err error) {
	cfg = cfg.withDefaults()
	if cfg.Duration <= 0 || cfg.Budget <= 0 {
		return nil, errors.New("a run needs a duration and a budget")
	}
	rt, err := start(cfg)
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := rt.close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	return measure(ctx, top, cfg, scheme, rt)
}

// A router is what a run puts on rtr and isp: the bottlenecks and the
// scheme, in this kernel (localRouter) or in the split lab's
// (guestRouter).
type router interface {
	// failed delivers an error when the run cannot go on.
	failed() <-chan error
	// begin starts the bottlenecks on their capacities and, where the
	// download shaper is CAKE, the reading of its estimate, at start.
	begin(ctx context.Context, start time.Time) error
	// end stops them and returns the scheme (still running, for its
	// rates) and CAKE's estimate, in bit/s since start.
	end() (schemeRunner, stepSeries, error)
	// delivery is, after end, what each direction's line sent while it
	// held a queue (nil for a direction without one).
	delivery() [2]*sim.Delivery
	// close stops the scheme and removes the bottlenecks.
	close() error
}

// A stepSeries is a value that holds from each of its times (since a
// run's start) to the next; 0 before the first.
type stepSeries struct {
	T []time.Duration `json:"t_ns"`
	V []float64       `json:"v"`
}

func (s stepSeries) at(t time.Duration) float64 {
	i, _ := slices.BinarySearch(s.T, t+1)
	if i == 0 {
		return 0
	}
	return s.V[i-1]
}

// measure runs the probe and the load against a started router and scores
// the run.
func measure(ctx context.Context, top *Topology, cfg RunConfig, scheme Scheme, rt router) ([]sim.Result, error) {
	probe, err := StartProbe(top)
	if err != nil {
		return nil, err
	}
	defer probe.Stop()
	// The empty line's delay: the baseline the added delay is measured from.
	if err := sleep(ctx, min(cfg.Warmup, time.Second), rt.failed()); err != nil {
		return nil, err
	}
	base, ok := baselines(probe.Samples())
	for first := time.Now(); !ok; base, ok = baselines(probe.Samples()) {
		if time.Since(first) >= baselineWait {
			return nil, fmt.Errorf("the probe got no answer across the empty line within %v", baselineWait+time.Second)
		}
		if err := sleep(ctx, 100*time.Millisecond, rt.failed()); err != nil {
			return nil, err
		}
	}
	if err := sleep(ctx, cfg.Warmup-min(cfg.Warmup, time.Second), rt.failed()); err != nil {
		return nil, err
	}

	var loads [2]*Load
	for _, d := range estimator.Directions {
		if cfg.Capacity[d] == nil {
			continue
		}
		if loads[d], err = StartLoad(top, d == estimator.Down, cfg.Streams, cfg.CC); err != nil {
			return nil, err
		}
		defer loads[d].Stop()
	}
	start := time.Now()
	if err := rt.begin(ctx, start); err != nil {
		return nil, err
	}
	var series [2]sim.Series
	var received [2]int64
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for end := start.Add(cfg.Duration); ; {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case err := <-rt.failed():
			return nil, err
		case now := <-tick.C:
			t := now.Sub(start).Seconds()
			for _, d := range estimator.Directions {
				if loads[d] == nil {
					continue
				}
				n := loads[d].Received()
				s := &series[d]
				s.T = append(s.T, round3(t))
				s.Goodput = append(s.Goodput, round3(float64(n-received[d])*8/0.1/1e6))
				ms := int64(math.Round(t*1000)) - 100
				s.Capacity = append(s.Capacity, round3(cfg.Capacity[d].RateAt(max(ms, 0), 100)/1e6))
				received[d] = n
			}
			if !now.After(end) {
				continue
			}
			sh, est, err := rt.end()
			if err != nil {
				return nil, err
			}
			if len(est.T) > 0 {
				s := &series[estimator.Down]
				for _, t := range s.T {
					s.CapacityEstimate = append(s.CapacityEstimate, round3(est.at(time.Duration(t*float64(time.Second)))/1e6))
				}
			}
			return score(cfg, scheme, sh, start, series, received, probe.Samples(), base, rt.delivery()), nil
		}
	}
}

// localRouter is the bottlenecks and the scheme in this kernel's isp and
// rtr.
type localRouter struct {
	top    *Topology
	necks  [2]*Bottleneck
	sh     schemeRunner
	errs   chan error
	cancel context.CancelFunc
	reader *shaperReader // CAKE's estimate, where it is read
	done   chan struct{} // readEstimate has ended
	est    stepSeries
}

// startLocal puts the bottlenecks on isp, at their capacities' start, and
// starts the scheme on rtr.
func startLocal(top *Topology, cfg RunConfig, scheme Scheme) (_ *localRouter, err error) {
	r := &localRouter{top: top, errs: make(chan error, 3), cancel: func() {}}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	for _, d := range estimator.Directions {
		if cfg.Capacity[d] == nil {
			continue
		}
		if r.necks[d], err = NewBottleneck(top.ISP, bottleneckDevs[d], cfg.Capacity[d], cfg.Bottleneck); err != nil {
			return nil, err
		}
	}
	if r.sh, err = startScheme(top, cfg, scheme); err != nil {
		return nil, err
	}
	if f := r.sh.failed(); f != nil {
		go func() {
			if err, ok := <-f; ok {
				r.errs <- err
			}
		}()
	}
	// CAKE's capacity estimate on the download shaper, as the kernel
	// reports it.
	if cfg.Backend == actuator.CAKE && scheme.Name != "unshaped" && cfg.Capacity[estimator.Down] != nil {
		if r.reader, err = openShaperReader(top.Rtr); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// bottleneckDevs are isp's bottleneck interfaces, by direction.
var bottleneckDevs = [2]string{estimator.Down: ISPDown, estimator.Up: ISPUp}

func (r *localRouter) failed() <-chan error { return r.errs }

func (r *localRouter) begin(ctx context.Context, start time.Time) error {
	fctx, cancel := context.WithCancel(ctx)
	r.cancel = cancel
	for _, d := range estimator.Directions {
		if r.necks[d] != nil {
			go func() {
				if err := r.necks[d].Follow(fctx, start); err != nil && fctx.Err() == nil {
					r.errs <- fmt.Errorf("bottleneck: %w", err)
				}
			}()
		}
	}
	if r.reader != nil {
		r.done = make(chan struct{})
		go r.readEstimate(fctx, start)
	}
	return nil
}

// readEstimate reads CAKE's estimate every 100 ms until ctx ends. A failed
// read (the scheme rebuilding its shaping) holds the last value.
func (r *localRouter) readEstimate(ctx context.Context, start time.Time) {
	defer close(r.done)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if bps, err := r.reader.estimate(); err == nil {
			r.est.T = append(r.est.T, time.Since(start))
			r.est.V = append(r.est.V, float64(bps))
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// end stops the bottlenecks' traces and the estimate's reading.
func (r *localRouter) end() (schemeRunner, stepSeries, error) {
	r.cancel()
	if r.done != nil {
		<-r.done
		r.done = nil
	}
	return r.sh, r.est, nil
}

func (r *localRouter) delivery() [2]*sim.Delivery {
	var out [2]*sim.Delivery
	for _, d := range estimator.Directions {
		if r.necks[d] != nil {
			out[d] = r.necks[d].Delivery()
		}
	}
	return out
}

func (r *localRouter) close() error {
	r.end()
	if r.reader != nil {
		r.reader.close()
	}
	var err error
	if r.sh != nil {
		err = r.sh.stop()
	}
	for _, d := range estimator.Directions {
		if r.necks[d] != nil {
			r.necks[d].Close()
			run("tc", "-n", r.top.ISP, "qdisc", "del", "dev", bottleneckDevs[d], "root")
		}
	}
	return err
}

// baselines is the least delay each way of the samples so far.
//
// It reports false when no probe was answered: a baseline of 0 would count
// the path's whole delay as added (as it did in the split lab, whose
// kernel gave its interfaces new MAC addresses at every boot, so that the
// hosts' neighbour entries held the last kernel's, and no probe of the
// first second came back).
func baselines(s []ProbeSample) ([2]time.Duration, bool) {
	b := [2]time.Duration{time.Hour, time.Hour}
	ok := false
	for _, x := range s {
		if !x.Lost {
			ok = true
			b[estimator.Down] = min(b[estimator.Down], x.Down)
			b[estimator.Up] = min(b[estimator.Up], x.Up)
		}
	}
	if !ok {
		return [2]time.Duration{}, false
	}
	return b, true
}

// baselineWait is how long, after the first second, a run waits for the
// probe's first answer before it fails.
const baselineWait = 5 * time.Second

// emptyProbeBytes is the size of a small probe packet on the wire, as the
// simulator takes it for an empty queue's wait.
const emptyProbeBytes = 100

// emptyWait is how long, in ms, a small packet arriving at the bottleneck
// at at (since the capacity's start) waits with no queue ahead of it, on the
// link the lab emulates: the capacity's rate over each FollowEvery window,
// where a window in which the capacity delivers nothing is silence (the
// bottleneck's floor of 8 kbit/s is only there because HTB takes no zero
// rate). Within a window the HTB spreads the window's bytes evenly, so the
// wait is the packet's time at that rate, not the gap to the trace's next
// delivery opportunity.
func emptyWait(c *sim.Trace, at time.Duration) float64 {
	win := FollowEvery.Milliseconds()
	ms := at.Milliseconds()
	for k := ms / win; k < ms/win+1200; k++ { // a minute at most
		from := max(k*win, ms)
		r := c.RateAt(k*win, win)
		if r <= 0 {
			continue
		}
		done := float64(from) + emptyProbeBytes*8*1000/r
		if done <= float64((k+1)*win) {
			return done - float64(ms)
		}
	}
	return 0
}

// score turns a run's measurements into results.
func score(cfg RunConfig, scheme Scheme, sh schemeRunner, start time.Time, series [2]sim.Series, received [2]int64, probes []ProbeSample, base [2]time.Duration, lines [2]*sim.Delivery) []sim.Result {
	var out []sim.Result
	rates := sh.rates(start)
	for _, d := range estimator.Directions {
		s := series[d]
		if len(s.T) == 0 {
			continue
		}
		dur := time.Duration(s.T[len(s.T)-1] * float64(time.Second))
		// One per probe interval, in its slot: a lost probe leaves NaN,
		// which the scoring counts as over the budget in a reaction but
		// leaves out of the percentiles.
		every := time.Second / ProbeHz
		delays := make([]float32, int(dur/every)+1)
		for i := range delays {
			delays[i] = float32(math.NaN())
		}
		bins := make([][]float64, len(s.T))
		for _, p := range probes {
			if p.Lost || p.Sent.Before(start) {
				continue
			}
			// The added delay, as the simulator counts it: beyond the
			// baseline and beyond what an empty queue would have waited
			// for the capacity to deliver a small packet at that instant
			// (in a trace's silent stretch, that is nobody's queue).
			v, at := p.Down-base[d], p.Sent.Sub(start)+p.Up
			if d == estimator.Up {
				v, at = p.Up-base[d], p.Sent.Sub(start)
			}
			empty := emptyWait(cfg.Capacity[d], at)
			added := math.Max(float64(v)/1e6-empty, 0)
			if i := int(p.Sent.Sub(start) / every); i < len(delays) {
				delays[i] = float32(added)
			}
			if i := int(p.Sent.Sub(start) / (100 * time.Millisecond)); i < len(bins) {
				bins[i] = append(bins[i], added)
			}
		}
		capBits, good := 0.0, 0.0
		for i := range s.T {
			capBits += s.Capacity[i] * 0.1
			good += s.Goodput[i] * 0.1
			mean := 0.0
			for _, v := range bins[i] {
				mean += v / float64(len(bins[i]))
			}
			s.Delay = append(s.Delay, round3(mean))
			s.Rate = append(s.Rate, round3(rates[d](time.Duration(s.T[i]*float64(time.Second)))/1e6))
		}
		r := sim.Result{Scheme: scheme.Name, Direction: d.String(), CapacityMbps: round3(capBits / dur.Seconds()),
			GoodputMbps: round3(good / dur.Seconds())}
		if capBits > 0 {
			r.Utilization = round3(good / capBits)
		}
		var rateSum float64
		for _, v := range s.Rate {
			rateSum += v
		}
		r.MeanRateMbps = round3(rateSum / float64(len(s.Rate)))
		r.RateChanges = sh.changes(d)
		r.Series = &s
		r.Bottleneck = lines[d]
		sim.ScoreDelays(&r, delays, every, cfg.Capacity[d], cfg.Budget, dur, scheme.Name != "unshaped")
		// The series' goodput is one point per 100 ms tick from the start.
		sim.ScoreRecoveries(&r, s.Goodput, 100*time.Millisecond, cfg.Capacity[d], dur, scheme.Name != "unshaped")
		r.Delay = sim.Delay{P50: round3(r.Delay.P50), P95: round3(r.Delay.P95), P99: round3(r.Delay.P99)}
		r.OverBudget = round3(r.OverBudget)
		out = append(out, r)
	}
	return out
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

// sleep waits for d, or until ctx ends or the scheme fails.
func sleep(ctx context.Context, d time.Duration, failed <-chan error) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case err := <-failed:
		return err
	case <-time.After(d):
		return nil
	}
}

// A schemeRunner is a scheme in progress on rtr.
type schemeRunner interface {
	// rates gives per direction the shaper's rate in bit/s at a time since
	// start (0 when unshaped).
	rates(start time.Time) [2]func(time.Duration) float64
	changes(d estimator.Direction) int
	// failed delivers an error when the scheme cannot go on (nil: never).
	failed() <-chan error
	stop() error
}

func startScheme(top *Topology, cfg RunConfig, s Scheme) (schemeRunner, error) {
	switch {
	case s.Name == "unshaped":
		return fixedScheme{}, nil
	case s.Fraction > 0:
		return startStatic(top, cfg, s.Fraction)
	case s.Name == "exec":
		return startExec(top, cfg, s.Command)
	case s.Name == "autorate":
		if backendOr(cfg.Backend) != actuator.CAKE {
			return nil, errors.New("the autorate scheme needs the CAKE backend (linklab run --kernel uml)")
		}
		return startExec(top, cfg, s.Command)
	default:
		return startDaemon(top, cfg, s)
	}
}

// nominal is a capacity's mean over its default duration.
func nominal(t *sim.Trace) float64 {
	if t == nil {
		return 0
	}
	return t.MeanRate(t.DefaultDuration())
}

// fixedScheme is unshaped, or static with its link.
type fixedScheme struct {
	rate [2]float64
	link *actuator.Link
}

func (f fixedScheme) rates(time.Time) [2]func(time.Duration) float64 {
	var out [2]func(time.Duration) float64
	for d := range out {
		out[d] = func(time.Duration) float64 { return f.rate[d] }
	}
	return out
}

func (fixedScheme) changes(estimator.Direction) int { return 0 }

func (fixedScheme) failed() <-chan error { return nil }

func (f fixedScheme) stop() error {
	if f.link == nil {
		return nil
	}
	defer f.link.Close()
	return f.link.Remove()
}

// startStatic shapes rtr's WAN with HTB and the line's framing at a
// fraction of each direction's nominal rate, through autoshape's own actuator.
func startStatic(top *Topology, cfg RunConfig, fraction float64) (schemeRunner, error) {
	f := fixedScheme{}
	const unlimited = 10e9
	for _, d := range estimator.Directions {
		f.rate[d] = math.Round(nominal(cfg.Capacity[d]) * fraction)
		if f.rate[d] == 0 {
			f.rate[d] = unlimited
		}
	}
	var err error
	if f.link, err = setupShaping(top, cfg, f.rate, true); err != nil {
		return nil, err
	}
	for d := range f.rate {
		if f.rate[d] == unlimited {
			f.rate[d] = 0
		}
	}
	return f, nil
}

// setupShaping shapes rtr's WAN with the run's backend and the line's
// framing, as its owner would configure it, at the given rates (by
// estimator.Direction, in bit/s), through autoshape's own actuator: the
// upload on the WAN's egress, the download on its IFB. With CAKE the
// download gets autorate-ingress, as autoshape's setup mode gives it,
// unless static: a static shaper's rate must not move.
func setupShaping(top *Topology, cfg RunConfig, rates [2]float64, static bool) (*actuator.Link, error) {
	h, err := netns.GetFromName(top.Rtr)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	framing := actuator.Framing{Overhead: cfg.Bottleneck.Overhead}
	if cfg.Bottleneck.ATM {
		framing.LinkLayer = actuator.ATM
	}
	sc := actuator.SetupConfig{Iface: RtrWAN, Backend: backendOr(cfg.Backend), NetNS: int(h),
		Down: uint64(rates[estimator.Down]), Up: uint64(rates[estimator.Up]), Framing: framing}
	if static {
		sc.Cake.AutorateIngress = new(false)
	}
	return actuator.Setup(sc)
}

// daemonBounds are each direction's bounds as the lab's daemon gets them:
// those the simulator derives from the capacity, in whole kbit/s; a
// direction without a capacity runs from 1 Mbit/s to 1 Gbit/s, resting at
// the top.
func daemonBounds(cfg RunConfig) [2]policies.Bounds {
	var out [2]policies.Bounds
	kbit := func(v float64) float64 { return math.Round(v/1000) * 1000 }
	for _, d := range estimator.Directions {
		b := policies.Bounds{Min: 1e6, Base: 1e9, Max: 1e9}
		if cfg.Capacity[d] != nil {
			b = sim.DefaultBounds(cfg.Capacity[d], cfg.Duration)
		}
		out[d] = policies.Bounds{Min: kbit(b.Min), Base: kbit(b.Base), Max: kbit(b.Max)}
	}
	return out
}

// WriteDaemonConfig writes into dir an autoshape configuration for rtr's
// WAN: HTB with the line's framing, the run's budget, the policy ("" leaves
// the daemon's default, budget), ICMP timestamps to srv's reflectors, and
// the bounds the simulator derives from the capacities; it returns its path
// and the base rates.
func WriteDaemonConfig(top *Topology, cfg RunConfig, dir, policy string) (string, [2]float64, error) {
	var bases [2]float64
	l := config.Link{
		Name: "lab", Interface: RtrWAN, Backend: backendOr(cfg.Backend), Budget: cfg.Budget,
		Policy: config.PolicyName(policy),
		// The line's framing, as its owner would configure it.
		Framing:    actuator.Framing{Overhead: cfg.Bottleneck.Overhead},
		Method:     probe.Timestamp,
		Reflectors: top.ReflectorAddrs, ActiveReflectors: Reflectors, ProbeRate: probe.DefaultPoolRate,
	}
	if cfg.Bottleneck.ATM {
		l.Framing.LinkLayer = actuator.ATM
	}
	bounds := daemonBounds(cfg)
	for _, d := range estimator.Directions {
		l.Directions[d].Bounds = bounds[d]
		bases[d] = bounds[d].Base
	}
	c := config.Config{
		StateFile: filepath.Join(dir, "state.json"), RemoveOnExit: true, LogLevel: "info",
		Decisions: filepath.Join(dir, "decisions.jsonl"), MetricsListen: "", Links: []config.Link{l},
	}
	var b strings.Builder
	if err := config.Write(&b, c); err != nil {
		return "", bases, err
	}
	// What the daemon would refuse is refused here, before a run starts.
	if _, err := config.Parse(b.String()); err != nil {
		return "", bases, fmt.Errorf("the daemon's configuration: %w", err)
	}
	conf := filepath.Join(dir, "autoshape.toml")
	return conf, bases, os.WriteFile(conf, []byte(b.String()), 0o644)
}

// backendOr is b, or HTB when empty.
func backendOr(b actuator.Backend) actuator.Backend {
	if b == "" {
		return actuator.HTB
	}
	return b
}

// daemonScheme is the autoshape daemon running in rtr.
type daemonScheme struct {
	cmd       *exec.Cmd
	dir       string
	fail      chan error // the daemon's exit before stop
	done      chan error // the daemon's exit status, once reaped
	stopping  atomic.Bool
	decisions []controller.Record
	bounds    [2]float64 // base rates, where the daemon starts
}

// startDaemon runs `autoshape run` in rtr with the given configuration, or
// one made from the capacities: HTB, the budget, the scheme's policy, srv's
// reflectors, bounds as the simulator derives them.
func startDaemon(top *Topology, cfg RunConfig, s Scheme) (schemeRunner, error) {
	if cfg.Autoshape == "" {
		return nil, errors.New("the autoshape scheme needs the autoshape binary")
	}
	dir, err := os.MkdirTemp("", "linklab-")
	if err != nil {
		return nil, err
	}
	ds := &daemonScheme{dir: dir, fail: make(chan error, 1), done: make(chan error, 1)}
	conf := s.Config
	gen, bounds, err := WriteDaemonConfig(top, cfg, dir, s.Policy)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	ds.bounds = bounds
	if conf == "" {
		conf = gen
	}
	ds.cmd = exec.Command("ip", "netns", "exec", top.Rtr, cfg.Autoshape, "run", "-c", conf)
	log, err := os.Create(filepath.Join(dir, "daemon.log"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	defer log.Close()
	ds.cmd.Stdout, ds.cmd.Stderr = log, log
	if err := ds.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	go ds.wait()
	return ds, nil
}

// wait reaps the daemon. It runs until stop, so any exit before that, even
// a clean one, fails the run: what the lab measured after it would be the
// rate it left behind, not its control.
func (ds *daemonScheme) wait() {
	err := ds.cmd.Wait()
	if !ds.stopping.Load() {
		if err == nil {
			err = errors.New("exited before the run ended")
		}
		ds.fail <- fmt.Errorf("autoshape: %v: %s", err, ds.logTail())
	}
	ds.done <- err
}

func (ds *daemonScheme) logTail() string { return fileTail(filepath.Join(ds.dir, "daemon.log")) }

func (ds *daemonScheme) failed() <-chan error { return ds.fail }

func (ds *daemonScheme) stop() error {
	defer keepOrRemove(ds.dir, "the daemon's")
	ds.stopping.Store(true)
	ds.cmd.Process.Signal(syscall.SIGTERM)
	var err error
	select {
	case err = <-ds.done:
	case <-time.After(10 * time.Second):
		ds.cmd.Process.Kill()
		err = <-ds.done
		if err == nil {
			err = errors.New("the daemon did not stop on SIGTERM")
		}
	}
	if err != nil {
		return fmt.Errorf("autoshape: %v: %s", err, ds.logTail())
	}
	return nil
}

// keepOrRemove removes a scheme's directory, or with LINKLAB_KEEP=1 keeps it
// and says where; whose names the files' owner in the message.
func keepOrRemove(dir, whose string) {
	if os.Getenv("LINKLAB_KEEP") == "" {
		os.RemoveAll(dir)
		return
	}
	fmt.Fprintf(os.Stderr, "linklab: %s files are kept in %s\n", whose, dir)
}

// fileTail is the last 2000 bytes of a scheme's log file, for an error
// message (empty when it cannot be read).
func fileTail(path string) string {
	b, _ := os.ReadFile(path)
	return tailString(string(b), 2000)
}

func tailString(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// readDecisions loads the daemon's decision file once.
func (ds *daemonScheme) readDecisions() {
	if ds.decisions != nil {
		return
	}
	ds.decisions = []controller.Record{}
	f, err := os.Open(filepath.Join(ds.dir, "decisions.jsonl"))
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var r controller.Record
		if json.Unmarshal(sc.Bytes(), &r) == nil {
			ds.decisions = append(ds.decisions, r)
		}
	}
}

func (ds *daemonScheme) rates(start time.Time) [2]func(time.Duration) float64 {
	ds.readDecisions()
	var out [2]func(time.Duration) float64
	for _, d := range estimator.Directions {
		var times []time.Duration
		var rates []float64
		for _, r := range ds.decisions {
			if r.Dir == d.String() {
				times = append(times, r.Time.Sub(start))
				rates = append(rates, r.RateKbit*1000)
			}
		}
		base := ds.bounds[d]
		out[d] = func(t time.Duration) float64 {
			i, _ := slices.BinarySearch(times, t+1)
			if i == 0 {
				return base
			}
			return rates[i-1]
		}
	}
	return out
}

func (ds *daemonScheme) changes(d estimator.Direction) int {
	ds.readDecisions()
	n := 0
	for _, r := range ds.decisions {
		if r.Dir == d.String() && r.Reason != "start" {
			n++
		}
	}
	return n
}

// EstimateError is the median absolute difference, in Mbit/s, between two
// results' CAKE capacity-estimate series (the kernel's in the lab, the
// model's in the simulator), over the 100 ms intervals both have; ok is
// false when either has none.
func EstimateError(a, b sim.Result) (mae float64, ok bool) {
	if a.Series == nil || b.Series == nil {
		return 0, false
	}
	n := min(len(a.Series.CapacityEstimate), len(b.Series.CapacityEstimate))
	if n == 0 {
		return 0, false
	}
	diffs := make([]float64, n)
	for i := range n {
		diffs[i] = math.Abs(a.Series.CapacityEstimate[i] - b.Series.CapacityEstimate[i])
	}
	slices.Sort(diffs)
	if n%2 == 1 {
		return diffs[n/2], true
	}
	return (diffs[n/2-1] + diffs[n/2]) / 2, true
}
