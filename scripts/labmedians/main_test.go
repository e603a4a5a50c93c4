package main

import (
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
