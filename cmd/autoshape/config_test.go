package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/autoshape/autoshape/actuator"
	"github.com/autoshape/autoshape/estimator"
)

func TestReferenceConfigParses(t *testing.T) {
	cfg, err := parseConfig(referenceConfig)
	if err != nil {
		t.Fatalf("the reference config does not parse: %v", err)
	}
	if len(cfg.Links) != 1 {
		t.Fatalf("links = %d, want 1", len(cfg.Links))
	}
	l := cfg.Links[0]
	switch {
	case l.Interface != "wan" || l.IFB != "ifb4wan" || l.Backend != actuator.CAKE || l.Attach || l.Replace:
		t.Errorf("link = %+v", l)
	case l.Budget != 15*time.Millisecond || l.Policy != PolicyBudget || l.Framing.Overhead != 44 || l.Method != estimator.Auto:
		t.Errorf("link = %+v", l)
	case l.Directions[estimator.Down].Bounds.Max != 80e6 || l.Directions[estimator.Down].Safe != 20e6 || l.Directions[estimator.Up].Bounds.Base != 10e6:
		t.Errorf("directions = %+v", l.Directions)
	case cfg.MetricsListen != "127.0.0.1:9877" || cfg.RemoveOnExit || cfg.LogLevel != "info":
		t.Errorf("config = %+v", cfg)
	}
}

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

func TestMinimalConfig(t *testing.T) {
	cfg, err := parseConfig(minimalLink)
	if err != nil {
		t.Fatalf("parseConfig() failed: %v", err)
	}
	l := cfg.Links[0]
	if l.Name != "wan" || l.IFB != "ifb4wan" || l.Budget != 15*time.Millisecond || l.Policy != PolicyBudget || l.Backend != actuator.CAKE || l.Method != estimator.Auto || l.Replace {
		t.Errorf("defaults not applied: %+v", l)
	}
	if cfg.StateFile == "" || cfg.MetricsListen == "" {
		t.Errorf("defaults not applied: %+v", cfg)
	}
}

func TestBadConfigs(t *testing.T) {
	with := func(old, new string) string { return strings.Replace(minimalLink, old, new, 1) }
	tests := []struct {
		name, text, want string
	}{
		{"unknown top key", "colour = \"red\"\n" + minimalLink, `unknown key "colour"`},
		{"unknown link key", with(`interface = "wan"`, "interface = \"wan\"\nspeed = 3"), `unknown key "link.speed"`},
		{"not toml", "[[link", "expected"},
		{"no link", "state_file = \"/tmp/x\"\n", "no [[link]]"},
		{"no interface", with(`interface = "wan"`, ""), "link[0].interface: missing"},
		{"bad backend", with(`interface = "wan"`, "interface = \"wan\"\nbackend = \"tbf\""), `link[0].backend: unknown backend "tbf"`},
		{"bad mode", with(`interface = "wan"`, "interface = \"wan\"\nmode = \"steal\""), `link[0].mode: "steal"`},
		{"replace in attach mode", with(`interface = "wan"`, "interface = \"wan\"\nmode = \"attach\"\nreplace = true"), `link[0].replace: true only goes with mode = "setup"`},
		{"replace not a boolean", with(`interface = "wan"`, "interface = \"wan\"\nreplace = \"yes\""), "replace"},
		{"negative budget", with(`interface = "wan"`, "interface = \"wan\"\nbudget = \"-5ms\""), "link[0].budget"},
		{"garbage budget", with(`interface = "wan"`, "interface = \"wan\"\nbudget = \"soon\""), `link[0].budget: "soon"`},
		{"unknown policy", with(`interface = "wan"`, "name = \"x\"\ninterface = \"wan\"\npolicy = \"foo\""), `link[0] (x).policy: "foo" is neither "budget" nor "classic"`},
		{"overhead", with(`interface = "wan"`, "interface = \"wan\"\noverhead = 300"), "link[0].overhead: 300"},
		{"link layer", with(`interface = "wan"`, "interface = \"wan\"\nlink_layer = \"isdn\""), `link[0].link_layer: "isdn"`},
		{"min above max", with(`min = "1mbit"`, `min = "30mbit"`), "link[0].download.min/base/max"},
		{"garbage rate", with(`max = "5mbit"`, `max = "lots"`), `link[0].upload.max: invalid rate "lots"`},
		{"missing base", with(`base = "2mbit"`, ""), "link[0].upload.base: missing"},
		{"safe outside", with(`max = "5mbit"`, "max = \"5mbit\"\nsafe = \"50mbit\""), "link[0].upload.safe"},
		{"bad reflector", minimalLink + "[link.probe]\nreflectors = [\"one.one.one.one\"]\n", `link[0].probe.reflectors: "one.one.one.one"`},
		{"bad method", minimalLink + "[link.probe]\nmethod = \"carrier-pigeon\"\n", "link[0].probe.method"},
		{"too few active", minimalLink + "[link.probe]\nactive = 1\nreflectors = [\"192.0.2.1\", \"192.0.2.2\"]\n", "link[0].probe"},
		{"on_exit", "on_exit = \"explode\"\n" + minimalLink, `on_exit: "explode"`},
		{"log level", "[log]\nlevel = \"chatty\"\n" + minimalLink, `log.level: "chatty"`},
		{"metrics listen", "[metrics]\nlisten = \"everywhere\"\n" + minimalLink, `metrics.listen: "everywhere"`},
		{"same interface twice", minimalLink + minimalLink, "link[1].interface: \"wan\" is shaped by an earlier link"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseConfig(tt.text)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("parseConfig() error = %v, want it to mention %q", err, tt.want)
			}
		})
	}
}

