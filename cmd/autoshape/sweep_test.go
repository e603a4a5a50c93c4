package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSweepUsageErrors: bad flags and configurations exit with status 2
// before anything is touched.
func TestSweepUsageErrors(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "ok.toml")
	var def bytes.Buffer
	if code := run([]string{"config", "default"}, &def, &bytes.Buffer{}); code != 0 {
		t.Fatal("config default failed")
	}
	if err := os.WriteFile(cfg, def.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"sweep"}, "-c FILE is required"},
		{[]string{"sweep", "-c", filepath.Join(dir, "missing.toml")}, "missing.toml"},
		{[]string{"sweep", "-c", cfg, "--link", "nope", "--line-rate-down", "10mbit", "--load", "exec:true"}, `--link "nope"`},
		{[]string{"sweep", "-c", cfg, "--direction", "down", "--load", "exec:true"}, "--line-rate-down is required"},
		{[]string{"sweep", "-c", cfg, "--direction", "down", "--line-rate-down", "10mbit"}, "--load is required"},
		{[]string{"sweep", "-c", cfg, "--direction", "down", "--line-rate-down", "10mbit", "--load", "exec:true", "--step", "1e-20"}, "--step 1e-20 makes 3e+19 steps: at most 200"},
		{[]string{"sweep", "-c", cfg, "--direction", "down", "--line-rate-down", "1e300gbit", "--load", "exec:true"}, "above 10 Tbit/s"},
	} {
		var stderr bytes.Buffer
		if code := run(tc.args, &bytes.Buffer{}, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr.String(), tc.want)
		}
	}
}
