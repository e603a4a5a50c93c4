package config

import (
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/autoshape/autoshape/estimator"
	"github.com/autoshape/autoshape/policies"
)

// minimalUCI is minimalLink in UCI.
const minimalUCI = `
config link
	option interface 'wan'
	option download_min '1000'
	option download_base '10000'
	option download_max '20000'
	option upload_min '1000'
	option upload_base '2000'
	option upload_max '5000'
`

// exampleUCI is the example /etc/config/autoshape that the package installs.
func exampleUCI(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile("../packaging/openwrt/autoshape.uci")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// exportUCI writes sections as uci export does, for comparison.
func exportUCI(secs []*uciSection) string {
	var b strings.Builder
	for _, s := range secs {
		b.WriteString("config " + s.typ)
		if s.name != "" {
			b.WriteString(" " + uciQuote(s.name))
		}
		b.WriteString("\n")
		for _, name := range s.order {
			o := s.opts[name]
			cmd := "option"
			if o.list {
				cmd = "list"
			}
			for _, v := range o.values {
				b.WriteString("\t" + cmd + " " + name + " " + uciQuote(v) + "\n")
			}
		}
	}
	return b.String()
}

// TestUCISyntax: the parser reads what uci reads, as uci reads it.
func TestUCISyntax(t *testing.T) {
	tests := []struct {
		name, text, want string
	}{
		{"comments and empty lines", "# a comment\n\n  # indented\nconfig link 'wan' # trailing\n\n\toption interface 'eth1'  # why\n#option ifb 'x'\n",
			"config link 'wan'\n\toption interface 'eth1'\n"},
		{"quoting", `config link wan
	option a bare
	option b 'single "double" \n'
	option c "double 'single' \" \\ \n"
	option d 'joined'"parts"bare
	option e ''
	option f "two
lines"
`, "config link 'wan'\n\toption a 'bare'\n\toption b 'single \"double\" \\n'\n\toption c 'double '\\''single'\\'' \" \\ n'\n\toption d 'joinedpartsbare'\n\toption e ''\n\toption f 'two\nlines'\n"},
		{"hash inside a word ends it", "config link wan\n\toption a foo#bar baz\n\toption b 'foo#bar'\n",
			"config link 'wan'\n\toption a 'foo'\n\toption b 'foo#bar'\n"},
		{"semicolons and abbreviations", "c link wan; o interface eth1;l reflector 192.0.2.1\n",
			"config link 'wan'\n\toption interface 'eth1'\n\tlist reflector '192.0.2.1'\n"},
		{"lists, and an option turned into one", "config link wan\n\tlist reflector 192.0.2.1\n\tlist reflector '192.0.2.2'\n\toption x 1\n\tlist x 2\n",
			"config link 'wan'\n\tlist reflector '192.0.2.1'\n\tlist reflector '192.0.2.2'\n\tlist x '1'\n\tlist x '2'\n"},
		{"a second option replaces the first", "config link wan\n\toption a 1\n\toption b 2\n\toption a 3\n",
			"config link 'wan'\n\toption a '3'\n\toption b '2'\n"},
		{"a named section reopens", "config link wan\n\toption a 1\nconfig link lte\nconfig link 'wan'\n\toption b 2\n",
			"config link 'wan'\n\toption a '1'\n\toption b '2'\nconfig link 'lte'\n"},
		{"anonymous sections", "config link\nconfig link ''\n",
			"config link\nconfig link\n"},
		{"backslashes", "config link wan\n\toption a one\\\ntwo\n\toption b \\'x\\'\n",
			"config link 'wan'\n\toption a 'onetwo'\n\toption b ''\\''x'\\'''\n"},
		{"package and CRLF", "package autoshape\r\n\r\nconfig link 'wan'\r\n\toption interface 'eth1'\r\n",
			"config link 'wan'\n\toption interface 'eth1'\n"},
		{"no newline at the end", "config link wan\n\toption a 1", "config link 'wan'\n\toption a '1'\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			secs, err := parseUCI(tt.text)
			if err != nil {
				t.Fatalf("parseUCI() failed: %v", err)
			}
			if diff := cmp.Diff(tt.want, exportUCI(secs)); diff != "" {
				t.Errorf("sections (-want +got):\n%s", diff)
			}
		})
	}
}

