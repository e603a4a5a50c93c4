package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestMain lets the test binary stand in for linklab where linklab runs
// itself: `linklab sweep` gives autoshape sweep a load that runs `linklab
// load`, which under go test is this binary.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "load" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// TestSweepLoadRunsFromCli: the sweep's load is linklab's own load command,
// started from cli (behind the router, not on it) towards the endpoint, in
// the direction autoshape sweep gives the step, with the paths quoted for
// the shell that autoshape sweep runs it with.
func TestSweepLoadRunsFromCli(t *testing.T) {
	// A linklab in a directory with a space and a quote that prints its
	// arguments.
	dir := filepath.Join(t.TempDir(), "lab's tools")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	self := filepath.Join(dir, "linklab")
	if err := os.WriteFile(self, []byte("#!/bin/sh\nprintf '%s\\n' \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	spec := sweepLoad(self, "aslab-cli", "10.91.3.2:40045", 4)
	command, ok := strings.CutPrefix(spec, "exec:")
	if !ok {
		t.Fatalf("load %q: want an exec: load", spec)
	}
	cmd := exec.Command("/bin/sh", "-c", command)
	cmd.Env = append(os.Environ(), "AUTOSHAPE_SWEEP_DIRECTION=up")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"load", "--ns", "aslab-cli", "--addr", "10.91.3.2:40045", "--direction", "up", "--streams", "4"}
	if diff := cmp.Diff(want, strings.Fields(string(out))); diff != "" {
		t.Errorf("arguments (-want +got):\n%s", diff)
	}
}

// TestLoadUsageErrors: the load command refuses bad flags with status 2.
func TestLoadUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"load", "--addr", "10.0.0.1:1", "--direction", "up"}, "--ns"},
		{[]string{"load", "--ns", "x", "--direction", "up"}, "--addr"},
		{[]string{"load", "--ns", "x", "--addr", "10.0.0.1:1", "--direction", "sideways"}, `--direction "sideways"`},
		{[]string{"load", "--ns", "x", "--addr", "10.0.0.1:1", "--direction", "up", "--streams", "0"}, "--streams"},
	} {
		var stderr bytes.Buffer
		if code := run(tc.args, &bytes.Buffer{}, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr.String(), tc.want)
		}
	}
}
