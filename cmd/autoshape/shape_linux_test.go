//go:build linux

package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/vishvananda/netns"

	"github.com/autoshape/autoshape/internal/kerneltest"
)

// inTestNS runs args through the command line inside a fresh network
// namespace holding a veth "wan0", on a thread locked into it, and returns
// the namespace's name for checks with iproute2.
func testNS(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates a network namespace and shapes a veth in it")
	}
	labLock(t)
	b := make([]byte, 4)
	rand.Read(b)
	name := "as-shape-" + hex.EncodeToString(b)
	for _, args := range [][]string{
		{"netns", "add", name},
		{"-n", name, "link", "add", "wan0", "type", "veth", "peer", "name", "lan0"},
		{"-n", name, "link", "set", "wan0", "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
		if args[0] == "netns" {
			t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
		}
	}
	return name
}

// runIn runs the command line in the namespace ns.
func runIn(t *testing.T, ns string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		// The thread stays locked and is thrown away with the goroutine, so
		// no other goroutine ever runs in the namespace.
		runtime.LockOSThread()
		h, err := netns.GetFromName(ns)
		if err != nil {
			t.Errorf("failed to open namespace %s: %v", ns, err)
			return
		}
		defer h.Close()
		if err := netns.Set(h); err != nil {
			t.Errorf("failed to enter namespace %s: %v", ns, err)
			return
		}
		var out, errOut bytes.Buffer
		code = run(args, &out, &errOut)
		stdout, stderr = out.String(), errOut.String()
	}()
	<-done
	return code, stdout, stderr
}

func nsState(t *testing.T, ns string) string {
	t.Helper()
	var all []string
	for _, args := range [][]string{
		{"ip", "-n", ns, "-o", "link"},
		{"tc", "-n", ns, "qdisc", "show"},
		{"tc", "-n", ns, "filter", "show", "dev", "wan0", "ingress"},
	} {
		out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
		all = append(all, string(out))
	}
	return stableLinks(strings.Join(all, ""))
}

// stableLinks keeps, of `ip -o link` lines, what does not change by
// itself: names, flags but the carrier's (they settle a while after a link
// comes up) and aliases; counters and states go. Other lines stay.
func stableLinks(text string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(text, "\n") {
		f := strings.Fields(l)
		if len(f) < 3 || !strings.HasSuffix(f[0], ":") || !strings.HasPrefix(f[2], "<") {
			b.WriteString(l)
			continue
		}
		var flags []string
		for _, fl := range strings.Split(strings.Trim(f[2], "<>"), ",") {
			if fl != "NO-CARRIER" && fl != "LOWER_UP" && fl != "M-DOWN" {
				flags = append(flags, fl)
			}
		}
		b.WriteString(f[1] + " <" + strings.Join(flags, ",") + ">")
		if i := strings.Index(l, " alias "); i >= 0 {
			b.WriteString(" alias " + strings.Fields(l[i:])[1])
		}
		b.WriteString("\n")
	}
	return b.String()
}

