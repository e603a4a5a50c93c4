package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/autoshape/autoshape/actuator"
	"github.com/autoshape/autoshape/config"
	"github.com/autoshape/autoshape/controller"
	"github.com/autoshape/autoshape/daemon"
	"github.com/autoshape/autoshape/estimator"
	"github.com/autoshape/autoshape/policies"
	"github.com/autoshape/autoshape/probe"
	"github.com/autoshape/autoshape/probe/probetest"
)

// The controller's defaults that the tests' expectations follow.
const (
	stallAfter    = time.Second
	fallbackAfter = 5 * time.Second
)

// testLink is a link on iface: download 1–20 Mbit/s from a base of 10,
// upload 1–5 from a base of 2.
func testLink(iface string) config.Link {
	var reflectors []netip.Addr
	for _, a := range []string{"192.0.2.1", "192.0.2.2", "192.0.2.3", "192.0.2.4"} {
		reflectors = append(reflectors, netip.MustParseAddr(a))
	}
	return config.Link{
		Name: iface, Interface: iface, IFB: "ifb4" + iface, Backend: actuator.CAKE,
		Budget: 15 * time.Millisecond, Policy: config.PolicyBudget,
		Directions: [2]controller.DirectionConfig{
			estimator.Down: {Bounds: policies.Bounds{Min: 1e6, Base: 10e6, Max: 20e6}},
			estimator.Up:   {Bounds: policies.Bounds{Min: 1e6, Base: 2e6, Max: 5e6}},
		},
		Method: probe.Echo, Reflectors: reflectors,
	}
}

// A testDaemon is a Daemon on a fake clock, kernel and reflectors, run
// inside a synctest bubble.
type testDaemon struct {
	t       *testing.T
	clock   *probetest.FakeClock
	kernel  *fakeKernel
	targets *fakeTargets
	path    string // the configuration file
	state   string // the state file
	logs    *observer.ObservedLogs
	reload  chan os.Signal
	cancel  context.CancelFunc
	done    chan error

	stopOnce sync.Once
	err      error // what Run returned
}

// A setup is what a testDaemon starts with.
type setup struct {
	links  []config.Link
	tick   time.Duration // the control interval, 0 for the default
	remove bool          // on_exit = "remove"
	silent bool          // the reflectors never answer
	saved  string        // the state file's text, "" for none
}

// startDaemon writes the configuration of s and starts a daemon on it.
func startDaemon(t *testing.T, s setup) *testDaemon {
	t.Helper()
	dir := t.TempDir()
	clock := probetest.NewFakeClock(t0, synctest.Wait)
	td := &testDaemon{
		t: t, clock: clock, kernel: &fakeKernel{clock: clock}, targets: &fakeTargets{clock: clock},
		path: filepath.Join(dir, "autoshape.toml"), state: filepath.Join(dir, "state", "state.json"),
		reload: make(chan os.Signal, 1), done: make(chan error, 1),
	}
	td.targets.answering.Store(!s.silent)
	if s.saved != "" {
		if err := os.MkdirAll(filepath.Dir(td.state), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(td.state, []byte(s.saved), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	td.writeConfig(config.Config{StateFile: td.state, RemoveOnExit: s.remove, LogLevel: "info", Links: s.links})
	cfg, err := config.Load(td.path)
	if err != nil {
		t.Fatalf("config.Load() failed: %v", err)
	}
	core, logs := observer.New(zap.InfoLevel)
	td.logs = logs
	d := daemon.New(daemon.Options{
		ConfigPath: td.path, Logger: zap.New(core), Version: "test", Tick: s.tick,
		Clock: clock, Kernel: td.kernel, Targets: td.targets.Factory,
	})
	ctx, cancel := context.WithCancel(context.Background())
	td.cancel = cancel
	go func() { td.done <- d.Run(ctx, cfg, td.reload) }()
	// A test that fails early leaves no goroutine behind in the bubble.
	t.Cleanup(func() { td.Stop() })
	synctest.Wait()
	return td
}

// writeConfig writes cfg to the configuration file, as the tests' files
// are written: without a metrics server or decision file.
func (td *testDaemon) writeConfig(cfg config.Config) {
	td.t.Helper()
	f, err := os.Create(td.path)
	if err != nil {
		td.t.Fatal(err)
	}
	defer f.Close()
	if err := config.Write(f, cfg); err != nil {
		td.t.Fatal(err)
	}
}

// Reload sends the reload signal and lets the daemon act on it.
func (td *testDaemon) Reload() {
	td.reload <- syscall.SIGHUP
	synctest.Wait()
}

// Stop cancels the daemon and returns what Run returned.
func (td *testDaemon) Stop() error {
	td.cancel()
	td.stopOnce.Do(func() { td.err = <-td.done })
	return td.err
}

// Shaping returns the one shaping set up on iface.
func (td *testDaemon) Shaping(iface string) *fakeShaping {
	td.t.Helper()
	s := td.kernel.Shapings(iface)
	if len(s) != 1 {
		td.t.Fatalf("%s was set up %d times, want once", iface, len(s))
	}
	return s[0]
}

// Logged reports whether a line with msg was logged.
func (td *testDaemon) Logged(msg string) bool {
	return td.logs.FilterMessage(msg).Len() > 0
}

// TestLoopTicksAtConfiguredTick: the loop reads the shapers' counters once
// per control interval, the controller's default or the one configured.
func TestLoopTicksAtConfiguredTick(t *testing.T) {
	for _, tt := range []struct {
		name string
		tick time.Duration
		want int
	}{
		{"default", 0, int(2 * time.Second / controller.DefaultTick)},
		{"200ms", 200 * time.Millisecond, 10},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				td := startDaemon(t, setup{links: []config.Link{testLink("wan")}, tick: tt.tick})
				td.clock.Advance(2 * time.Second)
				down := td.Shaping("wan").shapers[estimator.Down]
				if got := down.StatsCalls(); got != tt.want {
					t.Errorf("%d ticks in 2s, want %d", got, tt.want)
				}
				if err := td.Stop(); err != nil {
					t.Errorf("Run() = %v, want nil", err)
				}
			})
		})
	}
}

