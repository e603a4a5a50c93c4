package main

import (
	"bytes"
	"strings"
	"testing"
)

func runCmd(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestUsageErrors: a missing or unknown command is a usage error, and the
// tools are not in the router binary.
func TestUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want []string // substrings of stderr
	}{
		{name: "no command", args: nil, want: []string{"usage: autoshape COMMAND"}},
		{name: "unknown command", args: []string{"frobnicate"}, want: []string{`unknown command "frobnicate"`, "usage:"}},
		{name: "simulate is a tool", args: []string{"simulate"}, want: []string{`unknown command "simulate"`, "autoshape-tools"}},
		{name: "plot is a tool", args: []string{"plot"}, want: []string{`unknown command "plot"`, "autoshape-tools"}},
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

func TestVersionAndHelp(t *testing.T) {
	tests := []struct {
		args []string
		want string // substring of stdout
	}{
		{args: []string{"version"}, want: "autoshape " + version + "\n"},
		{args: []string{"--version"}, want: "autoshape " + version},
		{args: []string{"help"}, want: "usage: autoshape COMMAND"},
		{args: []string{"sweep", "-h"}}, // the flags go to stderr
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
