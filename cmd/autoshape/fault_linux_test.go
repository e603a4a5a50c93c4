//go:build linux

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netns"
)

// The fault-injection suite: the daemon runs in a router namespace against
// fake reflectors (fakeReflector) that the test makes silent, slow or
// wrong, and against someone changing the router's qdiscs and the disk
// filling up. Every row checks what the rates and the log must show; every
// row also checks that nothing panicked, that the daemon's memory stayed
// bounded, that every rate written stayed within [min, max], that every
// line of the decision file is whole, and that SIGTERM still ends it
// cleanly. docs/reliability.md lists the rows.

// faultBounds are the rates the suite's config sets, in kbit/s.
var faultBounds = map[string]struct{ min, base, max, safe float64 }{
	"down": {2000, 10000, 50000, 4000},
	"up":   {1000, 5000, 20000, 2000},
}

// faultReflectors are the fake reflectors' addresses: on the router's
// subnet, held by no namespace.
var faultReflectors = []string{"10.79.0.12", "10.79.0.13", "10.79.0.14"}

// maxRSSKiB bounds the daemon's resident memory in every row.
const maxRSSKiB = 200 << 10

// A faultLab is a daemonLab with fake reflectors and the daemon's process.
type faultLab struct {
	*daemonLab
	refl      *fakeReflector
	method    string
	decisions string
	listen    string
	level     string
	downBase  string
	downMax   string

	cmd *exec.Cmd
	log *safeBuffer

	mu     sync.Mutex
	maxRSS int // KiB
}

func newFaultLab(t *testing.T, l *daemonLab, method string) *faultLab {
	t.Helper()
	f := &faultLab{daemonLab: l, method: method, decisions: filepath.Join(l.dir, "decisions.jsonl"),
		listen: "127.0.0.1:19877", level: "debug", downBase: "10mbit", downMax: "50mbit"}
	f.refl = newFakeReflector(t, l.reflector, "rf0", l.router, "wan0", faultReflectors...)
	f.writeConfig(t)
	return f
}

func (f *faultLab) writeConfig(t *testing.T) {
	t.Helper()
	cfg := fmt.Sprintf(`state_file = %q
on_exit = "base"
[log]
level = %q
decisions = %q
[metrics]
listen = %q
[[link]]
name = "wan"
interface = "wan0"
backend = %q
[link.download]
min = "2mbit"
base = %q
max = %q
safe = "4mbit"
[link.upload]
min = "1mbit"
base = "5mbit"
max = "20mbit"
safe = "2mbit"
[link.probe]
method = %q
reflectors = ["%s"]
active = 3
rate = 20
`, filepath.Join(f.dir, "state.json"), f.level, f.decisions, f.listen, f.backend, f.downBase, f.downMax, f.method, strings.Join(faultReflectors, `", "`))
	if err := os.WriteFile(f.config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
}

// start runs the daemon and samples its resident memory until it exits.
func (f *faultLab) start(t *testing.T) {
	t.Helper()
	f.cmd, f.log = f.daemonLab.start(t)
	pid := f.cmd.Process.Pid
	go func() {
		for {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
			if err != nil {
				return
			}
			for _, line := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
					kib, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
					f.mu.Lock()
					f.maxRSS = max(f.maxRSS, kib)
					f.mu.Unlock()
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
}

func (f *faultLab) hup(t *testing.T) {
	t.Helper()
	if err := f.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
}

// A faultRecord is one line of the decision file.
type faultRecord struct {
	Dir      string  `json:"dir"`
	FromKbit float64 `json:"from_kbit"`
	RateKbit float64 `json:"rate_kbit"`
	Reason   string  `json:"reason"`
	Bloat    bool    `json:"bloat"`
	State    string  `json:"state"`
}

// readDecisionFile reads a decision file; a line that is not whole JSON fails the
// test.
func readDecisionFile(t *testing.T, path string) []faultRecord {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		t.Fatal(err)
	}
	var recs []faultRecord
	for i, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		if line == "" {
			continue
		}
		var r faultRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Errorf("%s line %d is not a whole record: %v: %q", path, i+1, err, line)
			continue
		}
		recs = append(recs, r)
	}
	return recs
}

// logRecords are the decisions as the log shows them (at level debug, the
// fault lab's, the log has every one, the decision file only those it
// could write).
func logRecords(log string) []faultRecord {
	var recs []faultRecord
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, `"msg":"rate change"`) {
			continue
		}
		var r faultRecord
		if json.Unmarshal([]byte(line), &r) == nil && r.Dir != "" {
			recs = append(recs, r)
		}
	}
	return recs
}