// TestIdleTickSlows: an idle link ticks at controller.IdleTick, and at the
// configured tick again as soon as load comes back; entering and leaving
// idle is logged once each, with the time spent in the state left.
func TestIdleTickSlows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		td := startDaemon(t, setup{links: []config.Link{testLink("wan")}})
		s := td.Shaping("wan")
		down := s.shapers[estimator.Down]
		ticks := func(d time.Duration) int {
			before := down.StatsCalls()
			td.clock.Advance(d)
			return down.StatsCalls() - before
		}
		for _, sh := range s.shapers {
			sh.quiet.Store(true)
		}
		td.clock.Advance(12 * time.Second) // idle after 10 s without load
		if got, want := ticks(5*time.Second), int(5*time.Second/controller.IdleTick); got != want {
			t.Errorf("%d ticks in 5s idle, want %d (one every %v)", got, want, controller.IdleTick)
		}
		for _, sh := range s.shapers {
			sh.quiet.Store(false)
		}
		// One slow tick sees the load; from the next the tick is fast.
		td.clock.Advance(controller.IdleTick)
		if got, want := ticks(time.Second), int(time.Second/controller.DefaultTick); got != want {
			t.Errorf("%d ticks in the second after load came back, want %d (one every %v)", got, want, controller.DefaultTick)
		}
		var got []string
		for _, e := range td.logs.FilterMessage("state changed").All() {
			f := e.ContextMap()
			got = append(got, fmt.Sprintf("%v from %v", f["state"], f["from"]))
			if s, ok := f["from_s"].(float64); !ok || s <= 0 {
				t.Errorf("%q logged from_s %v, want the seconds spent in %v", e.Message, f["from_s"], f["from"])
			}
		}
		if diff := cmp.Diff([]string{"idle from active", "active from idle"}, got); diff != "" {
			t.Errorf("state lines (-want +got):\n%s", diff)
		}
		if err := td.Stop(); err != nil {
			t.Errorf("Run() = %v, want nil", err)
		}
	})
}

