package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestUsageErrors: bad flags exit with status 2 and a message naming the
// problem, before anything is built.
func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "usage: linklab run"},
		{[]string{"walk"}, "usage: linklab run"},
		{[]string{"run", "--scenario", "moon"}, `--scenario "moon"`},
		{[]string{"run", "--scheme", "static:7"}, `scheme "static:7"`},
		{[]string{"run", "--scheme", "cake-autorate"}, `scheme "cake-autorate"`},
		{[]string{"run", "--duration", "1s"}, "--duration"},
		{[]string{"run", "--trace-down", "/no/such/trace"}, "/no/such/trace"},
		{[]string{"run", "--scheme", "autoshape", "--autoshape", "/no/such/autoshape"}, "--autoshape"},
		{[]string{"run", "stray"}, `unexpected argument "stray"`},
		{[]string{"run", "--scheme", "exec:"}, `scheme "exec:": want exec:COMMAND`},
		{[]string{"run", "--scheme", "classic:x"}, `scheme "classic:x"`},
		{[]string{"run", "--scheme", "classic", "--autoshape", "/no/such/autoshape"}, "--autoshape"},
	} {
		var stderr bytes.Buffer
		if code := run(tc.args, &bytes.Buffer{}, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr.String(), tc.want)
		}
	}
}

// TestBadPrefix: a LINKLAB_PREFIX the lab cannot use is a usage error,
// found before anything is built.
func TestBadPrefix(t *testing.T) {
	for _, p := range []string{"much-too-long-", "a/b", "a b"} {
		t.Setenv("LINKLAB_PREFIX", p)
		for _, cmd := range []string{"run", "sweep"} {
			var stderr bytes.Buffer
			if code := run([]string{cmd, "--autoshape", "/bin/true"}, &bytes.Buffer{}, &stderr); code != 2 || !strings.Contains(stderr.String(), "LINKLAB_PREFIX") {
				t.Errorf("%s with LINKLAB_PREFIX=%q: exit %d, stderr %q; want 2 naming LINKLAB_PREFIX", cmd, p, code, stderr.String())
			}
		}
	}
}

func TestScenarios(t *testing.T) {
	for name, sc := range scenarios {
		for _, spec := range []string{sc.down, sc.up} {
			if spec == "" {
				continue
			}
			if _, err := loadCapacity(spec); err != nil {
				t.Errorf("scenario %s: %v", name, err)
			}
		}
	}
	if d := scenarios["dsl"]; !d.bottleneck.ATM || d.bottleneck.Overhead != 44 {
		t.Errorf("dsl scenario framing %+v, want ATM with 44 bytes", d.bottleneck)
	}
}
