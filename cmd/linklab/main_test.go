package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/autoshape/autoshape/estimator"
	"github.com/autoshape/autoshape/lab"
	"github.com/autoshape/autoshape/sim"
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

// --sim runs the simulator on the lab's line for every scheme it knows, in
// the lab's order, and leaves out the ones it cannot model.
func TestSimulateBesideTheLab(t *testing.T) {
	down, err := sim.ParseSchedule("20mbit@0s,5mbit@5s")
	if err != nil {
		t.Fatal(err)
	}
	var schemes []lab.Scheme
	for _, s := range []string{"unshaped", "static:0.9", "autoshape", "classic", "exec:true", "autoshape:/x.toml"} {
		p, err := lab.ParseScheme(s)
		if err != nil {
			t.Fatal(err)
		}
		schemes = append(schemes, p)
	}
	cfg := lab.RunConfig{Duration: 10 * time.Second, Budget: 15 * time.Millisecond, Streams: 4}
	rs, err := simulate([2]*sim.Trace{estimator.Down: down}, cfg, schemes)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rs {
		got = append(got, r.Scheme+" "+r.Direction)
	}
	want := []string{"unshaped down", "static:0.9 down", "autoshape down", "classic down"}
	if !slices.Equal(got, want) {
		t.Fatalf("results %v, want %v", got, want)
	}
	if rs[0].Delay.P95 < 100 {
		t.Errorf("unshaped p95 %v ms: the bloated line should show", rs[0].Delay.P95)
	}
	if rs[2].ReactionS == nil {
		t.Errorf("autoshape has no reaction_s on a step")
	}
	var b strings.Builder
	writeSideBySide(&b, Report{Results: rs, Sim: rs})
	if !strings.Contains(b.String(), "util sim") || strings.Count(b.String(), "\n") != 5 {
		t.Errorf("side-by-side table:\n%s", b.String())
	}
}

func TestDeliveryLine(t *testing.T) {
	for _, tc := range []struct {
		d         sim.Delivery
		want      string
		shortfall bool
	}{
		{sim.Delivery{}, "the down line never held a queue", false},
		{sim.Delivery{QueuedS: 20, Share: 0.985, ShortS: 0.2}, "the down line held a queue for 20.0 s and sent 98 % of its rate then (0.2 s under 90 %)", false},
		{sim.Delivery{QueuedS: 20, Share: 0.82, ShortS: 17.1}, "the down line held a queue for 20.0 s and sent 82 % of its rate then (17.1 s under 90 %)", true},
	} {
		got := deliveryLine("down", tc.d)
		if !strings.HasPrefix(got, tc.want) || strings.Contains(got, "did not forward") != tc.shortfall {
			t.Errorf("deliveryLine(%+v) = %q, want %q, the shortfall named: %v", tc.d, got, tc.want, tc.shortfall)
		}
	}
}
