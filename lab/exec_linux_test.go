//go:build linux

package lab

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/autoshape/autoshape/controller"
	"github.com/autoshape/autoshape/sim"
)

// schemeLabPrefix names the namespaces of this file's tests: neither the
// default prefix of manual linklab runs nor that of the other lab tests,
// since Build removes whatever is left under its prefix.
const schemeLabPrefix = "asxl-"

func buildSchemeLab(t *testing.T) *Topology {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: builds network namespaces")
	}
	top, err := Build(schemeLabPrefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := top.Close(); err != nil {
			t.Error(err)
		}
	})
	return top
}

// netnsInode is the inode of a named network namespace, which
// /proc/PID/ns/net links to for every process inside it.
func netnsInode(t *testing.T, name string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat("/run/netns/"+name, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// processesIn lists "PID COMM" of the processes in the network namespace
// with the given inode.
func processesIn(ino uint64) []string {
	var out []string
	want := fmt.Sprintf("net:[%d]", ino)
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if l, err := os.Readlink("/proc/" + e.Name() + "/ns/net"); err == nil && l == want {
			comm, _ := os.ReadFile("/proc/" + e.Name() + "/comm")
			out = append(out, e.Name()+" "+strings.TrimSpace(string(comm)))
		}
	}
	return out
}

// assertShapingRemoved: neither rtr's IFB nor a root HTB on its WAN is left.
func assertShapingRemoved(t *testing.T, top *Topology) {
	t.Helper()
	out, _ := exec.Command("ip", "-n", top.Rtr, "link", "show").CombinedOutput()
	if strings.Contains(string(out), "ifb4") {
		t.Errorf("the IFB is left behind:\n%s", out)
	}
	out, _ = exec.Command("tc", "-n", top.Rtr, "qdisc", "show", "dev", RtrWAN).CombinedOutput()
	if strings.Contains(string(out), "htb") {
		t.Errorf("the WAN's shaping is left behind:\n%s", out)
	}
}

// TestExecSchemeEnvironment: the exec scheme runs its command in rtr with
// the environment naming the shapers, the reflectors, the bounds and the
// budget; a command that changes nothing gets a rate series at the base
// rate read back from the kernel; at the end the command is gone (it would
// sleep for ever), its directory too, and so is the shaping.
func TestExecSchemeEnvironment(t *testing.T) {
	top := buildSchemeLab(t)
	capacity, err := sim.ParseSchedule("10mbit")
	if err != nil {
		t.Fatal(err)
	}
	cfg := RunConfig{Duration: 6 * time.Second, Budget: 15 * time.Millisecond, Warmup: time.Second}
	cfg.Capacity[0] = capacity // estimator.Down
	envFile := filepath.Join(t.TempDir(), "env")
	s, err := ParseScheme(fmt.Sprintf(`exec:{ env; echo "NETNS=$(ip netns identify $$)"; echo "CWD=$(pwd)"; } > %[1]s.tmp && mv %[1]s.tmp %[1]s && exec sleep 1000`, envFile))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := Run(context.Background(), top, cfg, s)
	if err != nil {
		t.Fatal(err)
	}

	b, err := os.ReadFile(envFile)
	if err != nil {
		t.Fatalf("the command wrote no environment: %v", err)
	}
	got := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && (strings.HasPrefix(k, "LINKLAB_") || k == "NETNS" || k == "CWD") {
			got[k] = v
		}
	}
	dir := got[EnvDir]
	if dir == "" || got["CWD"] != dir {
		t.Errorf("%s = %q, working directory %q: want the scheme's directory as both", EnvDir, dir, got["CWD"])
	}
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("the scheme's directory %s is left behind", dir)
	}
	delete(got, EnvDir)
	delete(got, "CWD")
	want := map[string]string{
		"NETNS":              top.Rtr,
		"LINKLAB_DOWN_IFACE": "ifb4wan0",
		"LINKLAB_UP_IFACE":   "wan0",
		"LINKLAB_REFLECTORS": "10.91.4.1 10.91.4.2 10.91.4.3 10.91.4.4 10.91.4.5 10.91.4.6",
		// sim.DefaultBounds of a constant 10 Mbit/s: a tenth, the mean,
		// 1.1 times the peak.
		"LINKLAB_DOWN_MIN_KBIT": "1000", "LINKLAB_DOWN_BASE_KBIT": "10000", "LINKLAB_DOWN_MAX_KBIT": "11000",
		// The unloaded upload, as the daemon gets it.
		"LINKLAB_UP_MIN_KBIT": "1000", "LINKLAB_UP_BASE_KBIT": "1000000", "LINKLAB_UP_MAX_KBIT": "1000000",
		"LINKLAB_BUDGET_MS": "15",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the command's environment (-want +got):\n%s", diff)
	}

	if len(rs) != 1 || rs[0].Scheme != "exec" || rs[0].Direction != "down" || rs[0].Series == nil || len(rs[0].Series.T) < 50 {
		t.Fatalf("results %+v", rs)
	}
	r := rs[0]
	if r.GoodputMbps <= 0 || r.RateChanges != 0 {
		t.Errorf("goodput %v Mbit/s, %d rate changes: want traffic and no change", r.GoodputMbps, r.RateChanges)
	}
	for i, v := range r.Series.Rate {
		if math.Abs(v-10) > 0.002 {
			t.Fatalf("rate at %v s: %v Mbit/s, want the base 10", r.Series.T[i], v)
		}
	}
	if ps := processesIn(netnsInode(t, top.Rtr)); len(ps) > 0 {
		t.Errorf("processes left in rtr: %v", ps)
	}
	assertShapingRemoved(t, top)
}