// finish ends the daemon with SIGTERM and checks what every row must hold.
func (f *faultLab) finish(t *testing.T) string {
	t.Helper()
	f.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- f.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the daemon exited with %v", err)
		}
	case <-time.After(settle):
		f.cmd.Process.Kill()
		<-done
		t.Errorf("the daemon did not end within %v of SIGTERM", settle)
	}
	log := f.log.String()
	for _, bad := range []string{"panic:", "goroutine ", "DATA RACE"} {
		if strings.Contains(log, bad) {
			t.Errorf("the log shows %q:\n%s", bad, tail(log, 3000))
		}
	}
	for _, r := range logRecords(log) {
		b := faultBounds[r.Dir]
		if r.RateKbit < b.min || r.RateKbit > b.max {
			t.Errorf("a %s rate of %v kbit/s left [%v, %v]", r.Dir, r.RateKbit, b.min, b.max)
		}
	}
	readDecisionFile(t, f.decisions)
	f.mu.Lock()
	rss := f.maxRSS
	f.mu.Unlock()
	if rss == 0 || rss > maxRSSKiB {
		t.Errorf("the daemon's resident memory peaked at %d KiB, want (0, %d]", rss, maxRSSKiB)
	}
	t.Logf("peak resident memory %d KiB", rss)
	return log
}

// countMatches counts the log lines that match re.
func countMatches(log string, re *regexp.Regexp) int {
	n := 0
	for _, line := range strings.Split(log, "\n") {
		if re.MatchString(line) {
			n++
		}
	}
	return n
}

// load sends UDP at rate bit/s from the router to the reflector
// namespace's own address (its kernel drops it), so that the upload is
// loaded, until the test ends.
func (f *faultLab) loadUp(t *testing.T, rate float64) {
	t.Helper()
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	blast(t, f.router, "10.79.0.2:9", rate, stop)
}

// A faultRow is one fault: run starts the daemon, injects the fault and
// checks what the rates and the log show while it lasts.
type faultRow struct {
	name   string
	method string
	// shaping marks the rows about the qdiscs, run with each backend.
	shaping bool
	run     func(t *testing.T, f *faultLab)
}

