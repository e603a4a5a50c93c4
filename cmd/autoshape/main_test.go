package main

import (
	"bytes"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
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

// TestHelp: -h and --help of every command exit 0 with the command's usage
// line, and an unknown flag is a usage error reported once, without the
// whole usage. config's subcommands are tested in configcmd_test.go.
func TestHelp(t *testing.T) {
	for _, cmd := range []string{"run", "shape", "sweep", "calc", "version"} {
		for _, h := range []string{"-h", "--help"} {
			t.Run(cmd+" "+h, func(t *testing.T) {
				code, stdout, stderr := runCmd(cmd, h)
				if code != 0 {
					t.Errorf("exit status = %d, want 0 (stderr: %q)", code, stderr)
				}
				if want := "usage: autoshape " + cmd; !strings.HasPrefix(stderr, want) {
					t.Errorf("stderr = %q, want it to begin with %q", stderr, want)
				}
				if stdout != "" {
					t.Errorf("stdout = %q, want nothing", stdout)
				}
			})
		}
		t.Run(cmd+" --bogus", func(t *testing.T) {
			code, stdout, stderr := runCmd(cmd, "--bogus")
			if code != 2 {
				t.Errorf("exit status = %d, want 2 (stderr: %q)", code, stderr)
			}
			want := "autoshape " + cmd + ": flag provided but not defined: -bogus (see 'autoshape " + cmd + " -h')\n"
			if diff := cmp.Diff(want, stderr); diff != "" {
				t.Errorf("stderr (-want +got):\n%s", diff)
			}
			if stdout != "" {
				t.Errorf("stdout = %q, want nothing", stdout)
			}
		})
	}
}

// TestRunFlagNames: run's -c shows FILE as its value, not the text quoted in
// its description.
func TestRunFlagNames(t *testing.T) {
	_, _, stderr := runCmd("run", "-h")
	if !strings.Contains(stderr, "-c FILE\n") {
		t.Errorf("run -h = %q, want -c FILE", stderr)
	}
}

func TestResolveVersion(t *testing.T) {
	info := func(version string, settings ...string) func() (*debug.BuildInfo, bool) {
		return func() (*debug.BuildInfo, bool) {
			bi := &debug.BuildInfo{Main: debug.Module{Path: "github.com/autoshape/autoshape", Version: version}}
			for i := 0; i+1 < len(settings); i += 2 {
				bi.Settings = append(bi.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
			}
			return bi, true
		}
	}
	const rev = "0123456789abcdef0123456789abcdef01234567"
	tests := []struct {
		name, stamped string
		info          func() (*debug.BuildInfo, bool)
		want          string
	}{
		{"stamped wins", "1.2.3-r1", info("v9.9.9"), "1.2.3-r1"},
		{"go install at a version", "dev", info("v0.2.0"), "v0.2.0"},
		{"checkout", "dev", info("(devel)", "vcs.revision", rev, "vcs.modified", "false"), "dev-0123456789ab"},
		{"checkout with changes", "dev", info("(devel)", "vcs.revision", rev, "vcs.modified", "true"), "dev-0123456789ab-dirty"},
		{"no vcs", "dev", info("(devel)"), "dev"},
		{"no build info", "dev", func() (*debug.BuildInfo, bool) { return nil, false }, "dev"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := resolveVersion(tt.stamped, tt.info); got != tt.want {
				t.Errorf("resolveVersion(%q) = %q, want %q", tt.stamped, got, tt.want)
			}
		})
	}
}
