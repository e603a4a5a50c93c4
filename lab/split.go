package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/autoshape/autoshape/estimator"
	"github.com/autoshape/autoshape/lab/uml"
	"github.com/autoshape/autoshape/sim"
)

// A split lab runs its router half inside the User-mode Linux kernel (which
// has CAKE and netem) and its ends on the host:
//
//	host: cli ── wire ──┐            ┌── wire ── srv
//	kernel:             rtr ── isp ──┘
//
// The host keeps cli and srv, and with them everything that costs CPU per
// byte: the load's senders and receivers, the reflectors and the
// independent probe. The kernel holds rtr (the scheme, its shapers) and isp
// (the bottlenecks and the path's base round trip), and forwards the
// packets between the two over raw sockets on the host's wire namespace
// (uml.Config.Interfaces). Inside, every system call of a process traps to
// the host, and with the load and the probes in there its one CPU was
// saturated: the delay figures were the CPU's, not the queues'
// (docs/sim-vs-lab.md). Forwarding is the kernel's own work and traps
// nothing.
//
// The two halves share a directory (mounted inside at the same path) and
// talk through files in it: the router half writes routerReady when its
// scheme runs, the host writes routerStart when the load runs and
// routerStop at the end, and the router half answers with routerResult.

// Interfaces of the wire namespace (the kernel's vec0 and vec1).
const (
	WireCli = "vcli" // towards cli's lan0; rtr's lan1 inside
	WireSrv = "vsrv" // towards srv's net0; isp's up0 inside
)

// Files of a split run's shared directory.
const (
	routerReady  = "router-ready"
	routerStart  = "router-start"
	routerStop   = "router-stop"
	routerResult = "router-result.json"
)

// BuildHosts creates a split lab's host half under prefix: cli, srv and the
// wire namespace whose two interfaces the kernel takes. Addresses and
// routes are the lab's; rtr's and isp's are the kernel's (BuildRouter).
func BuildHosts(prefix string) (*Topology, error) {
	return build(prefix, func(t *Topology) error {
		t.Wire = prefix + "wire"
		for _, ns := range []string{t.Cli, t.Srv, t.Wire} {
			if err := addNS(ns); err != nil {
				return err
			}
		}
		steps := [][]string{
			{"-n", t.Cli, "link", "add", CliLAN, "type", "veth", "peer", "name", WireCli, "netns", t.Wire},
			{"-n", t.Srv, "link", "add", SrvNet, "type", "veth", "peer", "name", WireSrv, "netns", t.Wire},
			{"-n", t.Cli, "addr", "add", "10.91.1.2/24", "dev", CliLAN},
			{"-n", t.Srv, "addr", "add", "10.91.3.2/24", "dev", SrvNet},
		}
		steps = append(steps, t.reflectorSteps()...)
		steps = append(steps, upSteps([][2]string{{t.Cli, CliLAN}, {t.Srv, SrvNet}, {t.Wire, WireCli}, {t.Wire, WireSrv}})...)
		steps = append(steps,
			[]string{"-n", t.Cli, "route", "add", "default", "via", "10.91.1.1"},
			[]string{"-n", t.Srv, "route", "add", "default", "via", "10.91.3.1"},
		)
		return ipSteps(steps)
	})
}

