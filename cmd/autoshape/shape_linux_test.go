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
	for _, args := range [][]string{{"ip", "-n", ns, "-br", "link"}, {"tc", "-n", ns, "qdisc", "show"}} {
		out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
		all = append(all, string(out))
	}
	return strings.Join(all, "")
}

func TestShapeHTBAndRemove(t *testing.T) {
	ns := testNS(t)
	before := nsState(t, ns)
	code, out, errOut := runIn(t, ns, "shape", "--iface", "wan0", "--backend", "htb", "--up", "10mbit", "--down", "20mbit", "--overhead", "44", "--atm")
	if code != 0 {
		t.Fatalf("shape exited %d: %s", code, errOut)
	}
	if !strings.Contains(out, "up 10mbit on wan0") || !strings.Contains(out, "down 20mbit on ifb4wan0") {
		t.Errorf("shape printed %q", out)
	}
	classes, _ := exec.Command("tc", "-n", ns, "-d", "class", "show", "dev", "wan0").CombinedOutput()
	if !strings.Contains(string(classes), "rate 10Mbit") || !strings.Contains(string(classes), "linklayer atm") {
		t.Errorf("wan0 classes = %s, want rate 10Mbit with linklayer atm", classes)
	}
	classes, _ = exec.Command("tc", "-n", ns, "class", "show", "dev", "ifb4wan0").CombinedOutput()
	if !strings.Contains(string(classes), "rate 20Mbit") {
		t.Errorf("ifb4wan0 classes = %s, want rate 20Mbit", classes)
	}

	if code, _, errOut := runIn(t, ns, "shape", "--iface", "wan0", "--remove"); code != 0 {
		t.Fatalf("shape --remove exited %d: %s", code, errOut)
	}
	if after := nsState(t, ns); after != before {
		t.Errorf("shape --remove left the namespace changed:\nbefore:\n%s\nafter:\n%s", before, after)
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
		{"kernel without cake", []string{"shape", "--iface", "wan0", "--up", "10mbit", "--down", "20mbit"}, "--backend htb"},
		{"missing interface", []string{"shape", "--iface", "nosuch0", "--backend", "htb", "--up", "10mbit", "--down", "20mbit"}, `interface "nosuch0"`},
		{"zero rate", []string{"shape", "--iface", "wan0", "--backend", "htb", "--up", "0", "--down", "20mbit"}, "--up 0"},
		{"garbage rate", []string{"shape", "--iface", "wan0", "--backend", "htb", "--up", "10mbit", "--down", "lots"}, `invalid rate "lots"`},
		{"unknown backend", []string{"shape", "--iface", "wan0", "--backend", "tbf", "--up", "10mbit", "--down", "20mbit"}, `unknown backend "tbf"`},
		{"remove with rates", []string{"shape", "--iface", "wan0", "--remove", "--up", "1mbit"}, "takes no rates"},
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