// TestExecSchemeFollowsRates: a command that changes the download shaper's
// rate (here with tc, as a peer controller might) shows in the rate series,
// which is read from the kernel.
func TestExecSchemeFollowsRates(t *testing.T) {
	top := buildSchemeLab(t)
	capacity, err := sim.ParseSchedule("10mbit")
	if err != nil {
		t.Fatal(err)
	}
	cfg := RunConfig{Duration: 6 * time.Second, Budget: 15 * time.Millisecond, Warmup: time.Second}
	cfg.Capacity[0] = capacity
	// About 3 s into the loaded 6 s.
	s, err := ParseScheme(`exec:sleep 4 && tc class change dev "$LINKLAB_DOWN_IFACE" parent a5: classid a5:1 htb rate 4mbit ceil 4mbit && exec sleep 1000`)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := Run(context.Background(), top, cfg, s)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 || rs[0].Series == nil || len(rs[0].Series.Rate) < 50 {
		t.Fatalf("results %+v", rs)
	}
	rate := rs[0].Series.Rate
	if rate[0] != 10 || rate[len(rate)-1] != 4 || rs[0].RateChanges != 1 {
		t.Errorf("rates %v Mbit/s, %d changes: want 10, then 4, one change", rate, rs[0].RateChanges)
	}
	assertShapingRemoved(t, top)
}

// TestExecSchemeFailsEarly: a command that fails during the run fails the
// run at once, with its output in the error, and leaves no shaping.
func TestExecSchemeFailsEarly(t *testing.T) {
	top := buildSchemeLab(t)
	capacity, err := sim.ParseSchedule("10mbit")
	if err != nil {
		t.Fatal(err)
	}
	cfg := RunConfig{Duration: 30 * time.Second, Budget: 15 * time.Millisecond}
	cfg.Capacity[0] = capacity
	s, err := ParseScheme(`exec:echo "no cake in this kernel" >&2; exit 3`)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = Run(context.Background(), top, cfg, s)
	if err == nil || !strings.Contains(err.Error(), "no cake in this kernel") || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("Run() error = %v, want the command's exit status and output", err)
	}
	// Not a timing assertion: the run's 30 s must not have been waited out.
	if d := time.Since(start); d > 25*time.Second {
		t.Errorf("the failure took %v to end the run", d)
	}
	assertShapingRemoved(t, top)
}