// BuildRouter creates a split lab's router half inside the kernel: rtr and
// isp, joined by their veth, with the kernel's vec0 as rtr's lan1 and vec1
// as isp's up0, and a base round trip of rtt (netem, half each way, on
// isp's two ingresses, where the path's delay meets the bottlenecks: a
// fixed delay ahead of a queue delays each packet as one behind it does).
func BuildRouter(prefix string, rtt time.Duration) (*Topology, error) {
	return build(prefix, func(t *Topology) error {
		for _, ns := range []string{t.Rtr, t.ISP} {
			if err := addNS(ns); err != nil {
				return err
			}
		}
		steps := [][]string{
			{"link", "set", "dev", "vec0", "netns", t.Rtr},
			{"-n", t.Rtr, "link", "set", "dev", "vec0", "name", RtrLAN},
			{"link", "set", "dev", "vec1", "netns", t.ISP},
			{"-n", t.ISP, "link", "set", "dev", "vec1", "name", ISPUp},
			{"-n", t.Rtr, "link", "add", RtrWAN, "type", "veth", "peer", "name", ISPDown, "netns", t.ISP},
			{"-n", t.Rtr, "addr", "add", "10.91.1.1/24", "dev", RtrLAN},
			{"-n", t.Rtr, "addr", "add", "10.91.2.1/24", "dev", RtrWAN},
			{"-n", t.ISP, "addr", "add", "10.91.2.2/24", "dev", ISPDown},
			{"-n", t.ISP, "addr", "add", "10.91.3.1/24", "dev", ISPUp},
		}
		steps = append(steps, upSteps([][2]string{{t.Rtr, RtrLAN}, {t.Rtr, RtrWAN}, {t.ISP, ISPDown}, {t.ISP, ISPUp}})...)
		steps = append(steps,
			[]string{"-n", t.Rtr, "route", "add", "default", "via", "10.91.2.2"},
			[]string{"-n", t.ISP, "route", "add", "10.91.1.0/24", "via", "10.91.2.1"},
			[]string{"-n", t.ISP, "route", "add", "10.91.4.0/24", "via", "10.91.3.2"},
		)
		if err := ipSteps(steps); err != nil {
			return err
		}
		if err := t.forward(); err != nil {
			return err
		}
		if rtt <= 0 {
			return nil
		}
		half := fmt.Sprintf("%dus", (rtt / 2).Microseconds())
		if err := ingressDelay(t.ISP, ISPUp, "dly0", half); err != nil {
			return err
		}
		return ingressDelay(t.ISP, ISPDown, "dly1", half)
	})
}

// GuestCommand is how a split run starts its router half: the command to run
// inside the kernel (a linklab router that calls ServeRouter with the run's
// configuration and scheme and the directory it is given as its last
// argument), its environment, and where the kernel's console and the
// command's standard error go.
type GuestCommand struct {
	Argv   []string
	Env    []string
	Stderr io.Writer
}

// RunSplit is Run on a split lab: top is the host half (BuildHosts), and
// the router half runs in a kernel booted for this run with guest. The
// load, the probe and the scoring are Run's.
func RunSplit(ctx context.Context, top *Topology, cfg RunConfig, scheme Scheme, guest GuestCommand) ([]sim.Result, error) {
	return runOn(ctx, top, cfg, scheme, func(RunConfig) (router, error) { return startGuest(ctx, top, guest) })
}

// routerOutcome is what the router half hands back: the scheme's rates
// every rateStep from the start, its rate changes, CAKE's estimate, and
// why it failed.
type routerOutcome struct {
	Error    string        `json:"error,omitempty"`
	RateStep time.Duration `json:"rate_step_ns"`
	Rates    [2][]float64  `json:"rates_bps"`
	Changes  [2]int        `json:"changes"`
	Estimate stepSeries    `json:"estimate"`
	// Delivery is what each direction's line sent while it held a queue.
	Delivery [2]*sim.Delivery `json:"delivery"`
	// Busy is the share of the loaded time the kernel's one CPU was busy
	// (from /proc/stat; -1 when unread): near 1, its scheduling delays
	// join the queues' in every figure.
	Busy float64 `json:"busy"`
}

// outcomeRateStep is the grain of the rates the router half hands back.
const outcomeRateStep = 10 * time.Millisecond

