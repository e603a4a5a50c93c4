package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/autoshape/autoshape/controller"
	"github.com/autoshape/autoshape/estimator"
)

func TestStateFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "state.json")
	if st := loadState(path, zap.NewNop()); len(st.Links) != 0 {
		t.Errorf("a missing state file gave %+v, want an empty state", st)
	}
	st := stateFile{Links: map[string]linkState{"wan": {DownKbit: 20000, UpKbit: 5000, Reflectors: []string{"192.0.2.1"}}}}
	if err := st.save(path); err != nil {
		t.Fatalf("save() failed: %v", err)
	}
	got := loadState(path, zap.NewNop())
	if l := got.Links["wan"]; l.DownKbit != 20000 || l.UpKbit != 5000 || len(l.Reflectors) != 1 {
		t.Errorf("read back %+v", got)
	}
	if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 1 {
		t.Errorf("save() left %d files, want only the state file", len(entries))
	}
	for name, content := range map[string]string{
		"corrupt": "{not json",
		"version": `{"version": 7, "links": {}}`,
		"empty":   "",
	} {
		t.Run(name, func(t *testing.T) {
			os.WriteFile(path, []byte(content), 0o644)
			if st := loadState(path, zap.NewNop()); len(st.Links) != 0 || st.Links == nil {
				t.Errorf("a %s state file gave %+v, want it ignored", name, st)
			}
		})
	}
}

func TestDecisionFileRotates(t *testing.T) {
	path := filepath.Join(t.TempDir(), "decisions.jsonl")
	f := &decisionFile{path: path, maxBytes: 1000}
	d := controller.Decision{Time: time.Unix(1, 0), Link: "wan", Direction: estimator.Down, From: 1e6, To: 2e6}
	for range 20 {
		if err := f.write(d); err != nil {
			t.Fatal(err)
		}
	}
	cur, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	old, err := os.ReadFile(path + ".1")
	if err != nil {
		t.Fatalf("no rotated file: %v", err)
	}
	if len(cur) >= 1000+400 || len(old) < 1000 {
		t.Errorf("sizes: current %d, rotated %d: want the current under the limit plus a line, the rotated at it", len(cur), len(old))
	}
	if n := strings.Count(string(cur), "\n") + strings.Count(string(old), "\n"); n > 20 || n < 10 {
		t.Errorf("%d lines kept in the two files", n)
	}
	recs, err := readRecords(strings.NewReader(string(cur)))
	if err != nil || len(recs) == 0 || recs[0].RateKbit != 2000 {
		t.Errorf("the current file does not read back: %v %+v", err, recs)
	}
}

func TestSummaryPercentiles(t *testing.T) {
	if got := percentile(nil, 0.5); got != 0 {
		t.Errorf("percentile(nil) = %v", got)
	}
	v := []float64{5, 1, 3, 2, 4}
	if p50, p95 := percentile(v, 0.5), percentile(v, 0.95); p50 != 3 || p95 != 5 {
		t.Errorf("p50 %v p95 %v, want 3 and 5", p50, p95)
	}
	s := newSummary()
	for range 5000 {
		s.add(estimator.Observation{Direction: estimator.Down, Delta: time.Millisecond})
	}
	if len(s.delays[estimator.Down]) != 1200 {
		t.Errorf("the summary kept %d delays, want it bounded at 1200", len(s.delays[estimator.Down]))
	}
}