// TestClassicScheme: the classic scheme runs the daemon with the classic
// policy: its log says so, its decisions carry only the reasons the classic
// policy and the controller give, it cuts on the drop (bloat) and never by
// more than the classic policy's deepest cut, a quarter.
func TestClassicScheme(t *testing.T) {
	top := buildSchemeLab(t)
	bin := buildAutoshape(t)
	// LINKLAB_KEEP keeps the daemon's directory, in a temporary directory
	// of the test's own.
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	t.Setenv("LINKLAB_KEEP", "1")
	down, err := sim.ParseSchedule("20mbit@0s,5mbit@5s")
	if err != nil {
		t.Fatal(err)
	}
	cfg := RunConfig{Duration: 12 * time.Second, Budget: 15 * time.Millisecond, Autoshape: bin, Warmup: 2 * time.Second}
	cfg.Capacity[0] = down
	s, err := ParseScheme("classic")
	if err != nil {
		t.Fatal(err)
	}
	rs, err := Run(context.Background(), top, cfg, s)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 || rs[0].Scheme != "classic" || rs[0].RateChanges == 0 {
		t.Fatalf("results %+v", rs)
	}
	dirs, _ := filepath.Glob(filepath.Join(tmp, "linklab-*"))
	if len(dirs) != 1 {
		t.Fatalf("daemon directories %v, want one", dirs)
	}
	conf, _ := os.ReadFile(filepath.Join(dirs[0], "autoshape.toml"))
	if !strings.Contains(string(conf), `policy = "classic"`) {
		t.Errorf("the daemon's configuration:\n%s", conf)
	}
	log, _ := os.ReadFile(filepath.Join(dirs[0], "daemon.log"))
	if !strings.Contains(string(log), `"policy":"classic"`) {
		t.Errorf("the daemon's log does not name the classic policy:\n%s", tailString(string(log), 2000))
	}
	f, err := os.Open(filepath.Join(dirs[0], "decisions.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// The classic policy's reasons, and the controller's own.
	allowed := map[string]bool{"start": true, "bloat": true, "probe_up": true, "decay": true, "hold": true,
		"idle": true, "stall": true, "fallback": true, "bounds": true, "shutdown": true}
	reasons := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r controller.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("%v: %s", err, sc.Text())
		}
		reasons[r.Reason]++
		if !allowed[r.Reason] {
			t.Errorf("decision with reason %q, which the classic policy never gives: %s", r.Reason, sc.Text())
		}
		// A cut is 1 to 25 % of the rate the policy was given, which may
		// sit up to half a per cent above the last one written.
		if r.Reason == "bloat" && !r.Clamped && r.RateKbit < 0.74*r.FromKbit {
			t.Errorf("a cut from %v to %v kbit/s, deeper than the classic policy's: %s", r.FromKbit, r.RateKbit, sc.Text())
		}
	}
	t.Logf("reasons %v; result %+v", reasons, rs[0].Delay)
	if reasons["bloat"] == 0 {
		t.Errorf("no cut on bloat after the drop to 5 Mbit/s: reasons %v", reasons)
	}
	if ps := processesIn(netnsInode(t, top.Rtr)); len(ps) > 0 {
		t.Errorf("processes left in rtr: %v", ps)
	}
	assertShapingRemoved(t, top)
}

// TestDaemonSchemeFailsEarly: a daemon that exits during the run, with an
// error or cleanly, fails the run at once with its output in the error:
// what the lab measured after it would be the rate it left behind.
func TestDaemonSchemeFailsEarly(t *testing.T) {
	top := buildSchemeLab(t)
	capacity, err := sim.ParseSchedule("10mbit")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, script, want string
	}{
		{"an error", `echo "netlink: no such device" >&2; exit 3`, "exit status 3"},
		{"a clean exit", `echo "nothing to do"; exit 0`, "exited before the run ended"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A stand-in for the autoshape binary that runs a second and exits.
			bin := filepath.Join(t.TempDir(), "autoshape")
			if err := os.WriteFile(bin, []byte("#!/bin/sh\nsleep 1\n"+tt.script+"\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			cfg := RunConfig{Duration: 30 * time.Second, Budget: 15 * time.Millisecond, Autoshape: bin}
			cfg.Capacity[0] = capacity
			s, err := ParseScheme("autoshape")
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			_, err = Run(context.Background(), top, cfg, s)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Run() error = %v, want one saying %q", err, tt.want)
			}
			// Not a timing assertion: the run's 30 s must not have been
			// waited out.
			if d := time.Since(start); d > 25*time.Second {
				t.Errorf("the failure took %v to end the run", d)
			}
		})
	}
}