// TestUCIRefused: what uci refuses, and what autoshape does not know, is an
// error naming the line or the section and option.
func TestUCIRefused(t *testing.T) {
	link := func(lines string) string {
		return strings.Replace(minimalUCI, "config link\n", "config link 'wan'\n", 1) + lines + "\n"
	}
	tests := []struct {
		name, text, want string
	}{
		// The syntax.
		{"unterminated single quote", "config link wan\n\toption a 'x\n", "line 2: ' without its closing '"},
		{"unterminated double quote", "config link wan\n\toption a \"x\n", "line 2: \" without its closing \""},
		{"option before a section", "option a 1\nconfig link wan\n", "line 1: option before the first config section"},
		{"two values", "config link wan\n\toption a 1 2\n", "line 2: option a: more than one value"},
		{"unknown command", "config link wan\n\topton a 1\n", `line 2: unknown command "opton"`},
		{"bad option name", "config link wan\n\toption a-b 1\n", `line 2: option "a-b": the name holds a character uci refuses`},
		{"bad section name", "config link pppoe-wan\n", `line 1: config link "pppoe-wan": the name holds a character uci refuses`},
		{"not UTF-8", "config autoshape main\n\toption state_file '\xd6'\n" + minimalUCI, "line 2: invalid UTF-8 byte 0xd6"},
		{"a name of two types", "config link wan\nconfig autoshape wan\n", "line 2: config autoshape 'wan': section 'wan' is a link (line 1)"},
		// What autoshape does not know.
		{"unknown option", link("\toption colour 'red'"), `link 'wan': unknown option "colour"`},
		{"unknown global option", "config autoshape main\n\toption colour red\n" + minimalUCI, `autoshape 'main': unknown option "colour"`},
		{"unknown section type", "config queue eth1\n" + minimalUCI, "line 1: config queue: unknown section type (want autoshape or link)"},
		{"a list where an option belongs", link("\tlist interface 'eth1'"), "link 'wan' list interface: want option interface"},
		{"two autoshape sections", "config autoshape a\nconfig autoshape b\n" + minimalUCI, "autoshape 'b': a second autoshape section (the first, autoshape 'a', is at line 1)"},
		{"no enabled link", strings.Replace(link("\toption enabled '0'"), "", "", 1), "no enabled config link section"},
		// Values, named by section and option.
		{"bad boolean", link("\toption replace 'maybe'"), `link 'wan' option replace: "maybe" is not a boolean`},
		{"bad number", link("\toption overhead 'lots'"), `link 'wan' option overhead: "lots" is not a whole number`},
		{"bad probe rate", link("\toption probe_rate 'fast'"), `link 'wan' option probe_rate: "fast" is not a number`},
		{"min above max", link("\toption download_min '30000'"), "link 'wan' option download_min 30000kbit > option download_max 20000kbit"},
		{"garbage rate", link("\toption upload_max 'lots'"), `link 'wan' option upload_max: invalid rate "lots"`},
		{"missing base", strings.Replace(minimalUCI, "\toption upload_base '2000'\n", "", 1), "@link[0] option upload_base: missing"},
		{"missing interface", strings.Replace(minimalUCI, "\toption interface 'wan'\n", "", 1), "@link[0] option interface: missing"},
		{"bad policy", link("\toption policy 'foo'"), `link 'wan' option policy: "foo" is not one of "budget", "classic", "supervise"`},
		{"bad reflector", link("\tlist reflector 'one.one.one.one'"), `link 'wan' list reflector: "one.one.one.one" is not an IP address`},
		{"probe rate too high", link("\toption probe_rate '5000'"), "link 'wan' option probe_rate: 5000: want 2 to 1000"},
		{"log level", "config autoshape 'main'\n\toption log_level 'chatty'\n" + minimalUCI, `autoshape 'main' option log_level: "chatty"`},
		{"same interface twice", link("") + strings.Replace(minimalUCI, "config link\n", "config link 'lte'\n", 1), `link 'lte' option interface: "wan" is the interface of link 'wan' too`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(tt.text)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Parse() error = %v, want it to mention %q", err, tt.want)
			}
			if leaksGoNames(err) {
				t.Errorf("the message %q names the code, not the configuration", err)
			}
		})
	}
}

