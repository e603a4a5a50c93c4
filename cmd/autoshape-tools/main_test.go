package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/autoshape/autoshape/sim"
)

// writeFile writes content to name in a fresh temporary directory and
// returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func runCmd(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestUsageErrors(t *testing.T) {
	unknownKey := writeFile(t, "unknown.toml", "[sim]\nflows = 2\nflowz = 3\n")
	badValue := writeFile(t, "bad.toml", "[budget]\nhold = \"soon\"\n")
	badBudget := writeFile(t, "budget.toml", "[budget]\nmin_cut = 2.0\n")
	decreasing := writeFile(t, "decreasing.trace", "1\n5\n3\n")
	tests := []struct {
		name string
		args []string
		want []string // substrings of stderr
	}{
		{name: "no command", args: nil, want: []string{"usage: autoshape-tools COMMAND"}},
		{name: "unknown command", args: []string{"frobnicate"}, want: []string{`unknown command "frobnicate"`, "usage:"}},
		{name: "missing trace file", args: []string{"simulate", "--trace-down", "/nonexistent"},
			want: []string{"--trace-down", "/nonexistent"}},
		{name: "malformed schedule", args: []string{"simulate", "--trace-down", "abc@"},
			want: []string{"--trace-down", `invalid rate "abc"`}},
		{name: "malformed upload schedule", args: []string{"simulate", "--trace-up", "10mbit@0s,5mbit"},
			want: []string{"--trace-up", "missing @TIME"}},
		{name: "negative budget", args: []string{"simulate", "--budget", "-5ms"},
			want: []string{"--budget -5ms must be positive"}},
		{name: "negative duration", args: []string{"simulate", "--duration", "-1s"},
			want: []string{"--duration -1s is negative"}},
		{name: "unknown policy", args: []string{"simulate", "--trace-down", "10mbit", "--policy", "nosuch"},
			want: []string{`unknown policy "nosuch"`}},
		{name: "unknown config key", args: []string{"simulate", "--trace-down", "10mbit", "--config", unknownKey},
			want: []string{unknownKey, `unknown key "sim.flowz"`}},
		{name: "bad config value", args: []string{"simulate", "--trace-down", "10mbit", "--config", badValue},
			want: []string{badValue, `invalid duration "soon"`}},
		{name: "invalid budget policy", args: []string{"simulate", "--trace-down", "10mbit", "--config", badBudget},
			want: []string{"min_cut"}},
		{name: "missing config", args: []string{"simulate", "--trace-down", "10mbit", "--config", "/nonexistent.toml"},
			want: []string{"/nonexistent.toml"}},
		{name: "decreasing timestamp", args: []string{"simulate", "--trace-down", decreasing},
			want: []string{decreasing, "line 3", "before the previous one"}},
		{name: "flows out of range", args: []string{"simulate", "--trace-down", "10mbit", "--config", writeFile(t, "flows.toml", "[sim]\nflows = 100\n")},
			want: []string{"flows 100"}},
		{name: "min above max", args: []string{"simulate", "--trace-down", "10mbit", "--config", writeFile(t, "minmax.toml", "[bounds.down]\nmin = \"30mbit\"\nmax = \"20mbit\"\n")},
			want: []string{"down bounds", "above max rate"}},
		{name: "bounds for an unknown direction", args: []string{"simulate", "--trace-down", "10mbit", "--config", writeFile(t, "sideways.toml", "[bounds.sideways]\nmin = \"1mbit\"\n")},
			want: []string{"bounds.sideways", "unknown direction"}},
		{name: "bounds for an unloaded direction", args: []string{"simulate", "--trace-down", "10mbit", "--config", writeFile(t, "upb.toml", "[bounds.up]\nmin = \"1mbit\"\n")},
			want: []string{"bounds.up", "no load"}},
		{name: "garbage bound", args: []string{"simulate", "--trace-down", "10mbit", "--config", writeFile(t, "garbage.toml", "[bounds.down]\nmax = \"fast\"\n")},
			want: []string{"bounds.down.max", "invalid rate"}},
		{name: "unknown flag", args: []string{"simulate", "--frobnicate"}, want: []string{"frobnicate"}},
		{name: "extra argument", args: []string{"simulate", "--trace-down", "10mbit", "extra"}, want: []string{`unexpected argument "extra"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runCmd(tt.args...)
			if code != 2 {
				t.Errorf("exit status = %d, want 2 (stderr: %q)", code, stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr = %q, want it to contain %q", stderr, w)
				}
			}
			if stdout != "" {
				t.Errorf("stdout = %q, want nothing on a usage error", stdout)
			}
		})
	}
}

func TestSimulateJSON(t *testing.T) {
	code, stdout, stderr := runCmd("simulate", "--trace-down", "10mbit", "--duration", "5s", "--json")
	if code != 0 {
		t.Fatalf("exit status = %d, want 0 (stderr: %q)", code, stderr)
	}

	// The documented shape, key by key.
	var raw map[string]any
	if err := json.Unmarshal([]byte(stdout), &raw); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, stdout)
	}
	for _, k := range []string{"trace_down", "trace_up", "duration_s", "budget_ms", "results"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("report lacks key %q", k)
		}
	}
	results, _ := raw["results"].([]any)
	if len(results) != len(sim.SchemeNames) {
		t.Fatalf("%d results, want one per scheme (%d) for the one loaded direction", len(results), len(sim.SchemeNames))
	}
	for i, r := range results {
		m, _ := r.(map[string]any)
		for _, k := range []string{"scheme", "direction", "capacity_mbps", "goodput_mbps", "utilization", "delay_ms", "over_budget_fraction"} {
			if _, ok := m[k]; !ok {
				t.Errorf("result %d lacks key %q", i, k)
			}
		}
		delay, _ := m["delay_ms"].(map[string]any)
		for _, k := range []string{"p50", "p95", "p99"} {
			if _, ok := delay[k].(float64); !ok {
				t.Errorf("result %d: delay_ms lacks number %q", i, k)
			}
		}
	}

	// And the values.
	var rep struct {
		TraceDown string  `json:"trace_down"`
		TraceUp   string  `json:"trace_up"`
		DurationS float64 `json:"duration_s"`
		BudgetMs  float64 `json:"budget_ms"`
		Results   []struct {
			Scheme       string  `json:"scheme"`
			Direction    string  `json:"direction"`
			CapacityMbps float64 `json:"capacity_mbps"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.TraceDown != "10mbit" || rep.TraceUp != "" || rep.DurationS != 5 || rep.BudgetMs != 15 {
		t.Errorf("report header: down %q up %q duration %v budget %v; want \"10mbit\", \"\", 5, 15",
			rep.TraceDown, rep.TraceUp, rep.DurationS, rep.BudgetMs)
	}
	var schemes []string
	for _, r := range rep.Results {
		schemes = append(schemes, r.Scheme)
		if r.Direction != "down" || r.CapacityMbps != 10 {
			t.Errorf("result %s: direction %q capacity %v, want down at 10", r.Scheme, r.Direction, r.CapacityMbps)
		}
	}
	if diff := cmp.Diff(sim.SchemeNames, schemes); diff != "" {
		t.Errorf("schemes mismatch (-want +got):\n%s", diff)
	}
}

func TestSimulateTable(t *testing.T) {
	code, stdout, stderr := runCmd("simulate", "--duration", "5s")
	if code != 0 {
		t.Fatalf("exit status = %d, want 0 (stderr: %q)", code, stderr)
	}
	if !strings.Contains(stdout, sim.EmbeddedDownName) || !strings.Contains(stdout, sim.EmbeddedUpName) {
		t.Errorf("table does not name the embedded traces:\n%s", stdout)
	}
	for _, s := range sim.SchemeNames {
		for _, dir := range []string{"down", "up"} {
			if row := "| " + s + " | " + dir + " |"; !strings.Contains(stdout, row) {
				t.Errorf("table lacks a row starting %q:\n%s", row, stdout)
			}
		}
	}
}

func TestSimulateIsRepeatable(t *testing.T) {
	args := []string{"simulate", "--trace-down", "20mbit@0s,5mbit@3s", "--duration", "5s", "--policy", "autoshape", "--json"}
	_, first, _ := runCmd(args...)
	code, second, stderr := runCmd(args...)
	if code != 0 {
		t.Fatalf("exit status = %d, want 0 (stderr: %q)", code, stderr)
	}
	if diff := cmp.Diff(first, second); diff != "" {
		t.Errorf("two runs with the same seed differ (-first +second):\n%s", diff)
	}
	if !strings.Contains(first, `"reaction_s"`) {
		t.Errorf("a step schedule's report lacks reaction_s:\n%s", first)
	}
}

func TestVersionAndHelp(t *testing.T) {
	tests := []struct {
		args []string
		want string // substring of stdout
	}{
		{args: []string{"version"}, want: "autoshape-tools " + version + "\n"},
		{args: []string{"--version"}, want: "autoshape-tools " + version},
		{args: []string{"help"}, want: "usage: autoshape-tools COMMAND"},
		{args: []string{"simulate", "-h"}}, // the flags go to stderr
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, stdout, stderr := runCmd(tt.args...)
			if code != 0 {
				t.Errorf("exit status = %d, want 0 (stderr: %q)", code, stderr)
			}
			if !strings.Contains(stdout, tt.want) {
				t.Errorf("stdout = %q, want it to contain %q", stdout, tt.want)
			}
		})
	}
}

// TestBadFlagReportedOnce: an unknown flag is one line naming it, with a
// pointer to -h, and exit status 2; -h exits 0.
func TestBadFlagReportedOnce(t *testing.T) {
	for _, cmd := range []string{"simulate", "plot"} {
		var stdout, stderr bytes.Buffer
		if code := run([]string{cmd, "--bogus"}, &stdout, &stderr); code != 2 {
			t.Errorf("%s --bogus: exit %d, want 2", cmd, code)
		}
		want := "autoshape-tools " + cmd + ": flag provided but not defined: -bogus (see 'autoshape-tools " + cmd + " -h')\n"
		if stderr.String() != want {
			t.Errorf("%s --bogus: stderr %q, want %q", cmd, stderr.String(), want)
		}
		stderr.Reset()
		if code := run([]string{cmd, "-h"}, &stdout, &stderr); code != 0 {
			t.Errorf("%s -h: exit %d, want 0", cmd, code)
		}
	}
}