// TestStall: reflectors that stop answering never let a rate rise; the
// rates fall back to the safe rate (here base) FallbackAfter into the stall.
func TestStall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Start above base, from a saved state, so that the fallback shows.
		td := startDaemon(t, setup{links: []config.Link{testLink("wan")}, silent: true,
			saved: `{"version": 1, "links": {"wan": {"down_kbit": 15000, "up_kbit": 4000}}}`})
		td.clock.Advance(10 * time.Second)
		s := td.Shaping("wan")
		for _, c := range []struct {
			dir        estimator.Direction
			start, low float64
		}{{estimator.Down, 15000, 10000}, {estimator.Up, 4000, 2000}} {
			w := s.shapers[c.dir].Writes()
			if len(w) == 0 || w[0].Kbit <= c.low {
				t.Fatalf("%s: writes %+v, want a start from near the saved %v kbit/s", c.dir, w, c.start)
			}
			for _, x := range w {
				if x.Kbit > c.start {
					t.Errorf("%s: rose to %v kbit/s at %v without an answer", c.dir, x.Kbit, x.At)
				}
				if x.Kbit == c.low && x.At < stallAfter+fallbackAfter {
					t.Errorf("%s: fell to %v kbit/s at %v, before the fallback", c.dir, x.Kbit, x.At)
				}
			}
			if got := s.shapers[c.dir].Rate(); got != c.low {
				t.Errorf("%s: %v kbit/s after 10s of stall, want the safe rate %v", c.dir, got, c.low)
			}
		}
		if err := td.Stop(); err != nil {
			t.Errorf("Run() = %v, want nil", err)
		}
	})
}

// TestReload: a reload restarts a changed link from the rates it reached,
// keeps an unchanged one running, and refuses a bad file, keeping the
// running configuration.
func TestReload(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		wan, lte := testLink("wan"), testLink("lte")
		td := startDaemon(t, setup{links: []config.Link{wan, lte}})
		td.clock.Advance(5 * time.Second)
		reached := td.Shaping("lte").shapers[estimator.Down].Rate()
		if reached <= 10000 {
			t.Fatalf("lte's download at %v kbit/s after 5s of answers, want it above its base for the test to mean something", reached)
		}

		lte.Budget = 20 * time.Millisecond
		td.writeConfig(config.Config{StateFile: td.state, LogLevel: "info", Links: []config.Link{wan, lte}})
		td.Reload()
		td.clock.Advance(time.Second)
		if s := td.Shaping("wan"); len(s.shapers[estimator.Down].Writes()) == 0 {
			t.Errorf("wan was not running")
		} else if _, closed := s.Ended(); closed {
			t.Errorf("the unchanged wan was stopped by the reload")
		}
		runs := td.kernel.Shapings("lte")
		if len(runs) != 2 {
			t.Fatalf("the changed lte was set up %d times, want twice", len(runs))
		}
		if _, closed := runs[0].Ended(); !closed || runs[0].shapers[estimator.Down].Rate() != 10000 {
			t.Errorf("lte's first run was not left at base: closed %v, %v kbit/s", closed, runs[0].shapers[estimator.Down].Rate())
		}
		w := runs[1].shapers[estimator.Down].Writes()
		if len(w) == 0 || w[0].Kbit < 0.98*reached {
			t.Errorf("lte restarted with writes %+v, want a start from the %v kbit/s it had reached", w, reached)
		}

		if err := os.WriteFile(td.path, []byte("[[link]]\nthis is not toml"), 0o644); err != nil {
			t.Fatal(err)
		}
		ticks := td.Shaping("wan").shapers[estimator.Down].StatsCalls()
		td.Reload()
		td.clock.Advance(time.Second)
		if !td.Logged("reload refused: keeping the running configuration") {
			t.Errorf("a bad file was not refused")
		}
		if n := len(td.kernel.Shapings("lte")); n != 2 {
			t.Errorf("after a refused reload lte was set up %d times, want still twice", n)
		}
		if got := td.Shaping("wan").shapers[estimator.Down].StatsCalls(); got <= ticks {
			t.Errorf("wan stopped ticking after a refused reload")
		}
		if err := td.Stop(); err != nil {
			t.Errorf("Run() = %v, want nil", err)
		}
	})
}

