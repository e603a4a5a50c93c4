package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/autoshape/autoshape/actuator"
	"github.com/autoshape/autoshape/estimator"
)

// The environment of the exec scheme's command, besides linklab's own. Rates
// are whole kbit/s, as the lab's daemon gets them.
const (
	// EnvDownIface names the download shaper's interface: the IFB that
	// carries rtr's WAN ingress (ifb4wan0).
	EnvDownIface = "LINKLAB_DOWN_IFACE"
	// EnvUpIface names the upload shaper's interface: rtr's WAN (wan0).
	EnvUpIface = "LINKLAB_UP_IFACE"
	// EnvReflectors lists srv's reflector addresses, space separated.
	EnvReflectors = "LINKLAB_REFLECTORS"
	// EnvDownMin, EnvDownBase and EnvDownMax are the download's bounds in
	// kbit/s; the shaping starts at the base rate.
	EnvDownMin  = "LINKLAB_DOWN_MIN_KBIT"
	EnvDownBase = "LINKLAB_DOWN_BASE_KBIT"
	EnvDownMax  = "LINKLAB_DOWN_MAX_KBIT"
	// EnvUpMin, EnvUpBase and EnvUpMax are the upload's bounds in kbit/s.
	EnvUpMin  = "LINKLAB_UP_MIN_KBIT"
	EnvUpBase = "LINKLAB_UP_BASE_KBIT"
	EnvUpMax  = "LINKLAB_UP_MAX_KBIT"
	// EnvBudget is the run's latency budget in ms.
	EnvBudget = "LINKLAB_BUDGET_MS"
	// EnvDir is the command's working directory, the scheme's own: removed
	// after the run unless LINKLAB_KEEP=1. Its output goes to command.log
	// there.
	EnvDir = "LINKLAB_DIR"
)

// Timings of the exec scheme.
const (
	// ExecRatePoll is how often the exec scheme reads the shapers' rates.
	ExecRatePoll = 100 * time.Millisecond
	// ExecStopWait is how long the command has after SIGTERM before its
	// process group gets SIGKILL.
	ExecStopWait = 5 * time.Second
)

// execScheme is another controller, run in rtr by sh -c in a process group
// of its own, over HTB shaping that the lab set up at the daemon's base
// rates. It has no decision file: its rates are the shapers' as read from
// the kernel every ExecRatePoll.
type execScheme struct {
	cmd    *exec.Cmd
	dir    string
	link   *actuator.Link
	rates0 [2]float64    // where the shaping started
	fail   chan error    // the command's failure before stop
	exited chan struct{} // closed once the command is waited for

	stopPoll func()
	pollDone chan struct{}

	mu       sync.Mutex
	stopping bool
	// The rates read, only where they changed, by estimator.Direction.
	times  [2][]time.Time
	values [2][]float64
}

// execEnv is the command's LINKLAB_ environment.
func execEnv(top *Topology, cfg RunConfig, dir string) []string {
	var refl []string
	for _, a := range top.ReflectorAddrs {
		refl = append(refl, a.String())
	}
	b := daemonBounds(cfg)
	kbit := func(v float64) string { return fmt.Sprintf("%.0f", v/1000) }
	down, up := b[estimator.Down], b[estimator.Up]
	return []string{
		EnvDownIface + "=" + actuator.DefaultIFB(RtrWAN),
		EnvUpIface + "=" + RtrWAN,
		EnvReflectors + "=" + strings.Join(refl, " "),
		EnvDownMin + "=" + kbit(down.Min), EnvDownBase + "=" + kbit(down.Base), EnvDownMax + "=" + kbit(down.Max),
		EnvUpMin + "=" + kbit(up.Min), EnvUpBase + "=" + kbit(up.Base), EnvUpMax + "=" + kbit(up.Max),
		EnvBudget + "=" + fmt.Sprintf("%g", float64(cfg.Budget)/float64(time.Millisecond)),
		EnvDir + "=" + dir,
	}
}

// startExec sets shaping up as the static scheme does, at the base rates the
// daemon would start from, and runs `sh -c command` in rtr with the
// environment that names the shapers, the reflectors, the bounds and the
// budget.
func startExec(top *Topology, cfg RunConfig, command string) (_ schemeRunner, err error) {
	es := &execScheme{fail: make(chan error, 1), exited: make(chan struct{}), pollDone: make(chan struct{})}
	bounds := daemonBounds(cfg)
	for _, d := range estimator.Directions {
		es.rates0[d] = bounds[d].Base
	}
	if es.link, err = setupShaping(top, cfg, es.rates0, false); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			es.link.Remove()
		}
	}()
	reader, err := openShaperReader(top.Rtr)
	if err != nil {
		return nil, err
	}
	if es.dir, err = os.MkdirTemp("", "linklab-exec-"); err != nil {
		reader.close()
		return nil, err
	}
	log, err := os.Create(filepath.Join(es.dir, "command.log"))
	if err != nil {
		reader.close()
		os.RemoveAll(es.dir)
		return nil, err
	}
	defer log.Close()
	// `ip netns exec` execs sh in place, so sh leads the process group and
	// everything it starts is in it.
	es.cmd = exec.Command("ip", "netns", "exec", top.Rtr, "sh", "-c", command)
	es.cmd.Env = append(os.Environ(), execEnv(top, cfg, es.dir)...)
	es.cmd.Dir = es.dir
	es.cmd.Stdout, es.cmd.Stderr = log, log
	es.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := es.cmd.Start(); err != nil {
		reader.close()
		os.RemoveAll(es.dir)
		return nil, fmt.Errorf("exec: %w", err)
	}
	go es.wait()
	ctx, cancel := context.WithCancel(context.Background())
	es.stopPoll = cancel
	go es.poll(ctx, reader)
	return es, nil
}

