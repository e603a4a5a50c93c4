package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/autoshape/autoshape/sim"
)

func TestMedian(t *testing.T) {
	tests := []struct {
		v    []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
	}
	for _, tt := range tests {
		if got := median(tt.v); got != tt.want {
			t.Errorf("median(%v) = %v, want %v", tt.v, got, tt.want)
		}
	}
	one := 1.5
	rs := []sim.Result{{RecoveryS: &one}, {}, {RecoveryS: &one}}
	if got := med(rs, 1, func(r sim.Result) (float64, bool) { return deref(r.RecoveryS) }); got != "1.5" {
		t.Errorf("the median of the runs that have a value = %s, want 1.5", got)
	}
	if got := med(rs[1:2], 1, func(r sim.Result) (float64, bool) { return deref(r.RecoveryS) }); got != "-" {
		t.Errorf("with no value = %s, want -", got)
	}
}

func TestReadRejects(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{"bad.json": "{", "empty.json": `{"results": []}`} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := read(path); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("read(%s) = %v, want an error naming the file", name, err)
		}
	}
}

// group names the schemes with their run's budget only when the reports were
// run at more than one.
func TestGroupBudgets(t *testing.T) {
	run := func(budget float64, schemes ...string) report {
		rep := report{BudgetMs: budget}
		for _, s := range schemes {
			rep.Results = append(rep.Results, sim.Result{Scheme: s, Direction: "down"})
		}
		return rep
	}
	names := map[string]string{"exec": "cake-autorate"}
	for _, tt := range []struct {
		name string
		reps []report
		want []string // each key's name and its number of runs
	}{
		{"one budget", []report{run(15, "autoshape", "exec"), run(15, "autoshape", "exec")},
			[]string{"autoshape 2", "cake-autorate 2"}},
		{"a sweep", []report{run(15, "autoshape", "classic"), run(5, "autoshape"), run(60, "autoshape"), run(5, "autoshape")},
			[]string{"autoshape@5ms 2", "autoshape@15ms 1", "autoshape@60ms 1", "classic@15ms 1"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			order, runs := group(tt.reps, names)
			var got []string
			for _, k := range order {
				got = append(got, fmt.Sprintf("%s %d", k.name(), len(runs[k])))
			}
			if strings.Join(got, ", ") != strings.Join(tt.want, ", ") {
				t.Errorf("group() = %v, want %v", got, tt.want)
			}
		})
	}
}

// drawPlots draws a sweep (autoshape at two budgets) beside a scheme run at
// one: a figure per direction.
func TestDrawPlotsSweep(t *testing.T) {
	run := func(budget, util, p95 float64, schemes ...string) report {
		rep := report{BudgetMs: budget}
		for _, s := range schemes {
			for _, d := range []string{"down", "up"} {
				rep.Results = append(rep.Results, sim.Result{Scheme: s, Direction: d, Utilization: util, Delay: sim.Delay{P95: p95}})
			}
		}
		return rep
	}
	order, runs := group([]report{run(5, 0.5, 80, "autoshape"), run(15, 0.6, 110, "autoshape", "classic"), run(15, 0.62, 120, "autoshape", "classic")}, nil)
	dir := t.TempDir()
	if err := drawPlots(dir, order, runs); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"down", "up"} {
		b, err := os.ReadFile(filepath.Join(dir, "lab-"+d+".svg"))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{">5ms<", ">15ms<", ">autoshape<", ">classic@15ms<"} {
			if !strings.Contains(string(b), want) {
				t.Errorf("lab-%s.svg has no %q", d, want)
			}
		}
	}
}

func TestWindowSet(t *testing.T) {
	tests := []struct {
		in       string
		from, to float64
		ok       bool
	}{
		{"65-90", 65, 90, true},
		{"0-30.5", 0, 30.5, true},
		{"90-65", 0, 0, false},
		{"65", 0, 0, false},
		{"a-90", 0, 0, false},
		{"65-inf", 0, 0, false},
		{"-5-10", 0, 0, false},
	}
	for _, tt := range tests {
		var w window
		err := w.Set(tt.in)
		if (err == nil) != tt.ok {
			t.Errorf("Set(%q) = %v, want ok %v", tt.in, err, tt.ok)
			continue
		}
		if tt.ok && (w.from != tt.from || w.to != tt.to || !w.set()) {
			t.Errorf("Set(%q) = %+v, want %g-%g", tt.in, w, tt.from, tt.to)
		}
	}
}
