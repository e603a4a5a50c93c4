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
	} {
		var stderr bytes.Buffer
		if code := run(tc.args, &bytes.Buffer{}, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr.String(), tc.want)
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
