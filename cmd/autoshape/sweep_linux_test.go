//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/autoshape/autoshape/sweep"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// serveLoadIn serves a tcp: load endpoint for the sweep inside the
// namespace ns. The server's connections use CUBIC.
func serveLoadIn(t *testing.T, ns, addr string) {
	t.Helper()
	ready := make(chan error, 1)
	var ln net.Listener
	go func() {
		runtime.LockOSThread() // thrown away with the goroutine
		h, err := netns.GetFromName(ns)
		if err == nil {
			err = netns.Set(h)
			h.Close()
		}
		if err == nil {
			lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
				return c.Control(func(fd uintptr) {
					_ = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, "cubic")
				})
			}}
			ln, err = lc.Listen(t.Context(), "tcp", addr)
		}
		ready <- err
	}()
	if err := <-ready; err != nil {
		t.Fatalf("failed to listen in %s: %v", ns, err)
	}
	// The linklab load endpoint's protocol: the first byte asks for a
	// download ('D': the server sends until the client goes) or an upload
	// ('U': the server reads and discards).
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				req := make([]byte, 1)
				if _, err := io.ReadFull(c, req); err != nil {
					return
				}
				if req[0] == 'U' {
					io.Copy(io.Discard, c)
					return
				}
				buf := make([]byte, 64<<10)
				for {
					if _, err := c.Write(buf); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close() })
}

// TestSweepOnBloatedLine: behind an 8 Mbit/s bottleneck with half a second
// of buffer, a download sweep finds the shaped steps within the budget and
// the unshaped one far above it, recommends a shaped rate, and removes the
// shaping it set up; the upload sweep's POST load reaches its shaped rate.
func TestSweepOnBloatedLine(t *testing.T) {
	l := newDaemonLab(t)
	// The load's server sits one hop behind the reflectors' namespace, which
	// forwards: a bottleneck on the sender's own interface would be kept
	// short by TCP small queues, one on a forwarding hop fills like an ISP's.
	server := l.reflector + "-s"
	mustRun(t, "ip", "netns", "add", server)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", server).Run() })
	mustRun(t, "ip", "-n", l.reflector, "link", "add", "sv0", "type", "veth", "peer", "name", "up0", "netns", server)
	mustRun(t, "ip", "-n", l.reflector, "addr", "add", "10.80.0.1/24", "dev", "sv0")
	mustRun(t, "ip", "-n", l.reflector, "link", "set", "sv0", "up")
	mustRun(t, "ip", "-n", server, "addr", "add", "10.80.0.2/24", "dev", "up0")
	mustRun(t, "ip", "-n", server, "link", "set", "up0", "up")
	mustRun(t, "ip", "-n", server, "link", "set", "lo", "up")
	mustRun(t, "ip", "-n", server, "route", "add", "default", "via", "10.80.0.1")
	mustRun(t, "ip", "-n", l.router, "route", "add", "10.80.0.0/24", "via", "10.79.0.2")
	mustRun(t, "ip", "netns", "exec", l.reflector, "sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward")
	// No super-packets: a short shaper queue would drop 64 KB at a time.
	mustRun(t, "ip", "-n", server, "link", "set", "dev", "up0", "gso_max_segs", "1")
	mustRun(t, "ip", "-n", l.router, "link", "set", "dev", "wan0", "gso_max_segs", "1")
	mustRun(t, "tc", "-n", l.reflector, "qdisc", "add", "dev", "rf0", "root", "handle", "1:", "htb", "default", "1")
	mustRun(t, "tc", "-n", l.reflector, "class", "add", "dev", "rf0", "parent", "1:", "classid", "1:1", "htb", "rate", "8mbit")
	mustRun(t, "tc", "-n", l.reflector, "qdisc", "add", "dev", "rf0", "parent", "1:1", "bfifo", "limit", "500000")
	serveLoadIn(t, server, "10.80.0.2:8080")

	cmd := exec.Command("ip", "netns", "exec", l.router, os.Args[0])
	cmd.Env = append(os.Environ(), "AUTOSHAPE_TEST_ARGS=sweep -c "+l.config+
		" --direction both --line-rate-down 8mbit --line-rate-up 4mbit --from 0.5 --to 1 --step 0.5 --hold 4s"+
		" --load tcp:10.80.0.2:8080 --streams 4 --json")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("sweep: %v; log:\n%s", err, tail(stderr.String(), 3000))
	}
	var rep sweep.Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("sweep output: %v: %s", err, stdout.String())
	}
	t.Logf("%s", stdout.String())
	if len(rep.Steps) != 6 {
		t.Fatalf("%d steps, want 6 (two fractions and unshaped, per direction)", len(rep.Steps))
	}
	down, up := rep.Steps[:3], rep.Steps[3:]
	if down[0].Direction != "down" || down[0].RateKbit != 4000 || down[2].RateKbit != 0 || up[0].Direction != "up" || up[0].RateKbit != 2000 {
		t.Fatalf("steps out of order: %+v", rep.Steps)
	}
	if d := down[0].Delay.P95; d > 15 {
		t.Errorf("download at half the bottleneck: p95 added delay %v ms, want within the 15 ms budget", d)
	}
	if d := down[2].Delay.P95; d < 50 {
		t.Errorf("unshaped download into a 500 ms buffer: p95 added delay %v ms, want bloat", d)
	}
	if g := down[0].GoodputKbit; g < 2500 || g > 4300 {
		t.Errorf("download goodput shaped at 4 Mbit/s: %v kbit/s", g)
	}
	if g := up[0].GoodputKbit; g < 1200 || g > 2200 {
		t.Errorf("upload goodput shaped at 2 Mbit/s: %v kbit/s", g)
	}
	if r := rep.Recommendation; r.DownKbit < 4000 || r.DownKbit > 8000 || r.BudgetMs != 15 {
		t.Errorf("recommendation %+v: want a shaped download rate and the 15 ms budget", r)
	}
	if out := l.classes("wan0") + l.classes("ifb4wan0"); strings.Contains(out, "htb") {
		t.Errorf("the sweep left its shaping behind:\n%s", out)
	}
}

