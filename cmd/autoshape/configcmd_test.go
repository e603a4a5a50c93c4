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
		{[]string{"config", "check", badPolicy}, `link[0].policy: "foo" is neither "budget" nor "classic"`},
		{[]string{"run", "-c", badPolicy}, `link[0].policy: "foo" is neither "budget" nor "classic"`},
	} {
		stderr.Reset()
		if code := run(tt.args, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), tt.want) || !strings.Contains(stderr.String(), tt.args[2]) {
			t.Errorf("%v: exit %d, stderr %q; want 2, the file's name and %q", tt.args, code, stderr.String(), tt.want)
		}
	}
	for _, args := range [][]string{{"config"}, {"config", "frobnicate"}, {"config", "check"}, {"config", "check", filepath.Join(dir, "missing.toml")}} {
		stderr.Reset()
		if code := run(args, &stdout, &stderr); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, code, stderr.String())
		}
	}
}