func TestShapeAndRemove(t *testing.T) {
	for _, backend := range []string{"htb", "cake"} {
		t.Run(backend, func(t *testing.T) {
			ns := testNS(t)
			kerneltest.RequireQdisc(t, backend)
			before := nsState(t, ns)
			code, out, errOut := runIn(t, ns, "shape", "--iface", "wan0", "--backend", backend, "--up", "10mbit", "--down", "20mbit", "--overhead", "44", "--atm")
			if code != 0 {
				t.Fatalf("shape exited %d: %s", code, errOut)
			}
			if !strings.Contains(out, "up 10mbit on wan0") || !strings.Contains(out, "down 20mbit on ifb4wan0") {
				t.Errorf("shape printed %q", out)
			}
			if backend == "htb" {
				classes, _ := exec.Command("tc", "-n", ns, "-d", "class", "show", "dev", "wan0").CombinedOutput()
				if !strings.Contains(string(classes), "rate 10Mbit") || !strings.Contains(string(classes), "linklayer atm") {
					t.Errorf("wan0 classes = %s, want rate 10Mbit with linklayer atm", classes)
				}
				classes, _ = exec.Command("tc", "-n", ns, "class", "show", "dev", "ifb4wan0").CombinedOutput()
				if !strings.Contains(string(classes), "rate 20Mbit") {
					t.Errorf("ifb4wan0 classes = %s, want rate 20Mbit", classes)
				}
			} else {
				qdiscs, _ := exec.Command("tc", "-n", ns, "qdisc", "show", "dev", "wan0").CombinedOutput()
				if !strings.Contains(string(qdiscs), "qdisc cake a5: root") || !strings.Contains(string(qdiscs), "bandwidth 10Mbit") || !strings.Contains(string(qdiscs), "atm overhead 44") {
					t.Errorf("wan0 qdiscs = %s, want cake a5: at 10Mbit with atm overhead 44", qdiscs)
				}
				qdiscs, _ = exec.Command("tc", "-n", ns, "qdisc", "show", "dev", "ifb4wan0").CombinedOutput()
				if !strings.Contains(string(qdiscs), "bandwidth 20Mbit") || !strings.Contains(string(qdiscs), " ingress ") {
					t.Errorf("ifb4wan0 qdiscs = %s, want cake at 20Mbit with ingress", qdiscs)
				}
			}

			if code, _, errOut := runIn(t, ns, "shape", "--iface", "wan0", "--remove"); code != 0 {
				t.Fatalf("shape --remove exited %d: %s", code, errOut)
			}
			if after := nsState(t, ns); after != before {
				t.Errorf("shape --remove left the namespace changed:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
}

// sqmLikeIn sets up shaping in ns as sqm-scripts does with the backend's
// qdisc: roots on wan0 and on an IFB ifb4wan0 (no alias), the kernel
// picking CAKE's handles, and wan0's ingress redirected to the IFB.
func sqmLikeIn(t *testing.T, ns, backend string) {
	t.Helper()
	tc := func(args ...string) { mustRun(t, "tc", append([]string{"-n", ns}, args...)...) }
	mustRun(t, "ip", "-n", ns, "link", "add", "ifb4wan0", "type", "ifb")
	mustRun(t, "ip", "-n", ns, "link", "set", "ifb4wan0", "up")
	for _, dev := range []string{"wan0", "ifb4wan0"} {
		if backend == "cake" {
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

// TestShapeLeavesForeign: over sqm-like shaping, `shape` exits 2 naming the
// root qdisc and --replace, and `shape --remove` removes nothing; both
// leave sqm-scripts' roots, IFB and redirect as they were.
func TestShapeLeavesForeign(t *testing.T) {
	for _, backend := range []string{"htb", "cake"} {
		t.Run(backend, func(t *testing.T) {
			ns := testNS(t)
			kerneltest.RequireQdisc(t, backend)
			sqmLikeIn(t, ns, backend)
			before := nsState(t, ns)
			for _, b := range []string{"htb", backend} {
				code, _, errOut := runIn(t, ns, "shape", "--iface", "wan0", "--backend", b, "--up", "10mbit", "--down", "20mbit")
				if code != 2 {
					t.Errorf("shape --backend %s over sqm-scripts' %s: exit %d, want 2 (stderr %q)", b, backend, code, errOut)
				}
				for _, want := range []string{`"wan0" has a ` + backend + " qdisc", "did not create", "--replace"} {
					if !strings.Contains(errOut, want) {
						t.Errorf("shape --backend %s: stderr %q lacks %q", b, errOut, want)
					}
				}
			}
			if code, out, errOut := runIn(t, ns, "shape", "--iface", "wan0", "--remove"); code != 0 {
				t.Errorf("shape --remove exited %d: %s", code, errOut)
			} else if !strings.Contains(out, "left alone") {
				t.Errorf("shape --remove printed %q", out)
			}
			if after := nsState(t, ns); after != before {
				t.Errorf("shape changed sqm-scripts' shaping:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
}

// TestShapeReplace: with --replace, `shape` replaces sqm-like roots with
// its own; `shape --remove` then removes only those, leaving sqm-scripts'
// IFB and ingress redirect.
func TestShapeReplace(t *testing.T) {
	for _, backend := range []string{"htb", "cake"} {
		t.Run(backend, func(t *testing.T) {
			ns := testNS(t)
			kerneltest.RequireQdisc(t, backend)
			sqmLikeIn(t, ns, backend)
			filters := mustRun(t, "tc", "-n", ns, "filter", "show", "dev", "wan0", "ingress")
			code, _, errOut := runIn(t, ns, "shape", "--iface", "wan0", "--backend", backend, "--up", "10mbit", "--down", "20mbit", "--replace")
			if code != 0 {
				t.Fatalf("shape --replace exited %d: %s", code, errOut)
			}
			for _, dev := range []string{"wan0", "ifb4wan0"} {
				if got := mustRun(t, "tc", "-n", ns, "qdisc", "show", "dev", dev); !strings.Contains(got, "qdisc "+backend+" a5: root") {
					t.Errorf("%s's qdiscs = %q, want autoshape's %s root", dev, got, backend)
				}
			}
			if code, _, errOut := runIn(t, ns, "shape", "--iface", "wan0", "--remove"); code != 0 {
				t.Fatalf("shape --remove exited %d: %s", code, errOut)
			}
			for _, dev := range []string{"wan0", "ifb4wan0"} {
				if got := mustRun(t, "tc", "-n", ns, "qdisc", "show", "dev", dev, "root"); !strings.Contains(got, " 0: root") {
					t.Errorf("%s's root after --remove = %q, want the kernel's default", dev, got)
				}
			}
			if got := mustRun(t, "tc", "-n", ns, "filter", "show", "dev", "wan0", "ingress"); got != filters {
				t.Errorf("ingress filters after --remove = %q, want sqm-scripts' as they were, %q", got, filters)
			}
		})
	}
}

// TestShapeCakeNotSupported: on a kernel without CAKE, `shape` suggests
// HTB, exits 2 and leaves nothing. It needs such a kernel: a run with
// AUTOSHAPE_REAL_KERNEL=1 leaves it out by name.
func TestShapeCakeNotSupported(t *testing.T) {
	ns := testNS(t)
	kerneltest.RequireNoQdisc(t, "cake")
	before := nsState(t, ns)
	code, _, errOut := runIn(t, ns, "shape", "--iface", "wan0", "--up", "10mbit", "--down", "20mbit")
	if code != 2 || !strings.Contains(errOut, "--backend htb") {
		t.Errorf("exit status = %d, stderr %q; want 2 suggesting --backend htb", code, errOut)
	}
	if after := nsState(t, ns); after != before {
		t.Errorf("a failed shape left the namespace changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

func TestShapeErrorsLeaveNothing(t *testing.T) {
	ns := testNS(t)
	before := nsState(t, ns)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"missing interface", []string{"shape", "--iface", "nosuch0", "--backend", "htb", "--up", "10mbit", "--down", "20mbit"}, `interface "nosuch0"`},
		{"zero rate", []string{"shape", "--iface", "wan0", "--backend", "htb", "--up", "0", "--down", "20mbit"}, "--up 0"},
		{"garbage rate", []string{"shape", "--iface", "wan0", "--backend", "htb", "--up", "10mbit", "--down", "lots"}, `invalid rate "lots"`},
		{"unknown backend", []string{"shape", "--iface", "wan0", "--backend", "tbf", "--up", "10mbit", "--down", "20mbit"}, `unknown backend "tbf"`},
		{"remove with rates", []string{"shape", "--iface", "wan0", "--remove", "--up", "1mbit"}, "takes no rates"},
		{"remove with replace", []string{"shape", "--iface", "wan0", "--remove", "--replace"}, "exclude each other"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errOut := runIn(t, ns, tt.args...)
			if code != 2 {
				t.Errorf("exit status = %d, want 2 (stderr %q)", code, errOut)
			}
			if !strings.Contains(errOut, tt.want) {
				t.Errorf("stderr = %q, want it to mention %q", errOut, tt.want)
			}
			if after := nsState(t, ns); after != before {
				t.Errorf("a failed shape left the namespace changed:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
}

// TestShapeAgain: `shape` over autoshape's own shaping updates it: the
// same framing changes the rates in place, another framing builds the roots
// again. Either way it exits 0 with one IFB and one redirect, and --remove
// then leaves the namespace as it was.
func TestShapeAgain(t *testing.T) {
	for _, backend := range []string{"htb", "cake"} {
		t.Run(backend, func(t *testing.T) {
			ns := testNS(t)
			kerneltest.RequireQdisc(t, backend)
			before := nsState(t, ns)
			for _, step := range []struct {
				up, down string
				framing  []string
				want     string // the framing the roots then show
			}{
				{"10mbit", "20mbit", []string{"--overhead", "44", "--atm"}, "overhead 44"},
				{"12mbit", "25mbit", []string{"--overhead", "44", "--atm"}, "overhead 44"},
				{"8mbit", "16mbit", []string{"--overhead", "18"}, "overhead 18"},
			} {
				args := append([]string{"shape", "--iface", "wan0", "--backend", backend, "--up", step.up, "--down", step.down}, step.framing...)
				code, out, errOut := runIn(t, ns, args...)
				if code != 0 {
					t.Fatalf("%s exited %d: %s", strings.Join(args, " "), code, errOut)
				}
				if !strings.Contains(out, "up "+step.up+" on wan0") {
					t.Errorf("%s printed %q", strings.Join(args, " "), out)
				}
				for dev, rate := range map[string]string{"wan0": step.up, "ifb4wan0": step.down} {
					if got := shapedRate(t, ns, backend, dev); !strings.Contains(strings.ToLower(got), " "+rate+" ") || !strings.Contains(got, step.want) {
						t.Errorf("after %s: %s holds %q, want %s with %s", strings.Join(args, " "), dev, got, rate, step.want)
					}
				}
				if got := mustRun(t, "ip", "-n", ns, "-o", "link", "show", "type", "ifb"); strings.Count(got, "ifb4wan0") != 1 {
					t.Errorf("IFBs = %q, want one ifb4wan0", got)
				}
				if got := mustRun(t, "tc", "-n", ns, "filter", "show", "dev", "wan0", "ingress"); strings.Count(got, "Redirect to device ifb4wan0") != 1 {
					t.Errorf("ingress filters = %q, want one redirect", got)
				}
			}
			if code, _, errOut := runIn(t, ns, "shape", "--iface", "wan0", "--remove"); code != 0 {
				t.Fatalf("shape --remove exited %d: %s", code, errOut)
			}
			if after := nsState(t, ns); after != before {
				t.Errorf("shape --remove left the namespace changed:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
}

// shapedRate is what holds dev's rate and framing, as tc prints it: the
// HTB classes, or the CAKE root qdisc.
func shapedRate(t *testing.T, ns, backend, dev string) string {
	t.Helper()
	if backend == "htb" {
		return mustRun(t, "tc", "-n", ns, "-d", "class", "show", "dev", dev, "classid", "a5:1")
	}
	return mustRun(t, "tc", "-n", ns, "qdisc", "show", "dev", dev, "root")
}