// ServeRouter is the router half of a split run, inside the kernel: it
// builds rtr and isp (BuildRouter, with cfg.RTT), starts the bottlenecks
// and the scheme, and answers the host through dir until the host stops
// it. It returns the run's error, which it has also written to the host.
func ServeRouter(ctx context.Context, prefix string, cfg RunConfig, scheme Scheme, dir string) (err error) {
	var out routerOutcome
	defer func() {
		if err != nil {
			out.Error = err.Error()
		}
		b, jerr := json.Marshal(out)
		if jerr == nil {
			jerr = writeAtomic(filepath.Join(dir, routerResult), b)
		}
		if err == nil {
			err = jerr
		}
	}()
	cfg = cfg.withDefaults()
	top, err := BuildRouter(prefix, cfg.RTT)
	if err != nil {
		return err
	}
	defer top.Close()
	rt, err := startLocal(top, cfg, scheme)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := rt.close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	if err := writeAtomic(filepath.Join(dir, routerReady), nil); err != nil {
		return err
	}
	if err := awaitFile(ctx, filepath.Join(dir, routerStart), 2*time.Millisecond, rt.failed()); err != nil {
		return err
	}
	start := time.Now()
	busy0, idle0, cpuErr := cpuTimes()
	if err := rt.begin(ctx, start); err != nil {
		return err
	}
	if err := awaitFile(ctx, filepath.Join(dir, routerStop), 20*time.Millisecond, rt.failed()); err != nil {
		return err
	}
	out.Busy = -1
	if busy1, idle1, err := cpuTimes(); err == nil && cpuErr == nil && busy1+idle1 > busy0+idle0 {
		out.Busy = float64(busy1-busy0) / float64(busy1-busy0+idle1-idle0)
	}
	sh, est, err := rt.end()
	if err != nil {
		return err
	}
	rates := sh.rates(start)
	out.RateStep, out.Estimate, out.Delivery = outcomeRateStep, est, rt.delivery()
	n := int((cfg.Duration+time.Second)/outcomeRateStep) + 1
	for _, d := range estimator.Directions {
		out.Changes[d] = sh.changes(d)
		for i := range n {
			out.Rates[d] = append(out.Rates[d], rates[d](time.Duration(i)*outcomeRateStep))
		}
	}
	return nil
}

// cpuTimes reads the busy and idle times of all CPUs from /proc/stat, in
// its ticks (idle and iowait idle, the rest busy).
func cpuTimes() (busy, idle uint64, err error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return parseCPULine(line)
}

// parseCPULine reads /proc/stat's first line.
func parseCPULine(line string) (busy, idle uint64, err error) {
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	for i, v := range f[1:] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/stat: %q: %w", line, err)
		}
		if i == 3 || i == 4 { // idle, iowait
			idle += n
		} else {
			busy += n
		}
	}
	return busy, idle, nil
}

// writeAtomic writes a file whole or not at all, for the other half to
// read.
func writeAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// awaitFile polls for path every poll until it exists, ctx ends or failed
// delivers.
func awaitFile(ctx context.Context, path string, poll time.Duration, failed <-chan error) error {
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-failed:
			return err
		case <-tick.C:
		}
	}
}

// guestRouter is the host's side of a router half in the kernel.
type guestRouter struct {
	dir    string
	cancel context.CancelFunc
	done   chan error // the kernel's end: uml.Run's error or the command's
	fail   chan error // the same, when it ends before routerStop
	out    routerOutcome
	stderr io.Writer
}

// guestReadyWait is how long the router half may take to boot and start
// its scheme.
const guestReadyWait = 2 * time.Minute

