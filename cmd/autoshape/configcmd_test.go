package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/autoshape/autoshape/config"
)

const minimalLink = `
[[link]]
interface = "wan"
[link.download]
min = "1mbit"
base = "10mbit"
max = "20mbit"
[link.upload]
min = "1mbit"
base = "2mbit"
max = "5mbit"
`

// TestConfigCommands: config default prints the reference; config check and
// run -c refuse a bad file with exit status 2, naming the file and the key.
func TestConfigCommands(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"config", "default"}, &stdout, &stderr); code != 0 || stdout.String() != config.Reference {
		t.Errorf("config default: exit %d, printed %d bytes", code, stdout.Len())
	}
	dir := t.TempDir()
	good := filepath.Join(dir, "good.toml")
	os.WriteFile(good, []byte(config.Reference), 0o644)
	stdout.Reset()
	if code := run([]string{"config", "check", good}, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "ok") {
		t.Errorf("config check good: exit %d, %q %q", code, stdout.String(), stderr.String())
	}
	bad := filepath.Join(dir, "bad.toml")
	os.WriteFile(bad, []byte("colour = 1\n"+minimalLink), 0o644)
	badPolicy := filepath.Join(dir, "policy.toml")
	os.WriteFile(badPolicy, []byte(strings.Replace(minimalLink, `interface = "wan"`, "interface = \"wan\"\npolicy = \"foo\"", 1)), 0o644)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"config", "check", bad}, `unknown key "colour"`},
		{[]string{"run", "-c", bad}, `unknown key "colour"`},
		{[]string{"config", "check", badPolicy}, `link[0].policy: "foo" is not one of "budget", "classic", "supervise"`},
		{[]string{"run", "-c", badPolicy}, `link[0].policy: "foo" is not one of "budget", "classic", "supervise"`},
	} {
		stderr.Reset()
		if code := run(tt.args, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), tt.want) || !strings.Contains(stderr.String(), tt.args[2]) {
			t.Errorf("%v: exit %d, stderr %q; want 2, the file's name and %q", tt.args, code, stderr.String(), tt.want)
		}
	}
	for _, args := range [][]string{{"config"}, {"config", "frobnicate"}, {"config", "check"}, {"config", "check", filepath.Join(dir, "missing.toml")},
		{"config", "check", good, good}, {"config", "default", "x"}, {"config", "check", "--bogus", good}} {
		stderr.Reset()
		if code := run(args, &stdout, &stderr); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, code, stderr.String())
		}
	}
}

// TestConfigUCI: config check and run -c read /etc/config/autoshape in UCI,
// and name the section and option of a problem.
func TestConfigUCI(t *testing.T) {
	dir := t.TempDir()
	example, err := os.ReadFile("../../packaging/openwrt/autoshape.uci")
	if err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "autoshape")
	os.WriteFile(good, example, 0o644)
	var stdout, stderr bytes.Buffer
	if code := run([]string{"config", "check", good}, &stdout, &stderr); code != 0 || stdout.String() != good+": ok (1 link(s))\n" {
		t.Errorf("config check of the example: exit %d, %q %q", code, stdout.String(), stderr.String())
	}
	bad := filepath.Join(dir, "bad")
	os.WriteFile(bad, []byte(strings.Replace(string(example), "option download_min '10000'", "option download_min '100000'", 1)), 0o644)
	want := "link 'wan' option download_min 100000kbit > option download_max 80000kbit"
	for _, args := range [][]string{{"config", "check", bad}, {"run", "-c", bad}} {
		stderr.Reset()
		if code := run(args, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), want) || !strings.Contains(stderr.String(), bad) {
			t.Errorf("%v: exit %d, stderr %q; want 2, the file's name and %q", args, code, stderr.String(), want)
		}
	}
}

// TestConfigFromSQM: config from-sqm prints a configuration that config
// check passes; with no queue to attach to it fails with exit status 2.
func TestConfigFromSQM(t *testing.T) {
	sqm := "../../config/testdata/sqm/"
	var stdout, stderr bytes.Buffer
	if code := run([]string{"config", "from-sqm", sqm + "fibre-and-lte"}, &stdout, &stderr); code != 0 {
		t.Fatalf("config from-sqm: exit %d, %q", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "config link 'pppoe_wan'") || !strings.Contains(stdout.String(), "option mode 'attach'") {
		t.Errorf("config from-sqm printed:\n%s", stdout.String())
	}
	out := filepath.Join(t.TempDir(), "autoshape")
	os.WriteFile(out, stdout.Bytes(), 0o644)
	stdout.Reset()
	if code := run([]string{"config", "check", out}, &stdout, &stderr); code != 0 {
		t.Errorf("config check of from-sqm's output: exit %d, %q", code, stderr.String())
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"config", "from-sqm", sqm + "openwrt-default"}, "no sqm queue autoshape can attach to:\n  sqm queue 'eth1': disabled"},
		{[]string{"config", "from-sqm", sqm + "missing"}, "no such file"},
		{[]string{"config", "from-sqm", "a", "b"}, "usage: autoshape config from-sqm [FILE]"},
	} {
		stdout.Reset()
		stderr.Reset()
		if code := run(tt.args, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), tt.want) || stdout.Len() != 0 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2, nothing printed and %q", tt.args, code, stdout.String(), stderr.String(), tt.want)
		}
	}
}

// TestConfigHelp: -h and --help of config and of each of its commands exit
// 0 with a usage line.
func TestConfigHelp(t *testing.T) {
	for _, args := range [][]string{
		{"config", "-h"}, {"config", "--help"}, {"config", "help"},
		{"config", "default", "--help"}, {"config", "check", "--help"}, {"config", "check", "-h"},
		{"config", "from-sqm", "--help"}, {"config", "from-sqm", "-h"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(args, &stdout, &stderr)
		want := "usage: autoshape config"
		if len(args) > 2 && args[1] != "help" {
			want += " " + args[1]
		}
		if code != 0 || !strings.HasPrefix(stderr.String(), want) || stdout.Len() != 0 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 0 and a usage line beginning %q", args, code, stdout.String(), stderr.String(), want)
		}
	}
}