// TestUCIIsTheTOML: a UCI file gives the configuration its TOML twin gives,
// rates without a unit read as kbit/s.
func TestUCIIsTheTOML(t *testing.T) {
	tests := []struct {
		name, uci, toml string
	}{
		{"minimal", minimalUCI, minimalLink},
		{"every option", `
package autoshape

config autoshape 'main'
	option state_file '/tmp/state.json'
	option on_exit 'remove'
	option log_level 'debug'
	option log_decisions '/tmp/d.jsonl'
	option log_decisions_max_mb '3'
	option metrics_listen ''

config link 'lte'
	option enabled '1'
	option interface 'wwan0'
	option ifb 'ifb9'
	option backend 'htb'
	option mode 'setup'
	option replace 'yes'
	option budget '20ms'
	option policy 'classic'
	option overhead '18'
	option mpu '64'
	option link_layer 'ptm'
	option download_min '1mbit'
	option download_base '15000'
	option download_max '50000'
	option download_safe '5000'
	option download_adjust '1'
	option upload_base '5000'
	option upload_adjust 'off'
	option probe_method 'echo'
	list reflector '192.0.2.1'
	list reflector '192.0.2.2'
	list reflector '2001:db8::1'
	option probe_active '2'
	option probe_rate '10'

config link 'off'
	option enabled '0'
	option interface 'eth9'
`, `
state_file = "/tmp/state.json"
on_exit = "remove"
[log]
level = "debug"
decisions = "/tmp/d.jsonl"
decisions_max_mb = 3
[metrics]
listen = ""
[[link]]
name = "lte"
interface = "wwan0"
ifb = "ifb9"
backend = "htb"
mode = "setup"
replace = true
budget = "20ms"
policy = "classic"
overhead = 18
mpu = 64
link_layer = "ptm"
[link.download]
min = "1mbit"
base = "15mbit"
max = "50mbit"
safe = "5mbit"
adjust = true
[link.upload]
base = "5mbit"
adjust = false
[link.probe]
method = "echo"
reflectors = ["192.0.2.1", "192.0.2.2", "2001:db8::1"]
active = 2
rate = 10
`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want, err := Parse(tt.toml)
			if err != nil {
				t.Fatalf("Parse(TOML) failed: %v", err)
			}
			got, err := Parse(tt.uci)
			if err != nil {
				t.Fatalf("Parse(UCI) failed: %v", err)
			}
			opts := []cmp.Option{cmpopts.EquateApprox(1e-12, 0), cmp.Comparer(func(a, b netip.Addr) bool { return a == b })}
			if diff := cmp.Diff(want, got, opts...); diff != "" {
				t.Errorf("the UCI reads differently from the TOML (-toml +uci):\n%s", diff)
			}
		})
	}
}