var faultRows = []faultRow{
	{"icmp blackholed from the start", "echo", false, func(t *testing.T, f *faultLab) {
		f.refl.setDrop(true)
		f.start(t)
		eventually(t, settle, "the fallback to the safe rates", func() bool {
			return f.holdsKbit("ifb4wan0", 4000) && f.holdsKbit("wan0", 2000)
		}, f.log)
		time.Sleep(3 * time.Second)
		log := f.finish(t)
		for _, r := range logRecords(log) {
			if r.Reason != "shutdown" && r.RateKbit > faultBounds[r.Dir].base {
				t.Errorf("with no answer ever, %s went to %v kbit/s (%s), above its base", r.Dir, r.RateKbit, r.Reason)
			}
		}
		for _, dir := range []string{"down", "up"} {
			if !hasRecord(logRecords(log), dir, "fallback", faultBounds[dir].safe) {
				t.Errorf("no fallback of %s to its safe rate:\n%s", dir, tail(log, 2000))
			}
		}
	}},
	{"reflectors flapping", "echo", false, func(t *testing.T, f *faultLab) {
		f.loadUp(t, 3e6)
		f.start(t)
		f.waitShaped(t)
		// Outages longer than the fallback's 5 s, with answers between.
		for range 3 {
			f.refl.setDrop(true)
			time.Sleep(6500 * time.Millisecond)
			f.refl.setDrop(false)
			time.Sleep(2500 * time.Millisecond)
		}
		log := f.finish(t)
		recs := logRecords(log)
		for _, r := range recs {
			if r.State == "stall" && r.RateKbit > r.FromKbit {
				t.Errorf("%s rose from %v to %v kbit/s (%s) while stalled", r.Dir, r.FromKbit, r.RateKbit, r.Reason)
			}
		}
		// The loaded upload comes down to its safe rate, or under it: the
		// budget policy lowers it to what its shaper passed, before the
		// fallback, where that was well under its rate (the load is
		// 3 Mbit/s of UDP).
		down := false
		for _, r := range recs {
			down = down || r.Dir == "up" && r.State == "stall" && (r.Reason == "fallback" || r.Reason == "blind") && r.RateKbit <= faultBounds["up"].safe
		}
		if !down {
			t.Errorf("three outages of 6.5 s and the loaded upload never at its safe rate or under:\n%s", tail(log, 2000))
		}
	}},
	{"answers lost while the upload is application-limited", "echo", false, func(t *testing.T, f *faultLab) {
		// The upload carries 3 Mbit/s of UDP under a rate of 5 or more:
		// its shaper passes well under its rate. With the answers gone
		// for 4 s (under the fallback's 5 s), the budget policy lowers it
		// to what it passed, a second or more into the stall; the
		// download, which carries nothing, keeps its rate.
		f.loadUp(t, 3e6)
		f.start(t)
		f.waitShaped(t)
		time.Sleep(2 * time.Second)
		f.refl.setDrop(true)
		time.Sleep(4 * time.Second)
		f.refl.setDrop(false)
		time.Sleep(time.Second)
		log := f.finish(t)
		var blind []faultRecord
		for _, r := range logRecords(log) {
			if r.State == "stall" && r.RateKbit > r.FromKbit {
				t.Errorf("%s rose from %v to %v kbit/s (%s) while stalled", r.Dir, r.FromKbit, r.RateKbit, r.Reason)
			}
			if r.Reason == "blind" {
				blind = append(blind, r)
			}
			if r.Reason == "fallback" {
				t.Errorf("a fallback in a stall of 4 s: %+v", r)
			}
		}
		if len(blind) == 0 {
			t.Fatalf("the application-limited upload kept its rate through 4 s without answers:\n%s", tail(log, 2000))
		}
		for _, r := range blind {
			if r.Dir != "up" || r.RateKbit > 3000 || r.RateKbit < faultBounds["up"].min {
				t.Errorf("blind cut %+v: want the upload, to what 3 Mbit/s of UDP passed", r)
			}
		}
	}},
	{"replies delayed at random up to 1.5 s", "echo", false, func(t *testing.T, f *faultLab) {
		// Answers that come back late are delay: the loaded upload is
		// cut for it and never raised above base.
		f.refl.set(false, 1500*time.Millisecond, 0)
		f.loadUp(t, 3e6)
		f.start(t)
		f.waitShaped(t)
		time.Sleep(15 * time.Second)
		log := f.finish(t)
		recs := logRecords(log)
		for _, r := range recs {
			if r.Dir == "up" && r.Reason != "shutdown" && r.RateKbit > faultBounds["up"].base {
				t.Errorf("with every answer up to 1.5 s late, the upload went to %v kbit/s (%s)", r.RateKbit, r.Reason)
			}
		}
		cut := false
		for _, r := range recs {
			cut = cut || (r.Dir == "up" && r.Reason == "bloat")
		}
		if !cut {
			t.Errorf("answers up to 1.5 s late and no cut of the loaded upload:\n%s", tail(log, 2000))
		}
	}},
	{"wall clock stepped 2 s", "timestamp", false, func(t *testing.T, f *faultLab) { clockStep(t, f, 2*time.Second) }},
	{"wall clock stepped 12 h", "timestamp", false, func(t *testing.T, f *faultLab) { clockStep(t, f, 12*time.Hour) }},
	{"ingress qdisc deleted", "echo", true, func(t *testing.T, f *faultLab) {
		f.start(t)
		f.waitShaped(t)
		mark := f.log.String()
		mustRun(t, "tc", "-n", f.router, "qdisc", "del", "dev", "wan0", "ingress")
		eventually(t, settle, "the ingress qdisc and its redirect made again", func() bool {
			out, _ := exec.Command("tc", "-n", f.router, "filter", "show", "dev", "wan0", "ingress").CombinedOutput()
			return strings.Contains(string(out), "ifb4wan0")
		}, f.log)
		log := f.finish(t)
		if !regexp.MustCompile(`(?i)"level":"warn".*ingress`).MatchString(log[len(mark):]) {
			t.Errorf("no warning about the deleted ingress qdisc:\n%s", tail(log, 2000))
		}
	}},
	{"foreign root adopted", "echo", true, func(t *testing.T, f *faultLab) {
		f.start(t)
		f.waitShaped(t)
		mark := f.log.String()
		mustRun(t, "tc", "-n", f.router, "qdisc", "replace", "dev", "wan0", "root", "handle", "5:", "htb", "default", "1")
		time.Sleep(5 * time.Second)
		log := f.finish(t)
		if q := f.qdiscs("wan0"); !strings.Contains(q, "qdisc htb 5: root") {
			t.Errorf("the foreign root was not left alone: %q", q)
		}
		if c := f.classes("wan0"); strings.TrimSpace(c) != "" {
			t.Errorf("classes were added under the foreign root: %q", c)
		}
		if !regexp.MustCompile(`"level":"(warn|error)".*5:`).MatchString(log[len(mark):]) {
			t.Errorf("no warning naming the foreign root 5::\n%s", tail(log, 2000))
		}
	}},
	{"disk full", "echo", false, func(t *testing.T, f *faultLab) {
		// A tmpfs of two pages: one for a filler, one for the decision
		// file, so that a record is cut at the page's end.
		dir := filepath.Join(f.dir, "small")
		os.Mkdir(dir, 0o755)
		mustRun(t, "mount", "-t", "tmpfs", "-o", "size=8k", "tmpfs", dir)
		t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
		filler := filepath.Join(dir, "filler")
		os.WriteFile(filler, bytes.Repeat([]byte{'x'}, 4096), 0o644)
		f.decisions = filepath.Join(dir, "decisions.jsonl")
		f.writeConfig(t)
		f.start(t)
		f.waitShaped(t)
		// Each reload with a new base restarts the link, and its start
		// decisions fill the file.
		bases := []string{"9mbit", "10mbit"}
		reload := func(i int) {
			f.downBase = bases[i%2]
			f.writeConfig(t)
			f.hup(t)
			time.Sleep(1500 * time.Millisecond)
		}
		for i := 0; i < 16; i++ {
			reload(i)
			if st, err := os.Stat(f.decisions); err == nil && st.Size() >= 4096 && i >= 8 {
				break
			}
		}
		before := len(readDecisionFile(t, f.decisions))
		os.Remove(filler)
		bases = []string{"8mbit"}
		reload(0)
		eventually(t, settle, "whole records after the disk has room again", func() bool {
			return len(readDecisionFile(t, f.decisions)) > before
		}, f.log)
		log := f.finish(t)
		if n := len(readDecisionFile(t, f.decisions)); n < 2 {
			t.Errorf("the decision file holds %d whole records", n)
		}
		warnings := countMatches(log, regexp.MustCompile(`"level":"(warn|error)".*(?i)decision`))
		if warnings == 0 || warnings > 3 {
			t.Errorf("%d warnings about the decision file for %d decisions, want 1 to 3:\n%s", warnings, len(logRecords(log)), tail(log, 2000))
		}
	}},
	{"SIGHUP: log level", "echo", false, func(t *testing.T, f *faultLab) {
		f.level = "info"
		f.writeConfig(t)
		f.start(t)
		f.waitShaped(t)
		f.level = "debug"
		f.writeConfig(t)
		mark := len(f.log.String())
		f.hup(t)
		eventually(t, settle, "a debug line after the reload", func() bool {
			return strings.Contains(f.log.String()[mark:], `"level":"debug"`)
		}, f.log)
		f.finish(t)
	}},
	{"SIGHUP: metrics address", "echo", false, func(t *testing.T, f *faultLab) {
		f.start(t)
		f.waitShaped(t)
		if _, err := scrapeAt(f.router, "127.0.0.1:19877"); err != nil {
			t.Fatalf("metrics before the reload: %v", err)
		}
		f.listen = "127.0.0.1:19878"
		f.writeConfig(t)
		f.hup(t)
		eventually(t, settle, "the metrics on the new address", func() bool {
			body, err := scrapeAt(f.router, "127.0.0.1:19878")
			return err == nil && strings.Contains(body, "autoshape_build_info")
		}, f.log)
		if _, err := scrapeAt(f.router, "127.0.0.1:19877"); err == nil {
			t.Errorf("the old metrics address still answers")
		}
		f.finish(t)
	}},
	{"SIGHUP: decision file", "echo", false, func(t *testing.T, f *faultLab) {
		f.start(t)
		f.waitShaped(t)
		f.decisions = filepath.Join(f.dir, "moved.jsonl")
		f.writeConfig(t)
		f.hup(t)
		// An outage makes decisions after the reload.
		f.refl.setDrop(true)
		eventually(t, settle, "decisions in the new file", func() bool {
			b, _ := os.ReadFile(f.decisions)
			return bytes.Count(b, []byte("\n")) > 0
		}, f.log)
		f.refl.setDrop(false)
		f.finish(t)
	}},
	{"SIGHUP: bounds", "echo", false, func(t *testing.T, f *faultLab) {
		f.start(t)
		f.waitShaped(t)
		f.downBase, f.downMax = "6mbit", "8mbit"
		f.writeConfig(t)
		f.hup(t)
		eventually(t, settle, "the download at or under its new maximum", func() bool {
			return f.holdsAtMostKbit("ifb4wan0", 8000)
		}, f.log)
		f.finish(t)
	}},
}

