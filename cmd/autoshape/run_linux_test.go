//go:build linux

package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	vnetlink "github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/autoshape/autoshape/actuator"
	"github.com/autoshape/autoshape/internal/kerneltest"
	"github.com/autoshape/autoshape/lab"
)

// daemonLab is a router namespace holding "wan0" and a reflector namespace
// on its other end with three reflector addresses.
type daemonLab struct {
	router, reflector string
	dir, config       string
	// backend is the config's, "htb" unless setBackend changes it.
	backend string
}

func newDaemonLab(t *testing.T) *daemonLab {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces and runs the daemon in one")
	}
	labLock(t)
	b := make([]byte, 3)
	rand.Read(b)
	id := hex.EncodeToString(b)
	l := &daemonLab{router: "as-run-r-" + id, reflector: "as-run-x-" + id, dir: t.TempDir(), backend: "htb"}
	for _, ns := range []string{l.router, l.reflector} {
		mustRun(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
		mustRun(t, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	l.wire(t)
	l.config = filepath.Join(l.dir, "autoshape.toml")
	l.writeConfig(t, "")
	return l
}

// wire (re)creates the veth pair and the addresses.
func (l *daemonLab) wire(t *testing.T) {
	t.Helper()
	mustRun(t, "ip", "-n", l.router, "link", "add", "wan0", "type", "veth", "peer", "name", "rf0", "netns", l.reflector)
	mustRun(t, "ip", "-n", l.router, "addr", "add", "10.79.0.1/24", "dev", "wan0")
	mustRun(t, "ip", "-n", l.router, "link", "set", "wan0", "up")
	for _, a := range []string{"2", "3", "4"} {
		mustRun(t, "ip", "-n", l.reflector, "addr", "add", "10.79.0."+a+"/24", "dev", "rf0")
	}
	mustRun(t, "ip", "-n", l.reflector, "link", "set", "rf0", "up")
}

// writeConfig writes the lab's configuration. Its log level is debug, so
// that the log holds every decision: the gradual ones are DEBUG lines, and
// the tests read the rates reached from the log.
func (l *daemonLab) writeConfig(t *testing.T, extra string) {
	t.Helper()
	cfg := fmt.Sprintf(`state_file = %q
on_exit = "base"
[log]
level = "debug"
decisions = %q
[metrics]
listen = "127.0.0.1:19877"
[[link]]
name = "wan"
interface = "wan0"
backend = %q
[link.download]
min = "1mbit"
base = "10mbit"
max = "50mbit"
[link.upload]
min = "1mbit"
base = "5mbit"
max = "20mbit"
[link.probe]
method = "echo"
reflectors = ["10.79.0.2", "10.79.0.3", "10.79.0.4"]
active = 3
rate = 20
%s`, filepath.Join(l.dir, "state.json"), filepath.Join(l.dir, "decisions.jsonl"), l.backend, extra)
	if err := os.WriteFile(l.config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustRun(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// safeBuffer collects the daemon's log.
type safeBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *safeBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *safeBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// start runs the daemon (this test binary, see TestMain) in the router
// namespace.
func (l *daemonLab) start(t *testing.T, flags ...string) (*exec.Cmd, *safeBuffer) {
	t.Helper()
	cmd := exec.Command("ip", "netns", "exec", l.router, os.Args[0])
	cmd.Env = append(os.Environ(), "AUTOSHAPE_TEST_ARGS=run -c "+l.config+" "+strings.Join(flags, " "))
	log := &safeBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return cmd, log
}

// settle is how long the tests wait for the daemon to get somewhere: a few
// seconds on the host, more inside User-mode Linux, where every system call
// traps to the host and the one CPU is shared with the test and the load.
const settle = 30 * time.Second

// eventually polls cond for up to d.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool, log *safeBuffer) {
	t.Helper()
	end := time.Now().Add(d)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("after %v: %s did not happen; daemon log:\n%s", d, what, tail(log.String(), 3000))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func (l *daemonLab) classes(dev string) string {
	out, _ := exec.Command("tc", "-n", l.router, "class", "show", "dev", dev).CombinedOutput()
	return string(out)
}

func (l *daemonLab) qdiscs(dev string) string {
	out, _ := exec.Command("tc", "-n", l.router, "qdisc", "show", "dev", dev).CombinedOutput()
	return string(out)
}

// netlink is a route netlink handle in the router namespace.
func (l *daemonLab) netlink() (*vnetlink.Handle, error) {
	ns, err := netns.GetFromName(l.router)
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	return vnetlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
}

// shaped reports whether dev's root is autoshape's qdisc of the lab's
// backend. It reads over netlink, as tests poll it: an exec of tc takes a
// fifth of a second of the one CPU in User-mode Linux, and polling with it
// starves the daemon under test.
func (l *daemonLab) shaped(dev string) bool {
	h, err := l.netlink()
	if err != nil {
		return false
	}
	defer h.Close()
	link, err := h.LinkByName(dev)
	if err != nil {
		return false
	}
	qs, err := h.QdiscList(link)
	if err != nil {
		return false
	}
	for _, q := range qs {
		a := q.Attrs()
		if a.Parent == vnetlink.HANDLE_ROOT && a.Handle == actuator.OwnRootHandle && q.Type() == l.backend {
			return true
		}
	}
	return false
}

// holds reports whether dev's shaper holds the rate, as tc prints it
// ("10Mbit").
func (l *daemonLab) holds(dev, rate string) bool {
	if l.backend == "cake" {
		return strings.Contains(l.qdiscs(dev), "bandwidth "+rate+" ")
	}
	return strings.Contains(l.classes(dev), "rate "+rate+" ")
}

// setBackend writes the config anew with the backend.
func (l *daemonLab) setBackend(t *testing.T, backend string) {
	t.Helper()
	l.backend = backend
	l.writeConfig(t, "")
}

// forBackends runs test once per backend: htb, and cake where the kernel
// has it (with AUTOSHAPE_REAL_KERNEL=1 it must).
func forBackends(t *testing.T, test func(t *testing.T, l *daemonLab)) {
	for _, b := range []string{"htb", "cake"} {
		t.Run(b, func(t *testing.T) {
			l := newDaemonLab(t)
			kerneltest.RequireQdisc(t, b)
			l.setBackend(t, b)
			test(t, l)
		})
	}
}

// nsSnapshot is what the kernel holds in the router namespace: links with
// their aliases, qdiscs, and wan0's ingress filters.
func (l *daemonLab) nsSnapshot(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, args := range [][]string{
		{"ip", "-n", l.router, "-o", "link"},
		{"tc", "-n", l.router, "qdisc", "show"},
		{"tc", "-n", l.router, "filter", "show", "dev", "wan0", "ingress"},
	} {
		b.WriteString(mustRun(t, args[0], args[1:]...))
	}
	return stableLinks(b.String())
}

// sqmLike sets up shaping in the router namespace as sqm-scripts does, with
// the lab's backend: roots on wan0 and on an IFB ifb4wan0 (no alias), and
// wan0's ingress redirected to the IFB.
func (l *daemonLab) sqmLike(t *testing.T) {
	t.Helper()
	tc := func(args ...string) { mustRun(t, "tc", append([]string{"-n", l.router}, args...)...) }
	mustRun(t, "ip", "-n", l.router, "link", "add", "ifb4wan0", "type", "ifb")
	mustRun(t, "ip", "-n", l.router, "link", "set", "ifb4wan0", "up")
	for _, dev := range []string{"wan0", "ifb4wan0"} {
		if l.backend == "cake" {
			tc("qdisc", "add", "dev", dev, "root", "cake", "bandwidth", "7mbit")
			continue
		}
		tc("qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "1")
		tc("class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb", "rate", "7mbit")
	}
	tc("qdisc", "add", "dev", "wan0", "handle", "ffff:", "ingress")
	tc("filter", "add", "dev", "wan0", "parent", "ffff:", "protocol", "all", "prio", "10", "u32",
		"match", "u32", "0", "0", "flowid", "1:1", "action", "mirred", "egress", "redirect", "dev", "ifb4wan0")
}

// scrape fetches the metrics from inside the router namespace.
func (l *daemonLab) scrape(t *testing.T) string {
	t.Helper()
	body, err := scrapeAt(l.router, "127.0.0.1:19877")
	if err != nil {
		t.Fatalf("scraping the metrics failed: %v", err)
	}
	return body
}

func TestDaemonLifecycle(t *testing.T) {
	forBackends(t, testDaemonLifecycle)
}

func testDaemonLifecycle(t *testing.T, l *daemonLab) {
	// A state file from an earlier run: the daemon resumes from its rates.
	state := filepath.Join(l.dir, "state.json")
	os.WriteFile(state, []byte(`{"version": 1, "links": {"wan": {"down_kbit": 20000, "up_kbit": 4000}}}`), 0o644)

	cmd, log := l.start(t)
	// An unloaded link then drifts towards base: the start decisions show
	// where it began.
	eventually(t, settle, "the shaping, starting from the saved rates", func() bool {
		return strings.Contains(log.String(), `"dir":"down","from_kbit":20000`) &&
			strings.Contains(log.String(), `"dir":"up","from_kbit":4000`) &&
			l.shaped("ifb4wan0") && l.shaped("wan0")
	}, log)

	body := l.scrape(t)
	for _, want := range []string{`autoshape_shaper_rate_bits{dir="down",link="wan"}`, `autoshape_state{link="wan",state="active"} 1`, "autoshape_build_info"} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if b, err := os.ReadFile(filepath.Join(l.dir, "decisions.jsonl")); err != nil || !strings.Contains(string(b), `"reason":"start"`) {
		t.Errorf("decision file: %v, %q", err, tail(string(b), 500))
	}

	// A reflector goes away: the daemon carries on.
	mustRun(t, "ip", "-n", l.reflector, "addr", "del", "10.79.0.4/24", "dev", "rf0")

	// Someone deletes the qdisc: it is made again.
	mustRun(t, "tc", "-n", l.router, "qdisc", "del", "dev", "wan0", "root")
	eventually(t, settle, "the deleted qdisc made again", func() bool {
		return l.shaped("wan0")
	}, log)

	// The interface vanishes and comes back with a new index.
	mustRun(t, "ip", "-n", l.router, "link", "del", "wan0")
	time.Sleep(time.Second)
	l.wire(t)
	eventually(t, settle, "the shaping re-applied on the new interface", func() bool {
		return l.shaped("wan0") && l.shaped("ifb4wan0")
	}, log)

	// A broken config on SIGHUP is refused; the daemon keeps running.
	os.WriteFile(l.config, []byte("this is not toml ["), 0o644)
	cmd.Process.Signal(syscall.SIGHUP)
	eventually(t, settle, "the broken reload refused", func() bool {
		return strings.Contains(log.String(), "reload refused")
	}, log)
	// A valid new config (a new upper bound for download) restarts the link
	// from the rates it had reached, not from base.
	starts := strings.Count(log.String(), `"reason":"start"`)
	l.writeConfig(t, "")
	cfgText, _ := os.ReadFile(l.config)
	os.WriteFile(l.config, []byte(strings.Replace(string(cfgText), `max = "50mbit"`, `max = "60mbit"`, 1)), 0o644)
	cmd.Process.Signal(syscall.SIGHUP)
	eventually(t, settle, "the link restarted by a valid reload", func() bool {
		return strings.Contains(log.String(), `"msg":"reloading"`) && strings.Count(log.String(), `"reason":"start"`) >= starts+2
	}, log)
	out := log.String()
	reload := strings.LastIndex(out, `"msg":"reloading"`)
	downRate := regexp.MustCompile(`"dir":"down","from_kbit":([0-9.e+]+),"rate_kbit":([0-9.e+]+)`)
	var reached, from float64
	for _, m := range downRate.FindAllStringSubmatch(out[:reload], -1) {
		fmt.Sscanf(m[2], "%g", &reached)
	}
	if m := downRate.FindStringSubmatch(out[reload:]); m != nil {
		fmt.Sscanf(m[1], "%g", &from)
	}
	// It began at the saved 20 Mbit/s; since then it drifted towards the
	// 10 Mbit/s base or, on a loaded machine, cut for the delays it saw.
	// A restart from base would start at 10000 whatever it had reached.
	if math.Abs(from-reached) > 1 || from == 0 {
		t.Errorf("the reloaded link started from %v kbit/s, want the %v kbit/s it had reached:\n%s", from, reached, tail(out, 1500))
	}
	if reached == 10000 {
		t.Logf("the link had reached its base rate before the reload: a restart from base would have passed too")
	}

	// SIGTERM: exit 0, shapers at base, the state file valid.
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the daemon exited with %v; log:\n%s", err, tail(log.String(), 3000))
	}
	if !l.holds("ifb4wan0", "10Mbit") {
		t.Errorf("download shaper after exit = %q %q, want the base rate 10Mbit", l.qdiscs("ifb4wan0"), l.classes("ifb4wan0"))
	}
	if !l.holds("wan0", "5Mbit") {
		t.Errorf("upload shaper after exit = %q %q, want the base rate 5Mbit", l.qdiscs("wan0"), l.classes("wan0"))
	}
	var st struct {
		Links map[string]struct {
			DownKbit float64 `json:"down_kbit"`
		} `json:"links"`
	}
	if b, err := os.ReadFile(state); err != nil || json.Unmarshal(b, &st) != nil || st.Links["wan"].DownKbit == 0 {
		t.Errorf("state file after exit: %v %+v", err, st)
	}

	// kill -9, then a restart resumes from the state file.
	os.WriteFile(state, []byte(`{"version": 1, "links": {"wan": {"down_kbit": 30000, "up_kbit": 6000}}}`), 0o644)
	cmd, log = l.start(t)
	eventually(t, settle, "the shaping from the state's rates", func() bool {
		return strings.Contains(log.String(), `"dir":"down","from_kbit":30000`)
	}, log)
	cmd.Process.Kill()
	cmd.Wait()
	if b, err := os.ReadFile(state); err != nil || json.Unmarshal(b, &st) != nil {
		t.Errorf("state file after kill -9 is not valid: %v", err)
	}
	cmd, log = l.start(t)
	eventually(t, settle, "a restart after kill -9 resuming", func() bool {
		return strings.Contains(log.String(), `"reason":"start"`) && l.shaped("ifb4wan0")
	}, log)
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Errorf("the restarted daemon exited with %v", err)
	}
}

// TestDaemonCakeNotSupported: a link that cannot be shaped ends the daemon
// with an error (exit status 1) instead of leaving it idle. It needs a
// kernel without CAKE: a run with AUTOSHAPE_REAL_KERNEL=1 leaves it out by
// name.
func TestDaemonCakeNotSupported(t *testing.T) {
	l := newDaemonLab(t)
	kerneltest.RequireNoQdisc(t, "cake")
	l.setBackend(t, "cake")
	cmd, log := l.start(t)
	errc := make(chan error, 1)
	go func() { errc <- cmd.Wait() }()
	select {
	case err := <-errc:
		var exit *exec.ExitError
		if !asExit(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(log.String(), "--backend htb") {
			t.Errorf("the daemon ended with %v, want exit status 1 suggesting --backend htb; log:\n%s", err, tail(log.String(), 2000))
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the daemon did not end on a kernel without CAKE; log:\n%s", tail(log.String(), 2000))
	}
}

// blast sends UDP datagrams of 1400 bytes from the namespace ns to dst at
// about rate bit/s until stop is closed.
func blast(t *testing.T, ns, dst string, rate float64, stop <-chan struct{}) {
	t.Helper()
	ready := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // thrown away with the goroutine
		h, err := netns.GetFromName(ns)
		if err == nil {
			err = netns.Set(h)
			h.Close()
		}
		var conn net.Conn
		if err == nil {
			conn, err = net.Dial("udp", dst)
		}
		ready <- err
		if err != nil {
			return
		}
		defer conn.Close()
		buf := make([]byte, 1400)
		per := time.Duration(float64(time.Second) * 1400 * 8 / rate * 10)
		tick := time.NewTicker(per)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				for range 10 {
					conn.Write(buf)
				}
			}
		}
	}()
	if err := <-ready; err != nil {
		t.Fatalf("failed to start the load in %s: %v", ns, err)
	}
}

// TestDaemonCutsOnBloatedLink: behind an 8 Mbit/s bottleneck with half a
// second of buffer (the "ISP" on the reflector side), a download load of
// 12 Mbit/s bloats the link; the daemon, starting at 10 Mbit/s, cuts.
func TestDaemonCutsOnBloatedLink(t *testing.T) {
	forBackends(t, testDaemonCutsOnBloatedLink)
}

func testDaemonCutsOnBloatedLink(t *testing.T, l *daemonLab) {
	mustRun(t, "tc", "-n", l.reflector, "qdisc", "add", "dev", "rf0", "root", "handle", "1:", "htb", "default", "1")
	mustRun(t, "tc", "-n", l.reflector, "class", "add", "dev", "rf0", "parent", "1:", "classid", "1:1", "htb", "rate", "8mbit")
	mustRun(t, "tc", "-n", l.reflector, "qdisc", "add", "dev", "rf0", "parent", "1:1", "bfifo", "limit", "500000")
	cmd, log := l.start(t)
	eventually(t, settle, "the shaping", func() bool { return l.shaped("ifb4wan0") }, log)
	stop := make(chan struct{})
	defer close(stop)
	blast(t, l.reflector, "10.79.0.1:9", 12e6, stop)
	eventually(t, 15*time.Second, "a download cut for the bloat", func() bool {
		out := log.String()
		return strings.Contains(out, `"dir":"down"`) && (strings.Contains(out, `"reason":"bloat"`) ||
			strings.Contains(out, `"reason":"ease"`) || strings.Contains(out, `"reason":"capacity_drop"`))
	}, log)
	for _, line := range strings.Split(log.String(), "\n") {
		if strings.Contains(line, `"dir":"down"`) && !strings.Contains(line, `"reason":"start"`) && !strings.Contains(line, `"reason":"decay"`) {
			t.Logf("%s", line)
			break
		}
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Errorf("the daemon exited with %v", err)
	}
}

// TestDaemonDryRun: --dry-run decides and logs but touches no qdisc.
func TestDaemonDryRun(t *testing.T) {
	forBackends(t, testDaemonDryRun)
}

func testDaemonDryRun(t *testing.T, l *daemonLab) {
	before, _ := exec.Command("tc", "-n", l.router, "qdisc", "show").CombinedOutput()
	cmd, log := l.start(t, "--dry-run")
	eventually(t, settle, "dry-run decisions", func() bool {
		return strings.Contains(log.String(), `"qdisc":"dry-run"`)
	}, log)
	after, _ := exec.Command("tc", "-n", l.router, "qdisc", "show").CombinedOutput()
	if string(after) != string(before) {
		t.Errorf("--dry-run changed the qdiscs:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Errorf("the daemon exited with %v", err)
	}
}

// labLock holds the host-wide lab lock for the rest of the test: these tests
// load links with traffic, and the lab's measurements in other packages,
// which go test runs in parallel, must not share the CPUs with them.
func labLock(t *testing.T) {
	t.Helper()
	release, err := lab.Exclusive()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
}

// TestDaemonRefusesForeignRoot: in setup mode, shaping that autoshape did
// not create (sqm-scripts') ends the daemon with exit status 1 and a message
// naming the qdisc and the replace key; nothing is changed, and it does not
// retry for ever.
func TestDaemonRefusesForeignRoot(t *testing.T) {
	forBackends(t, func(t *testing.T, l *daemonLab) {
		l.sqmLike(t)
		before := l.nsSnapshot(t)
		cmd, log := l.start(t)
		errc := make(chan error, 1)
		go func() { errc <- cmd.Wait() }()
		select {
		case err := <-errc:
			var exit *exec.ExitError
			if !asExit(err, &exit) || exit.ExitCode() != 1 {
				t.Errorf("the daemon ended with %v, want exit status 1; log:\n%s", err, tail(log.String(), 2000))
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("the daemon did not end over a foreign root; log:\n%s", tail(log.String(), 2000))
		}
		for _, want := range []string{`\"wan0\" has a ` + l.backend + ` qdisc`, "did not create", "replace = true"} {
			if !strings.Contains(log.String(), want) {
				t.Errorf("the daemon's log lacks %q:\n%s", want, tail(log.String(), 2000))
			}
		}
		if after := l.nsSnapshot(t); after != before {
			t.Errorf("the daemon changed sqm-scripts' shaping:\nbefore:\n%s\nafter:\n%s", before, after)
		}
	})
}

// TestDaemonReplace: with replace = true the daemon replaces sqm-like roots
// with its own, and on exit with on_exit = "remove" removes only what it
// created: the roots go back to the kernel's default, sqm-scripts' IFB and
// ingress redirect stay.
func TestDaemonReplace(t *testing.T) {
	forBackends(t, func(t *testing.T, l *daemonLab) {
		l.sqmLike(t)
		l.writeConfig(t, "")
		cfg, _ := os.ReadFile(l.config)
		cfg = []byte(strings.Replace(string(cfg), `on_exit = "base"`, `on_exit = "remove"`, 1))
		cfg = []byte(strings.Replace(string(cfg), "backend = ", "replace = true\nbackend = ", 1))
		os.WriteFile(l.config, cfg, 0o644)
		filters := mustRun(t, "tc", "-n", l.router, "filter", "show", "dev", "wan0", "ingress")
		cmd, log := l.start(t)
		eventually(t, settle, "autoshape's shaping in place of sqm-scripts'", func() bool {
			return l.shaped("wan0") && l.shaped("ifb4wan0")
		}, log)
		cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			t.Fatalf("the daemon exited with %v; log:\n%s", err, tail(log.String(), 2000))
		}
		for _, dev := range []string{"wan0", "ifb4wan0"} {
			if got := l.qdiscs(dev); !strings.Contains(got, " 0: root") {
				t.Errorf("%s's qdiscs after exit = %q, want the kernel's default root", dev, got)
			}
		}
		if got := mustRun(t, "tc", "-n", l.router, "filter", "show", "dev", "wan0", "ingress"); got != filters {
			t.Errorf("ingress filters after exit = %q, want sqm-scripts' as they were, %q", got, filters)
		}
	})
}

// redirected reports whether wan0 has an ingress qdisc with a filter that
// redirects to ifb4wan0, read over netlink as shaped does.
func (l *daemonLab) redirected() bool {
	h, err := l.netlink()
	if err != nil {
		return false
	}
	defer h.Close()
	wan, err := h.LinkByName("wan0")
	if err != nil {
		return false
	}
	ifb, err := h.LinkByName("ifb4wan0")
	if err != nil {
		return false
	}
	filters, err := h.FilterList(wan, vnetlink.MakeHandle(0xffff, 0))
	if err != nil {
		return false
	}
	for _, f := range filters {
		u, ok := f.(*vnetlink.U32)
		if !ok {
			continue
		}
		for _, a := range u.Actions {
			if m, ok := a.(*vnetlink.MirredAction); ok && m.Ifindex == ifb.Attrs().Index {
				return true
			}
		}
	}
	return false
}

// warnings returns the daemon's WARN lines about a change to the shaping
// on dev that contain all of want.
func warnings(log *safeBuffer, dev string, want ...string) []string {
	var got []string
	for _, line := range strings.Split(log.String(), "\n") {
		if !strings.Contains(line, `"level":"warn"`) || !strings.Contains(line, `"dev":"`+dev+`"`) {
			continue
		}
		ok := true
		for _, w := range want {
			ok = ok && strings.Contains(line, w)
		}
		if ok {
			got = append(got, line)
		}
	}
	return got
}

// foreignRoot puts a root qdisc of the lab's backend with handle 5: in
// place of dev's root, as another shaper would.
func (l *daemonLab) foreignRoot(t *testing.T, dev string) {
	t.Helper()
	tc := func(args ...string) { mustRun(t, "tc", append([]string{"-n", l.router}, args...)...) }
	if l.backend == "cake" {
		tc("qdisc", "replace", "dev", dev, "root", "handle", "5:", "cake", "bandwidth", "3mbit")
		return
	}
	tc("qdisc", "replace", "dev", dev, "root", "handle", "5:", "htb", "default", "1")
	tc("class", "add", "dev", dev, "parent", "5:", "classid", "5:1", "htb", "rate", "3mbit")
}

// TestDaemonRestoresItsShaping: what someone deletes of autoshape's own
// shaping (the ingress qdisc with the redirect, a root qdisc) is made again,
// with one WARN line per event naming the device, what was found and what
// was done; a root that another shaper put in place of autoshape's is left
// alone, with one WARN line, however long it stays, and the daemon goes on.
func TestDaemonRestoresItsShaping(t *testing.T) {
	forBackends(t, testDaemonRestoresItsShaping)
}

func testDaemonRestoresItsShaping(t *testing.T, l *daemonLab) {
	cmd, log := l.start(t)
	eventually(t, settle, "the shaping", func() bool {
		return l.shaped("wan0") && l.shaped("ifb4wan0") && l.redirected()
	}, log)

	mustRun(t, "tc", "-n", l.router, "qdisc", "del", "dev", "wan0", "ingress")
	eventually(t, settle, "the ingress qdisc and the redirect made again, with a warning", func() bool {
		return l.redirected() && len(warnings(log, "wan0", "ingress")) == 1
	}, log)

	l.foreignRoot(t, "wan0")
	eventually(t, settle, "a warning about the foreign root", func() bool {
		return len(warnings(log, "wan0", l.backend+" 5:")) == 1
	}, log)
	foreign := l.qdiscs("wan0") + l.classes("wan0")
	// The daemon goes on checking: a second deletion of the ingress qdisc
	// is noticed and repaired after the foreign root was seen.
	mustRun(t, "tc", "-n", l.router, "qdisc", "del", "dev", "wan0", "ingress")
	eventually(t, settle, "the ingress qdisc made again a second time", func() bool {
		return l.redirected() && len(warnings(log, "wan0", "ingress")) == 2
	}, log)
	if got := l.qdiscs("wan0") + l.classes("wan0"); stripIngress(got) != stripIngress(foreign) {
		t.Errorf("the daemon changed the foreign root:\nbefore:\n%s\nafter:\n%s", foreign, got)
	}
	if got := warnings(log, "wan0", l.backend+" 5:"); len(got) != 1 {
		t.Errorf("%d warnings about the foreign root, want 1:\n%s", len(got), strings.Join(got, "\n"))
	}
	if cmd.ProcessState != nil {
		t.Fatalf("the daemon ended: %v; log:\n%s", cmd.ProcessState, tail(log.String(), 3000))
	}

	// The foreign root goes: autoshape's own is made again.
	mustRun(t, "tc", "-n", l.router, "qdisc", "del", "dev", "wan0", "root")
	eventually(t, settle, "autoshape's root made again", func() bool { return l.shaped("wan0") }, log)

	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the daemon exited with %v; log:\n%s", err, tail(log.String(), 3000))
	}
	for _, line := range strings.Split(log.String(), "\n") {
		if strings.Contains(line, `"level":"warn"`) {
			t.Logf("%s", line)
		}
	}
}

// stripIngress drops the ingress qdisc's line from tc's output, and CAKE's
// classes: they are its flows' queues, which come and go with the traffic.
func stripIngress(s string) string {
	var keep []string
	for _, line := range strings.Split(s, "\n") {
		if !strings.Contains(line, "ingress") && !strings.HasPrefix(line, "class cake ") {
			keep = append(keep, line)
		}
	}
	return strings.Join(keep, "\n")
}

// TestDaemonAttachFollowsAReplacedRoot: in attach mode, a root that takes
// the place of the one the daemon attached to (sqm-scripts restarted) is
// attached to, with one WARN line, and gets the controller's rate; a
// deleted ingress qdisc is reported once and not made: attach mode creates
// nothing.
func TestDaemonAttachFollowsAReplacedRoot(t *testing.T) {
	forBackends(t, func(t *testing.T, l *daemonLab) {
		l.sqmLike(t)
		cfg, _ := os.ReadFile(l.config)
		os.WriteFile(l.config, []byte(strings.Replace(string(cfg), "backend = ", "mode = \"attach\"\nbackend = ", 1)), 0o644)
		cmd, log := l.start(t)
		eventually(t, settle, "the upload rate written on sqm-scripts' root", func() bool {
			return strings.Contains(log.String(), `"iface":"wan0","qdisc":"`+l.backend+`"}`)
		}, log)

		l.foreignRoot(t, "wan0")
		eventually(t, settle, "the new root attached to and given the controller's rate", func() bool {
			return len(warnings(log, "wan0", l.backend+" 5:", "attached to it")) == 1 &&
				strings.Contains(l.classes("wan0")+l.qdiscs("wan0"), l.backend+" 5:") && !l.holds("wan0", "3Mbit")
		}, log)
		mustRun(t, "tc", "-n", l.router, "qdisc", "del", "dev", "wan0", "ingress")
		eventually(t, settle, "a warning about the deleted ingress qdisc", func() bool {
			return len(warnings(log, "wan0", "no ingress qdisc")) == 1
		}, log)
		snap := l.nsSnapshot(t)
		if strings.Contains(snap, "a5:") || strings.Contains(snap, "ingress") {
			t.Errorf("the daemon in attach mode created shaping:\n%s", snap)
		}

		cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			t.Fatalf("the daemon exited with %v; log:\n%s", err, tail(log.String(), 3000))
		}
		if got := warnings(log, "wan0", "no ingress qdisc"); len(got) != 1 {
			t.Errorf("%d warnings about the ingress qdisc, want 1:\n%s", len(got), strings.Join(got, "\n"))
		}
	})
}

// TestDaemonReloadAppliesSettings: SIGHUP applies a new log level, a new
// metrics address and a new decision file while the link runs on
// unchanged: after the reload the metrics are served at the new address
// only, the link's next decision goes to the new file, and INFO lines stop
// at level warn.
func TestDaemonReloadAppliesSettings(t *testing.T) {
	l := newDaemonLab(t)
	cmd, log := l.start(t)
	eventually(t, settle, "the shaping, its first decisions and the metrics", func() bool {
		_, err := scrapeAt(l.router, "127.0.0.1:19877")
		return strings.Count(log.String(), `"reason":"start"`) == 2 && err == nil
	}, log)

	cfg, _ := os.ReadFile(l.config)
	text := strings.Replace(string(cfg), `level = "debug"`, `level = "warn"`, 1)
	text = strings.Replace(text, `listen = "127.0.0.1:19877"`, `listen = "127.0.0.1:19878"`, 1)
	text = strings.Replace(text, "decisions.jsonl", "decisions-2.jsonl", 1)
	os.WriteFile(l.config, []byte(text), 0o644)
	cmd.Process.Signal(syscall.SIGHUP)
	eventually(t, settle, "the metrics at the new address", func() bool {
		_, err := scrapeAt(l.router, "127.0.0.1:19878")
		return err == nil
	}, log)
	if _, err := scrapeAt(l.router, "127.0.0.1:19877"); err == nil {
		t.Errorf("the metrics are still served at the old address")
	}

	// A decision of the running link: its root made again is written the
	// controller's rate (reason "start"), after a WARN line.
	mustRun(t, "tc", "-n", l.router, "qdisc", "del", "dev", "wan0", "root")
	newFile := filepath.Join(l.dir, "decisions-2.jsonl")
	eventually(t, settle, "the restart's decision in the new decision file", func() bool {
		b, _ := os.ReadFile(newFile)
		return strings.Contains(string(b), `"reason":"start"`)
	}, log)
	out := log.String()
	after := out[strings.LastIndex(out, `"msg":"reloading"`):]
	if strings.Contains(after, `"msg":"rate change"`) {
		t.Errorf("INFO lines after the reload to level warn:\n%s", tail(after, 2000))
	}
	if !strings.Contains(after, `"level":"warn"`) {
		t.Errorf("no WARN line after the reload:\n%s", tail(after, 2000))
	}

	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the daemon exited with %v; log:\n%s", err, tail(log.String(), 3000))
	}
}