// wait reaps the command; an error before stop fails the run.
func (es *execScheme) wait() {
	err := es.cmd.Wait()
	es.mu.Lock()
	stopping := es.stopping
	es.mu.Unlock()
	if err != nil && !stopping {
		es.fail <- fmt.Errorf("exec: the command failed: %v: %s", err, es.logTail())
	}
	close(es.exited)
}

func (es *execScheme) logTail() string { return fileTail(filepath.Join(es.dir, "command.log")) }

// poll reads both shapers' rates every ExecRatePoll until ctx ends, keeping
// those that changed. A read that fails (the command may be rebuilding the
// shaping) is skipped.
func (es *execScheme) poll(ctx context.Context, reader *shaperReader) {
	defer close(es.pollDone)
	defer reader.close()
	devs := [2]string{estimator.Down: actuator.DefaultIFB(RtrWAN), estimator.Up: RtrWAN}
	tick := time.NewTicker(ExecRatePoll)
	defer tick.Stop()
	for now := time.Now(); ; {
		for _, d := range estimator.Directions {
			bps, err := reader.rate(devs[d])
			if err != nil {
				continue
			}
			es.mu.Lock()
			if n := len(es.values[d]); n == 0 || es.values[d][n-1] != float64(bps) {
				es.times[d] = append(es.times[d], now)
				es.values[d] = append(es.values[d], float64(bps))
			}
			es.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case now = <-tick.C:
		}
	}
}

// rates are the rates read, held from one reading to the next; before the
// first, the rates the shaping started at.
func (es *execScheme) rates(start time.Time) [2]func(time.Duration) float64 {
	es.mu.Lock()
	defer es.mu.Unlock()
	var out [2]func(time.Duration) float64
	for _, d := range estimator.Directions {
		var times []time.Duration
		for _, t := range es.times[d] {
			times = append(times, t.Sub(start))
		}
		values := slices.Clone(es.values[d])
		base := es.rates0[d]
		out[d] = func(t time.Duration) float64 {
			i, _ := slices.BinarySearch(times, t+1)
			if i == 0 {
				return base
			}
			return values[i-1]
		}
	}
	return out
}

// changes counts the rate changes seen between readings (several within one
// ExecRatePoll count as one).
func (es *execScheme) changes(d estimator.Direction) int {
	es.mu.Lock()
	defer es.mu.Unlock()
	n := len(es.values[d]) - 1
	if n > 0 && es.values[d][0] != es.rates0[d] {
		n++ // the first reading already differed from the start
	}
	return max(n, 0)
}

func (es *execScheme) failed() <-chan error { return es.fail }

// stop ends the command's process group (SIGTERM, SIGKILL after
// ExecStopWait), stops reading the rates and removes the shaping.
func (es *execScheme) stop() error {
	defer keepOrRemove(es.dir, "the exec command's")
	es.mu.Lock()
	es.stopping = true
	es.mu.Unlock()
	var errs []error
	pgid := es.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	if !es.groupGone(pgid, ExecStopWait) {
		fmt.Fprintf(os.Stderr, "linklab: exec: the command did not stop within %v of SIGTERM: killing it\n", ExecStopWait)
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		if !es.groupGone(pgid, ExecStopWait) {
			errs = append(errs, fmt.Errorf("exec: the command's process group %d outlived SIGKILL", pgid))
		}
	}
	es.stopPoll()
	<-es.pollDone
	if err := es.link.Remove(); err != nil {
		errs = append(errs, fmt.Errorf("exec: removing the shaping: %w", err))
	}
	return errors.Join(errs...)
}

// groupGone waits up to d for the command to be reaped and its process group
// to be empty.
func (es *execScheme) groupGone(pgid int, d time.Duration) bool {
	deadline := time.After(d)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-es.exited:
			// Children the command left in its group are not ours to
			// reap: wait for the kernel to say none is left.
			if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
				return true
			}
		default:
		}
		select {
		case <-deadline:
			return false
		case <-tick.C:
		}
	}
}