// TestReattach: when the check finds the shaping made again behind the
// daemon's back, the controller is reattached and the next tick writes its
// rate again, though the controller's rate did not change.
func TestReattach(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Stalled at base, the controller writes nothing after its start.
		td := startDaemon(t, setup{links: []config.Link{testLink("wan")}, silent: true})
		td.clock.Advance(2500 * time.Millisecond)
		s := td.Shaping("wan")
		down := s.shapers[estimator.Down]
		before := len(down.Writes())
		s.Rebuild()
		td.clock.Advance(600 * time.Millisecond) // past the check at 3s and a tick
		if !td.Logged("the shaping changed behind autoshape's back") {
			t.Errorf("the rebuild was not logged")
		}
		w := down.Writes()
		if len(w) != before+1 {
			t.Fatalf("writes %+v: want exactly one more after the rebuild", w)
		}
		if last := w[len(w)-1]; last.At < 3*time.Second || last.At > 3*time.Second+controller.DefaultTick || down.Rate() != 10000 {
			t.Errorf("after the rebuild wrote %+v and holds %v kbit/s: want the base rate again at the first tick after the check at 3s", last, down.Rate())
		}
		if err := td.Stop(); err != nil {
			t.Errorf("Run() = %v, want nil", err)
		}
	})
}

// TestShutdown: on cancellation the shapers are left at base (or the
// shaping removed, with on_exit = "remove") and the state file holds the
// rates reached, written atomically.
func TestShutdown(t *testing.T) {
	for _, remove := range []bool{false, true} {
		t.Run(map[bool]string{false: "base", true: "remove"}[remove], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				td := startDaemon(t, setup{links: []config.Link{testLink("wan")}, remove: remove})
				td.clock.Advance(5 * time.Second)
				s := td.Shaping("wan")
				var reached [2]float64
				for d, sh := range s.shapers {
					reached[d] = sh.Rate()
				}
				if err := td.Stop(); err != nil {
					t.Errorf("Run() = %v, want nil", err)
				}
				removed, closed := s.Ended()
				if removed != remove || closed == remove {
					t.Errorf("removed %v, closed %v; want removed %v", removed, closed, remove)
				}
				want := reached
				if !remove {
					want = [2]float64{estimator.Down: 10000, estimator.Up: 2000}
				}
				for d, sh := range s.shapers {
					if got := sh.Rate(); got != want[d] {
						t.Errorf("%s: the shaper holds %v kbit/s after the exit, want %v", estimator.Direction(d), got, want[d])
					}
				}

				b, err := os.ReadFile(td.state)
				var st struct {
					Links map[string]struct {
						DownKbit float64 `json:"down_kbit"`
						UpKbit   float64 `json:"up_kbit"`
					} `json:"links"`
				}
				if err != nil || json.Unmarshal(b, &st) != nil {
					t.Fatalf("state file: %v\n%s", err, b)
				}
				if got := st.Links["wan"]; got.DownKbit != reached[estimator.Down] || got.UpKbit != reached[estimator.Up] {
					t.Errorf("state file holds %+v, want the rates reached, %v", got, reached)
				}
				entries, _ := os.ReadDir(filepath.Dir(td.state))
				if len(entries) != 1 {
					t.Errorf("the state directory holds %d files, want only the state file", len(entries))
				}
			})
		})
	}
}

// TestCheckCadence: an active link's shaping is checked every
// activeCheckEvery (its counter reads, every tick, fail by themselves when
// a root goes), and a tick whose counter read fails brings the check
// forward to the next tick.
func TestCheckCadence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		td := startDaemon(t, setup{links: []config.Link{testLink("wan")}})
		s := td.Shaping("wan")
		td.clock.Advance(10 * time.Second)
		checks := s.Checks()
		var gaps []time.Duration
		for i := 1; i < len(checks); i++ {
			if checks[i] > 4*time.Second {
				gaps = append(gaps, checks[i]-checks[i-1])
			}
		}
		if len(gaps) == 0 || slices.ContainsFunc(gaps, func(g time.Duration) bool { return g != 3*time.Second }) {
			t.Errorf("checks at %v: want one every 3s on the active link", checks)
		}
		s.shapers[estimator.Down].fail.Store(true)
		failAt := td.clock.Since()
		td.clock.Advance(2 * controller.DefaultTick)
		if last := s.Checks()[len(s.Checks())-1]; last <= failAt {
			t.Errorf("checks at %v: none after the counter read failed at %v, want one at the next tick", s.Checks(), failAt)
		}
		if err := td.Stop(); err != nil {
			t.Errorf("Run() = %v, want nil", err)
		}
	})
}