// TestUCIExample: the example /etc/config/autoshape parses, and says what
// its comments say.
func TestUCIExample(t *testing.T) {
	dir := t.TempDir()
	path := dir + "/autoshape"
	if err := os.WriteFile(path, []byte(exampleUCI(t)), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(path)
	if err != nil {
		t.Fatalf("Load() failed: %v", err)
	}
	if len(cfg.Links) != 1 {
		t.Fatalf("links = %d, want 1 (the disabled lte link left out)", len(cfg.Links))
	}
	l := cfg.Links[0]
	down, up := l.Directions[estimator.Down], l.Directions[estimator.Up]
	switch {
	case l.Name != "wan" || l.Interface != "eth1" || l.IFB != "ifb4eth1" || !l.Attach || l.Budget != 15*time.Millisecond:
		t.Errorf("link = %+v", l)
	case down.Bounds.Min != 10e6 || down.Bounds.Base != 40e6 || down.Bounds.Max != 80e6 || down.Safe != 20e6:
		t.Errorf("download = %+v, want 10/40/80 Mbit/s, safe 20", down)
	case up.Bounds.Base != 10e6 || l.Fixed != [2]bool{}:
		t.Errorf("upload = %+v, fixed %v", up, l.Fixed)
	case cfg.MetricsListen != "127.0.0.1:9877" || cfg.LogLevel != "info" || cfg.RemoveOnExit:
		t.Errorf("config = %+v", cfg)
	}
}

// TestPlainRates: in the TOML a rate without a unit is refused, naming the
// key and the units; in UCI it is kbit/s, as sqm-scripts writes rates.
func TestPlainRates(t *testing.T) {
	_, err := Parse(strings.Replace(minimalLink, `base = "10mbit"`, `base = "40000"`, 1))
	want := `link[0].download.base: "40000" has no unit: write "40000kbit" or "40mbit" (units: bit, kbit, mbit, gbit)`
	if err == nil || err.Error() != want {
		t.Errorf("Parse(base = \"40000\") error = %v, want %q", err, want)
	}
	_, err = Parse(strings.Replace(minimalLink, `min = "1mbit"`, `min = " 500 "`, 1))
	want = `link[0].download.min: " 500 " has no unit: write "500kbit" (units: bit, kbit, mbit, gbit)`
	if err == nil || err.Error() != want {
		t.Errorf("Parse(min = \" 500 \") error = %v, want %q", err, want)
	}
	cfg, err := Parse(strings.Replace(minimalUCI, "download_base '10000'", "download_base '15000'", 1))
	if err != nil {
		t.Fatalf("Parse(UCI) failed: %v", err)
	}
	if got := cfg.Links[0].Directions[estimator.Down].Bounds.Base; got != 15e6 {
		t.Errorf("UCI download_base '15000' = %v bit/s, want 15 Mbit/s", got)
	}
}

// fixedRate is the rate direction d's policy proposes with the shaper at
// its max and a bloated link.
func fixedRate(t *testing.T, l Link, d estimator.Direction) float64 {
	t.Helper()
	p, err := NewPolicy(l, d)
	if err != nil {
		t.Fatal(err)
	}
	b := l.Directions[d].Bounds
	return p.Next(policies.Input{Rate: b.Max, Bounds: b, Obs: estimator.Observation{Direction: d, Bloat: true}}).Rate
}

// TestAdjustOff: adjust = false holds that direction at its base with the
// fixed policy (min and max default to base), leaves the other to the
// link's policy, and survives Write.
func TestAdjustOff(t *testing.T) {
	for _, tt := range []struct{ name, text string }{
		{"toml", strings.Replace(minimalLink, "[link.upload]\nmin = \"1mbit\"", "[link.upload]\nadjust = false", 1)},
		{"uci", strings.Replace(minimalUCI, "\toption upload_min '1000'\n", "\toption upload_adjust '0'\n", 1)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse(tt.text)
			if err != nil {
				t.Fatalf("Parse() failed: %v", err)
			}
			l := cfg.Links[0]
			if l.Fixed != [2]bool{estimator.Up: true} {
				t.Errorf("fixed = %v, want the upload only", l.Fixed)
			}
			if up := l.Directions[estimator.Up].Bounds; up.Min != 2e6 || up.Base != 2e6 || up.Max != 5e6 {
				t.Errorf("upload bounds = %+v, want min defaulting to base, 2 Mbit/s", up)
			}
			for d, want := range map[estimator.Direction]string{estimator.Up: "fixed", estimator.Down: "budget"} {
				p, err := NewPolicy(l, d)
				if err != nil {
					t.Fatalf("NewPolicy(%v) failed: %v", d, err)
				}
				if p.Name() != want {
					t.Errorf("direction %v runs %q, want %q", d, p.Name(), want)
				}
			}
			if got := fixedRate(t, l, estimator.Up); got != 2e6 {
				t.Errorf("the fixed policy proposes %v bit/s, want the base, 2 Mbit/s", got)
			}
			text := configText(t, cfg)
			if !strings.Contains(text, "adjust = false") {
				t.Errorf("Write() dropped adjust = false:\n%s", text)
			}
			back, err := Parse(text)
			if err != nil || back.Links[0].Fixed != l.Fixed {
				t.Errorf("written back: fixed %v, error %v; want %v", back.Links[0].Fixed, err, l.Fixed)
			}
		})
	}
	// Without min and max the rate has nowhere to go but base.
	cfg, err := Parse(strings.Replace(minimalLink, "[link.upload]\nmin = \"1mbit\"\nbase = \"2mbit\"\nmax = \"5mbit\"", "[link.upload]\nadjust = false\nbase = \"2mbit\"", 1))
	if err != nil {
		t.Fatalf("Parse() failed: %v", err)
	}
	if b := cfg.Links[0].Directions[estimator.Up].Bounds; b.Min != 2e6 || b.Max != 2e6 {
		t.Errorf("upload bounds = %+v, want min = max = base", b)
	}
}