// TestSweepInterruptedRestores: a load command that fails ends the sweep
// with an error; in setup mode the shaping it made is gone, in attach mode
// the shapers it found have their rates back.
func TestSweepInterruptedRestores(t *testing.T) {
	l := newDaemonLab(t)
	sweep := func() (int, string) {
		cmd := exec.Command("ip", "netns", "exec", l.router, os.Args[0])
		cmd.Env = append(os.Environ(), "AUTOSHAPE_TEST_ARGS=sweep -c "+l.config+
			" --direction both --line-rate-down 8mbit --line-rate-up 4mbit --from 0.5 --to 1 --step 0.5 --hold 2s --load exec:false")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		var exit *exec.ExitError
		if !asExit(err, &exit) {
			t.Fatalf("sweep: %v: %s", err, out.String())
		}
		return exit.ExitCode(), out.String()
	}
	if code, out := sweep(); code != 1 || !strings.Contains(out, "load failed") {
		t.Errorf("setup mode: exit %d, want 1 naming the failed load:\n%s", code, tail(out, 2000))
	}
	if out := l.classes("wan0") + l.classes("ifb4wan0"); strings.Contains(out, "htb") {
		t.Errorf("setup mode: the sweep left its shaping behind:\n%s", out)
	}

	// Attach mode, to shaping made beforehand at 10 and 5 Mbit/s.
	cmd := exec.Command("ip", "netns", "exec", l.router, os.Args[0])
	cmd.Env = append(os.Environ(), "AUTOSHAPE_TEST_ARGS=shape --iface wan0 --backend htb --down 10mbit --up 5mbit")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("shape: %v: %s", err, out)
	}
	b, err := os.ReadFile(l.config)
	if err != nil {
		t.Fatal(err)
	}
	attach := strings.Replace(string(b), "backend = \"htb\"\n", "backend = \"htb\"\nmode = \"attach\"\n", 1)
	if err := os.WriteFile(l.config, []byte(attach), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out := sweep(); code != 1 {
		t.Errorf("attach mode: exit %d, want 1:\n%s", code, tail(out, 2000))
	}
	if up, down := l.classes("wan0"), l.classes("ifb4wan0"); !strings.Contains(up, "rate 5Mbit") || !strings.Contains(down, "rate 10Mbit") {
		t.Errorf("attach mode: the rates were not restored:\nwan0: %s\nifb4wan0: %s", up, down)
	}
}

// TestSweepCtrlC: SIGINT in the middle of a step ends the sweep and removes
// the shaping it set up.
func TestSweepCtrlC(t *testing.T) {
	l := newDaemonLab(t)
	cmd := exec.Command("ip", "netns", "exec", l.router, os.Args[0])
	cmd.Env = append(os.Environ(), "AUTOSHAPE_TEST_ARGS=sweep -c "+l.config+
		" --direction down --line-rate-down 8mbit --from 0.5 --to 1 --step 0.5 --hold 30s --load exec:sleep${IFS}60") // no spaces: the test's arguments are split on them
	log := &safeBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, "the sweep's shaping", func() bool { return l.shaped("ifb4wan0") }, log)
	time.Sleep(time.Second)
	cmd.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("the sweep did not end on SIGINT; log:\n%s", tail(log.String(), 2000))
	}
	if out := l.classes("wan0") + l.classes("ifb4wan0"); strings.Contains(out, "htb") {
		t.Errorf("the sweep left its shaping behind after SIGINT:\n%s", out)
	}
}