// clockStep steps the reflectors' wall clock while the upload is loaded:
// the one-way delays move by the step, up and down in opposite directions,
// and the round trip does not. Nothing may be cut for it.
func clockStep(t *testing.T, f *faultLab, step time.Duration) {
	f.loadUp(t, 3e6)
	f.start(t)
	f.waitShaped(t)
	time.Sleep(5 * time.Second)
	mark := len(f.log.String())
	f.refl.setOffset(step)
	time.Sleep(10 * time.Second)
	log := f.finish(t)
	if os.Getenv("FAULT_DEBUG") != "" {
		t.Logf("log after the step:\n%s", log[mark:])
	}
	for _, r := range logRecords(log[mark:]) {
		switch {
		case r.Bloat, r.Reason == "bloat", r.Reason == "capacity_drop", r.Reason == "ease", r.Reason == "fallback":
			t.Errorf("a %v step of the reflectors' clock cut %s to %v kbit/s (%s)", step, r.Dir, r.RateKbit, r.Reason)
		case r.State == "stall":
			t.Errorf("a %v step of the reflectors' clock stalled %s: its answers were thrown away", step, r.Dir)
		}
	}
}

func hasRecord(recs []faultRecord, dir, reason string, rate float64) bool {
	for _, r := range recs {
		if r.Dir == dir && r.Reason == reason && r.RateKbit == rate {
			return true
		}
	}
	return false
}