// startGuest boots the kernel on top's wire namespace with the router half
// and waits until its scheme runs.
func startGuest(ctx context.Context, top *Topology, guest GuestCommand) (*guestRouter, error) {
	dir, err := os.MkdirTemp("", "linklab-split-")
	if err != nil {
		return nil, err
	}
	kctx, cancel := context.WithCancel(ctx)
	g := &guestRouter{dir: dir, cancel: cancel, done: make(chan error, 1), fail: make(chan error, 1), stderr: guest.Stderr}
	env := slices.Clone(guest.Env)
	if os.Getenv("LINKLAB_KEEP") != "" {
		// The scheme's directories, kept, outlive the kernel.
		os.Mkdir(filepath.Join(dir, "tmp"), 0o755)
		env = append(env, "TMPDIR="+filepath.Join(dir, "tmp"))
	}
	argv := append(slices.Clone(guest.Argv), dir)
	cfg := uml.Config{Modules: uml.LabModules, Mem: "1G", Dir: dir, Env: env, NetNS: top.Wire,
		Interfaces: []string{WireCli, WireSrv}, Stderr: guest.Stderr}
	go func() {
		code, err := uml.Run(kctx, cfg, argv...)
		if err == nil && code != 0 {
			err = fmt.Errorf("the router half exited with status %d", code)
		}
		g.done <- err
	}()
	go func() {
		// Until routerStop, the kernel's end is a failure.
		err := <-g.done
		if o, rerr := g.readOutcome(); rerr == nil && o.Error != "" {
			err = fmt.Errorf("router half: %s", o.Error)
		} else if err == nil {
			err = errors.New("the router half ended before the run did")
		}
		g.fail <- err
	}()
	rctx, rcancel := context.WithTimeout(ctx, guestReadyWait)
	defer rcancel()
	if err := awaitFile(rctx, filepath.Join(dir, routerReady), 20*time.Millisecond, g.fail); err != nil {
		g.close()
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("the router half was not ready within %v", guestReadyWait)
		}
		return nil, err
	}
	return g, nil
}

func (g *guestRouter) readOutcome() (routerOutcome, error) {
	var o routerOutcome
	b, err := os.ReadFile(filepath.Join(g.dir, routerResult))
	if err != nil {
		return o, err
	}
	return o, json.Unmarshal(b, &o)
}

func (g *guestRouter) failed() <-chan error { return g.fail }

func (g *guestRouter) begin(context.Context, time.Time) error {
	return writeAtomic(filepath.Join(g.dir, routerStart), nil)
}

// guestStopWait is how long the router half may take to stop its scheme
// and answer.
const guestStopWait = time.Minute

// end stops the router half and reads what it handed back.
func (g *guestRouter) end() (schemeRunner, stepSeries, error) {
	if err := writeAtomic(filepath.Join(g.dir, routerStop), nil); err != nil {
		return nil, stepSeries{}, err
	}
	select {
	case err := <-g.fail:
		o, rerr := g.readOutcome()
		if rerr != nil {
			return nil, stepSeries{}, fmt.Errorf("the router half left no outcome (%v): %w", rerr, err)
		}
		if o.Error != "" {
			return nil, stepSeries{}, fmt.Errorf("router half: %s", o.Error)
		}
		g.out = o
		if o.Busy >= 0 && g.stderr != nil {
			fmt.Fprintf(g.stderr, "linklab: the kernel's CPU was %.0f %% busy over the loaded time\n", 100*o.Busy)
		}
		return guestScheme{g}, o.Estimate, nil
	case <-time.After(guestStopWait):
		return nil, stepSeries{}, fmt.Errorf("the router half did not stop within %v", guestStopWait)
	}
}

func (g *guestRouter) delivery() [2]*sim.Delivery { return g.out.Delivery }

func (g *guestRouter) close() error {
	g.cancel()
	keepOrRemove(g.dir, "the split run's")
	return nil
}

// guestScheme is the scheme's rates and changes as the router half handed
// them back.
type guestScheme struct{ g *guestRouter }

func (s guestScheme) rates(time.Time) [2]func(time.Duration) float64 {
	var out [2]func(time.Duration) float64
	o := s.g.out
	for _, d := range estimator.Directions {
		r := o.Rates[d]
		out[d] = func(t time.Duration) float64 {
			if len(r) == 0 || o.RateStep <= 0 {
				return 0
			}
			return r[min(max(int(t/o.RateStep), 0), len(r)-1)]
		}
	}
	return out
}

func (s guestScheme) changes(d estimator.Direction) int { return s.g.out.Changes[d] }
func (guestScheme) failed() <-chan error                { return nil }
func (guestScheme) stop() error                         { return nil }
