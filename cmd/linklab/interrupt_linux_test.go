//go:build linux

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/autoshape/autoshape/lab"
)

// interruptPrefix names the namespaces of TestCtrlCRemovesEverything: not
// the default, which a manual linklab run may be using (Build removes what
// is under its prefix).
const interruptPrefix = "asxc-"

// labLinkNames are the names the lab gives its interfaces, the IFB included.
var labLinkNames = []string{lab.CliLAN, lab.RtrLAN, lab.RtrWAN, lab.ISPDown, lab.ISPUp, lab.SrvNet, "ifb4" + lab.RtrWAN}

// rootLabLinks lists the links of the root namespace that bear a lab name.
func rootLabLinks(t *testing.T) map[string]bool {
	t.Helper()
	out, err := exec.Command("ip", "-o", "link", "show").Output()
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
		for _, n := range labLinkNames {
			if name == n {
				found[name] = true
			}
		}
	}
	return found
}

// A proc is a process, told apart from a later one with the same PID by its
// start time.
type proc struct {
	pid, ppid int
	start     string
	comm      string
	netns     string
}

// processes reads every process's parent, start time, name and network
// namespace.
func processes() map[int]proc {
	out := map[int]proc{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ... starttime is field 22; comm may hold
		// spaces, so count from its closing parenthesis.
		s := string(stat)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 20 {
			continue
		}
		p := proc{pid: pid, start: f[19], comm: s[strings.IndexByte(s, '(')+1 : i]}
		p.ppid, _ = strconv.Atoi(f[1])
		p.netns, _ = os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid))
		out[pid] = p
	}
	return out
}

// descendants are the processes below pid.
func descendants(all map[int]proc, pid int) []proc {
	var out []proc
	for _, p := range all {
		for q, ok := p, true; ok && q.ppid > 1; q, ok = all[q.ppid] {
			if q.ppid == pid {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// TestCtrlCRemovesEverything: SIGINT to a running `linklab run` ends it
// promptly with status 130, and leaves no namespace under its prefix, no lab
// interface in the root namespace and no process it started: none in the
// lab's namespaces (where the daemon or an exec command runs), none of its
// descendants. With the exec scheme, the command (a sleep of 1000 s) is gone
// too.
func TestCtrlCRemovesEverything(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: builds network namespaces")
	}
	bin := filepath.Join(t.TempDir(), "linklab")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/autoshape/autoshape/cmd/linklab").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v: %s", err, out)
	}
	before := rootLabLinks(t)
	for _, tc := range []struct {
		scheme string
		// settle is how long the run goes on once it has started, so that
		// the load is running when SIGINT comes (the warm-up is 3 s).
		settle time.Duration
		// sleeper: the exec command's sleep must be seen in rtr first.
		sleeper bool
	}{
		{scheme: "unshaped", settle: 4 * time.Second},
		{scheme: "exec:sleep 1000", settle: 4 * time.Second, sleeper: true},
	} {
		t.Run(strings.Fields(tc.scheme)[0], func(t *testing.T) {
			stderrPath := filepath.Join(t.TempDir(), "stderr")
			stderr, err := os.Create(stderrPath)
			if err != nil {
				t.Fatal(err)
			}
			defer stderr.Close()
			cmd := exec.Command(bin, "run", "--scenario", "step", "--scheme", tc.scheme, "--duration", "20s")
			cmd.Env = append(os.Environ(), "LINKLAB_PREFIX="+interruptPrefix)
			cmd.Stdout, cmd.Stderr = stderr, stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			defer func() {
				// Whatever happened, nothing of this test outlives it.
				cmd.Process.Kill()
				lab.RemoveStale(interruptPrefix)
			}()
			log := func() string { b, _ := os.ReadFile(stderrPath); return string(b) }

			// Wait for the run to be under way: the namespaces built, the
			// scheme started (and with exec, its sleep running in rtr).
			nsNames := []string{interruptPrefix + "cli", interruptPrefix + "rtr", interruptPrefix + "isp", interruptPrefix + "srv"}
			inodes := map[string]bool{}
			var sleeper *proc
			for deadline := time.Now().Add(30 * time.Second); ; {
				select {
				case err := <-exited:
					t.Fatalf("linklab ended before SIGINT: %v: %s", err, log())
				default:
				}
				if time.Now().After(deadline) {
					t.Fatalf("the run did not get under way: %s", log())
				}
				time.Sleep(50 * time.Millisecond)
				if !strings.Contains(log(), "on step for") {
					continue
				}
				ready := true
				for _, ns := range nsNames {
					var st syscall.Stat_t
					if err := syscall.Stat("/run/netns/"+ns, &st); err != nil {
						ready = false
						break
					}
					inodes[fmt.Sprintf("net:[%d]", st.Ino)] = true
				}
				if !ready {
					continue
				}
				if tc.sleeper {
					for _, p := range processes() {
						if p.comm == "sleep" && inodes[p.netns] {
							sleeper = &p
						}
					}
					if sleeper == nil {
						continue
					}
				}
				break
			}
			time.Sleep(tc.settle)
			children := descendants(processes(), cmd.Process.Pid)

			sent := time.Now()
			if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
			select {
			case <-exited:
			case <-time.After(20 * time.Second):
				t.Fatalf("linklab still running 20 s after SIGINT: %s", log())
			}
			t.Logf("linklab exited %v after SIGINT", time.Since(sent).Round(time.Millisecond))
			if code := cmd.ProcessState.ExitCode(); code != 130 || !strings.Contains(log(), "interrupted") {
				t.Errorf("exit status %d, want 130 and a word that it was interrupted: %s", code, log())
			}

			out, _ := exec.Command("ip", "netns", "list").Output()
			if strings.Contains(string(out), interruptPrefix) {
				t.Errorf("namespaces left behind:\n%s", out)
			}
			for name := range rootLabLinks(t) {
				if !before[name] {
					t.Errorf("interface %s left in the root namespace", name)
				}
			}
			now := processes()
			for _, p := range now {
				if inodes[p.netns] {
					t.Errorf("process %d (%s) left in a lab namespace", p.pid, p.comm)
				}
			}
			for _, c := range children {
				if p, ok := now[c.pid]; ok && p.start == c.start {
					t.Errorf("process %d (%s) that linklab started is still there", c.pid, c.comm)
				}
			}
			if sleeper != nil {
				if p, ok := now[sleeper.pid]; ok && p.start == sleeper.start {
					t.Errorf("the exec command's sleep (%d) is still there", sleeper.pid)
				}
			}
		})
	}
}