func (f *faultLab) waitShaped(t *testing.T) {
	t.Helper()
	eventually(t, settle, "the shaping", func() bool {
		return f.shaped("wan0") && f.shaped("ifb4wan0")
	}, f.log)
}

// rateKbit is the rate dev's shaper holds, in kbit/s, or -1: CAKE's
// bandwidth, or the rate of HTB's top class a5:1.
func (f *faultLab) rateKbit(dev string) float64 {
	var text string
	re := regexp.MustCompile(`rate ([0-9.]+)([KMG]?)bit`)
	if f.backend == "cake" {
		text = f.qdiscs(dev)
		re = regexp.MustCompile(`bandwidth ([0-9.]+)([KMG]?)bit`)
	} else {
		out, _ := exec.Command("tc", "-n", f.router, "class", "show", "dev", dev, "classid", "a5:1").CombinedOutput()
		text = string(out)
	}
	m := re.FindStringSubmatch(text)
	if m == nil {
		return -1
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v * map[string]float64{"": 1e-3, "K": 1, "M": 1e3, "G": 1e6}[m[2]]
}

func (f *faultLab) holdsKbit(dev string, kbit float64) bool { return f.rateKbit(dev) == kbit }

func (f *faultLab) holdsAtMostKbit(dev string, kbit float64) bool {
	r := f.rateKbit(dev)
	return r > 0 && r <= kbit
}

// scrapeAt fetches the metrics at addr from inside namespace ns.
func scrapeAt(ns, addr string) (string, error) {
	var body string
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // thrown away with the goroutine
		h, e := netns.GetFromName(ns)
		if e != nil {
			err = e
			return
		}
		defer h.Close()
		if err = netns.Set(h); err != nil {
			return
		}
		// Dial here, on the thread in the namespace: an http.Transport
		// would dial from a goroutine of its own, in the host's namespace.
		conn, e := net.DialTimeout("tcp", addr, 2*time.Second)
		if e != nil {
			err = e
			return
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		req, _ := http.NewRequest("GET", "http://"+addr+"/metrics", nil)
		req.Close = true
		if err = req.Write(conn); err != nil {
			return
		}
		resp, e := http.ReadResponse(bufio.NewReader(conn), req)
		if e != nil {
			err = e
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
	}()
	<-done
	return body, err
}

// TestFaults runs the rows about probes, clocks, the disk and reloads.
// They do not depend on the shaper: HTB, on any kernel.
func TestFaults(t *testing.T) {
	for _, row := range faultRows {
		if row.shaping {
			continue
		}
		t.Run(row.name, func(t *testing.T) {
			row.run(t, newFaultLab(t, newDaemonLab(t), row.method))
		})
	}
}

// TestFaultsOnShaping runs the rows about the shaping itself with each
// backend the kernel has (CAKE inside the User-mode Linux kernel in CI).
func TestFaultsOnShaping(t *testing.T) {
	for _, row := range faultRows {
		if !row.shaping {
			continue
		}
		t.Run(row.name, func(t *testing.T) {
			forBackends(t, func(t *testing.T, l *daemonLab) {
				row.run(t, newFaultLab(t, l, row.method))
			})
		})
	}
}