func TestConfigCommands(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"config", "default"}, &stdout, &stderr); code != 0 || stdout.String() != referenceConfig {
		t.Errorf("config default: exit %d, printed %d bytes", code, stdout.Len())
	}
	dir := t.TempDir()
	good := filepath.Join(dir, "good.toml")
	os.WriteFile(good, []byte(referenceConfig), 0o644)
	stdout.Reset()
	if code := run([]string{"config", "check", good}, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "ok") {
		t.Errorf("config check good: exit %d, %q %q", code, stdout.String(), stderr.String())
	}
	bad := filepath.Join(dir, "bad.toml")
	os.WriteFile(bad, []byte("colour = 1\n"+minimalLink), 0o644)
	stderr.Reset()
	if code := run([]string{"config", "check", bad}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), `unknown key "colour"`) || !strings.Contains(stderr.String(), bad) {
		t.Errorf("config check bad: exit %d, stderr %q", code, stderr.String())
	}
	for _, args := range [][]string{{"config"}, {"config", "frobnicate"}, {"config", "check"}, {"config", "check", filepath.Join(dir, "missing.toml")}} {
		stderr.Reset()
		if code := run(args, &stdout, &stderr); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, code, stderr.String())
		}
	}
}

// TestPolicyChoice: the link's policy key picks the policy the daemon runs
// (budget when left out); anything else is refused, naming the key, with exit
// status 2.
func TestPolicyChoice(t *testing.T) {
	tests := []struct {
		name, line string
		want       PolicyName
		wantErr    string
	}{
		{"default", "", PolicyBudget, ""},
		{"budget", `policy = "budget"`, PolicyBudget, ""},
		{"classic", `policy = "classic"`, PolicyClassic, ""},
		{"unknown", `policy = "foo"`, "", `link[0] (x).policy: "foo" is neither "budget" nor "classic"`},
		{"upper case", `policy = "Classic"`, "", `link[0] (x).policy: "Classic"`},
		{"empty string", `policy = ""`, PolicyBudget, ""},
		{"not a string", `policy = 1`, "", "policy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			text := strings.Replace(minimalLink, `interface = "wan"`, "name = \"x\"\ninterface = \"wan\"\n"+tt.line, 1)
			cfg, err := parseConfig(text)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parseConfig() error = %v, want it to mention %q", err, tt.wantErr)
				}
				path := filepath.Join(t.TempDir(), "bad.toml")
				if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
				var stderr bytes.Buffer
				if code := run([]string{"run", "-c", path}, &bytes.Buffer{}, &stderr); code != 2 || !strings.Contains(stderr.String(), tt.wantErr) {
					t.Errorf("run -c: exit %d, stderr %q; want 2 and %q", code, stderr.String(), tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseConfig() failed: %v", err)
			}
			l := cfg.Links[0]
			if l.Policy != tt.want {
				t.Errorf("policy = %q, want %q", l.Policy, tt.want)
			}
			p, err := newPolicy(l)
			if err != nil {
				t.Fatalf("newPolicy() failed: %v", err)
			}
			if p.Name() != string(tt.want) {
				t.Errorf("the daemon runs the %q policy, want %q", p.Name(), tt.want)
			}
		})
	}
}

// TestReplaceKey: replace = true lets setup mode replace other software's
// root qdiscs; a changed replace restarts the link on reload.
func TestReplaceKey(t *testing.T) {
	cfg, err := parseConfig(strings.Replace(minimalLink, `interface = "wan"`, "interface = \"wan\"\nmode = \"setup\"\nreplace = true", 1))
	if err != nil {
		t.Fatalf("parseConfig() failed: %v", err)
	}
	l := cfg.Links[0]
	if !l.Replace || l.Attach {
		t.Errorf("link = %+v, want Replace in setup mode", l)
	}
	off := l
	off.Replace = false
	if linkEqual(l, off) {
		t.Errorf("linkEqual ignores Replace")
	}
}
