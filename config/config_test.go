package config

import (
	"fmt"
	"math"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/autoshape/autoshape/actuator"
	"github.com/autoshape/autoshape/controller"
	"github.com/autoshape/autoshape/estimator"
	"github.com/autoshape/autoshape/probe"
)

func TestReferenceConfigParses(t *testing.T) {
	cfg, err := Parse(Reference)
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
	case l.Budget != 15*time.Millisecond || l.Policy != PolicyBudget || l.Framing.Overhead != 44 || l.Method != probe.Auto:
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
	cfg, err := Parse(minimalLink)
	if err != nil {
		t.Fatalf("Parse() failed: %v", err)
	}
	l := cfg.Links[0]
	if l.Name != "wan" || l.IFB != "ifb4wan" || l.Budget != 15*time.Millisecond || l.Policy != PolicyBudget || l.Backend != actuator.CAKE || l.Method != probe.Auto || l.Replace {
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
		{"unknown policy", with(`interface = "wan"`, "name = \"x\"\ninterface = \"wan\"\npolicy = \"foo\""), `link[0] (x).policy: "foo" is not one of "budget", "classic", "supervise"`},
		{"overhead", with(`interface = "wan"`, "interface = \"wan\"\noverhead = 300"), "link[0].overhead: 300"},
		{"link layer", with(`interface = "wan"`, "interface = \"wan\"\nlink_layer = \"isdn\""), `link[0].link_layer: "isdn"`},
		{"min above max", with(`min = "1mbit"`, `min = "30mbit"`), "link[0].download.min 30mbit > download.max 20mbit"},
		{"garbage rate", with(`max = "5mbit"`, `max = "lots"`), `link[0].upload.max: invalid rate "lots"`},
		{"missing base", with(`base = "2mbit"`, ""), "link[0].upload.base: missing"},
		{"safe outside", with(`max = "5mbit"`, "max = \"5mbit\"\nsafe = \"50mbit\""), "link[0].upload.safe 50mbit > upload.max 5mbit"},
		{"bad reflector", minimalLink + "[link.probe]\nreflectors = [\"one.one.one.one\"]\n", `link[0].probe.reflectors: "one.one.one.one"`},
		{"bad method", minimalLink + "[link.probe]\nmethod = \"carrier-pigeon\"\n", "link[0].probe.method"},
		{"too few active", minimalLink + "[link.probe]\nactive = 1\nreflectors = [\"192.0.2.1\", \"192.0.2.2\"]\n", "link[0].probe"},
		{"on_exit", "on_exit = \"explode\"\n" + minimalLink, `on_exit: "explode"`},
		{"log level", "[log]\nlevel = \"chatty\"\n" + minimalLink, `log.level: "chatty"`},
		{"metrics listen", "[metrics]\nlisten = \"everywhere\"\n" + minimalLink, `metrics.listen: "everywhere"`},
		{"same interface twice", minimalLink + minimalLink, `link[1].interface: "wan" is the interface of link[0] too`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(tt.text)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Parse() error = %v, want it to mention %q", err, tt.want)
			}
		})
	}
}

// TestPolicyChoice: the link's policy key picks the policy the daemon runs
// (budget when left out); anything else is refused, naming the key.
func TestPolicyChoice(t *testing.T) {
	tests := []struct {
		name, line string
		want       PolicyName
		wantErr    string
	}{
		{"default", "", PolicyBudget, ""},
		{"budget", `policy = "budget"`, PolicyBudget, ""},
		{"classic", `policy = "classic"`, PolicyClassic, ""},
		{"supervise", `policy = "supervise"`, PolicySupervise, ""},
		{"supervise on htb", "policy = \"supervise\"\nbackend = \"htb\"", "", `needs mode = "setup" and backend = "cake"`},
		{"supervise attached", "policy = \"supervise\"\nmode = \"attach\"", "", `needs mode = "setup" and backend = "cake"`},
		{"unknown", `policy = "foo"`, "", `link[0] (x).policy: "foo" is not one of "budget", "classic", "supervise"`},
		{"upper case", `policy = "Classic"`, "", `link[0] (x).policy: "Classic"`},
		{"empty string", `policy = ""`, PolicyBudget, ""},
		{"not a string", `policy = 1`, "", "policy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			text := strings.Replace(minimalLink, `interface = "wan"`, "name = \"x\"\ninterface = \"wan\"\n"+tt.line, 1)
			cfg, err := Parse(text)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Parse() error = %v, want it to mention %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse() failed: %v", err)
			}
			l := cfg.Links[0]
			if l.Policy != tt.want {
				t.Errorf("policy = %q, want %q", l.Policy, tt.want)
			}
			for _, d := range estimator.Directions {
				p, err := NewPolicy(l, d)
				if err != nil {
					t.Fatalf("NewPolicy() failed: %v", err)
				}
				if p.Name() != string(tt.want) {
					t.Errorf("the daemon runs the %q policy, want %q", p.Name(), tt.want)
				}
			}
		})
	}
}

// TestReplaceKey: replace = true lets setup mode replace other software's
// root qdiscs; a changed replace restarts the link on reload.
func TestReplaceKey(t *testing.T) {
	cfg, err := Parse(strings.Replace(minimalLink, `interface = "wan"`, "interface = \"wan\"\nmode = \"setup\"\nreplace = true", 1))
	if err != nil {
		t.Fatalf("Parse() failed: %v", err)
	}
	l := cfg.Links[0]
	if !l.Replace || l.Attach {
		t.Errorf("link = %+v, want Replace in setup mode", l)
	}
}

// TestConfigRefusesWhatCannotRun: every configuration the daemon could not
// run (it would fail, retry for ever or write rates it cannot hold) is
// refused by config check, with the user's key and units; `run -c` refuses
// it the same way, with exit status 2, before touching anything.
func TestConfigRefusesWhatCannotRun(t *testing.T) {
	with := func(old, new string) string { return strings.Replace(minimalLink, old, new, 1) }
	link := func(lines string) string { return with(`interface = "wan"`, "interface = \"wan\"\n"+lines) }
	probe := func(lines string) string { return minimalLink + "[link.probe]\n" + lines + "\n" }
	many := make([]string, 121)
	for i := range many {
		many[i] = fmt.Sprintf("%q", fmt.Sprintf("10.0.%d.%d", i/200, i%200+1))
	}
	second := func(iface, ifb string) string {
		s := strings.Replace(minimalLink, `interface = "wan"`, fmt.Sprintf("interface = %q", iface), 1)
		if ifb != "" {
			s = strings.Replace(s, "[link.download]", fmt.Sprintf("ifb = %q\n[link.download]", ifb), 1)
		}
		return s
	}
	tests := []struct {
		name, text, want string
	}{
		// Rates the shaper or the controller cannot hold.
		{"HTB min 5 kbit/s", strings.Replace(link(`backend = "htb"`), `min = "1mbit"`, `min = "5kbit"`, 1), `link[0].download.min 5kbit is below 8kbit, the lowest rate HTB takes`},
		{"attach min 5 kbit/s", strings.Replace(link(`mode = "attach"`), `min = "1mbit"`, `min = "5kbit"`, 1), `link[0].download.min 5kbit is below 8kbit, the lowest rate HTB takes (mode = "attach"`},
		{"CAKE min under 1 kbit/s", with(`min = "1mbit"`, `min = "500bit"`), "link[0].download.min 500bit is below 1kbit, the lowest rate the controller writes"},
		{"no whole kbit/s between min and max", with("min = \"1mbit\"\nbase = \"10mbit\"\nmax = \"20mbit\"", "min = \"1.2kbit\"\nbase = \"1.5kbit\"\nmax = \"1.8kbit\""), "link[0].download.min 1.2kbit and download.max 1.8kbit hold no whole kbit/s"},
		{"infinite max", with(`max = "20mbit"`, `max = "1e300gbit"`), `link[0].download.max: invalid rate "1e300gbit": above 10 Tbit/s`},
		{"max above 10 Tbit/s", with(`max = "20mbit"`, `max = "20000gbit"`), "link[0].download.max: invalid rate \"20000gbit\": above 10 Tbit/s"},
		{"base above max", with(`base = "10mbit"`, `base = "100mbit"`), "link[0].download.base 100mbit > download.max 20mbit"},
		{"base below min", with(`base = "2mbit"`, `base = "500kbit"`), "link[0].upload.base 500kbit < upload.min 1mbit"},
		{"safe of zero", with(`max = "20mbit"`, "max = \"20mbit\"\nsafe = \"0kbit\""), "link[0].download.safe 0kbit < download.min 1mbit"},
		{"HTB with a negative overhead", link("backend = \"htb\"\noverhead = -4"), `link[0].overhead: -4: the HTB backend takes 0 to 256 bytes`},
		// Interface names the kernel refuses.
		{"interface of 16 bytes", with(`interface = "wan"`, `interface = "wan0123456789abc"`), `link[0].interface: "wan0123456789abc" is 16 bytes long: the kernel takes at most 15`},
		{"interface empty", with(`interface = "wan"`, `interface = ""`), "link[0].interface: missing"},
		{"interface dot", with(`interface = "wan"`, `interface = "."`), `link[0].interface: "." is not a name the kernel takes`},
		{"interface dot dot", with(`interface = "wan"`, `interface = ".."`), `link[0].interface: ".." is not a name`},
		{"interface with a slash", with(`interface = "wan"`, `interface = "eth0/1"`), `link[0].interface: "eth0/1" holds "/"`},
		{"interface with a colon", with(`interface = "wan"`, `interface = "eth0:1"`), `link[0].interface: "eth0:1" holds ":"`},
		{"interface with a space", with(`interface = "wan"`, `interface = "eth 0"`), `link[0].interface: "eth 0" holds " "`},
		{"interface with a tab", with(`interface = "wan"`, `interface = "eth\t0"`), `link[0].interface: "eth\t0" holds "\t"`},
		{"interface with a no-break space", with(`interface = "wan"`, `interface = "eth\u00a0"`), `link[0].interface: "eth\u00a0" holds`},
		{"ifb is the interface", link(`ifb = "wan"`), `link[0].ifb: "wan" is the interface itself`},
		{"ifb of 16 bytes", link(`ifb = "ifb4wan456789abc"`), `link[0].ifb: "ifb4wan456789abc" is 16 bytes long`},
		{"ifb with a colon", link(`ifb = "ifb:0"`), `link[0].ifb: "ifb:0" holds ":"`},
		// Devices and names two links would share.
		{"two links, one ifb", second("wan", "ifb0") + second("lte", "ifb0"), `link[1].ifb: "ifb0" is the ifb of link[0] too`},
		{"two links, one default ifb", second("enx0123456789ab", "") + second("enx0123456789ac", ""), `link[1].ifb: "ifb4enx01234567" is the ifb of link[0] too (the default ifb4<interface>, cut to 15 characters: set ifb)`},
		{"one link's ifb is another's interface", second("wan", "") + second("ifb4wan", "ifb1"), `link[1].interface: "ifb4wan" is the ifb of link[0] too`},
		{"two links, one name", link(`name = "x"`) + strings.Replace(second("lte", ""), `interface = "lte"`, "name = \"x\"\ninterface = \"lte\"", 1), `link[1] (x).name: "x" names an earlier link too`},
		// The probes.
		{"probe rate 1e-300", probe("rate = 1e-300"), "link[0].probe.rate: 1e-300: want 2 to 1000 probes per second"},
		{"probe rate 1", probe("rate = 1"), "link[0].probe.rate: 1: want 2 to 1000"},
		{"probe rate inf", probe("rate = inf"), "link[0].probe.rate: +Inf: want 2 to 1000"},
		{"probe rate nan", probe("rate = nan"), "link[0].probe.rate: NaN: want 2 to 1000"},
		{"probe rate negative", probe("rate = -5"), "link[0].probe.rate: -5: want 2 to 1000"},
		{"probe rate too high", probe("rate = 5000"), "link[0].probe.rate: 5000: want 2 to 1000"},
		{"active beyond the reflectors", probe("active = 3\nreflectors = [\"192.0.2.1\", \"192.0.2.2\"]"), "link[0].probe.active: 3: want 2 to the number of reflectors (2)"},
		{"active negative", probe("active = -1"), "link[0].probe.active: -1: want 2 to the number of reflectors"},
		{"each reflector probed less than once a minute", probe("rate = 2\nactive = 121\nreflectors = [" + strings.Join(many, ", ") + "]"), "link[0].probe: active = 121 at rate = 2 probes each reflector every 1m0.5s: want at most every 1m0s"},
		{"timestamp to IPv6", probe("method = \"timestamp\"\nreflectors = [\"192.0.2.1\", \"2001:db8::1\"]"), `link[0].probe.reflectors: "2001:db8::1" is IPv6, which method = "timestamp" cannot probe`},
		{"reflector twice", probe(`reflectors = ["192.0.2.1", "::ffff:192.0.2.1"]`), `link[0].probe.reflectors: "::ffff:192.0.2.1" is "192.0.2.1" again`},
		{"multicast reflector", probe(`reflectors = ["192.0.2.1", "224.0.0.1"]`), `link[0].probe.reflectors: "224.0.0.1" is not a unicast address`},
		// The rest.
		{"budget under 1 ms", link(`budget = "500us"`), `link[0].budget: "500us" is outside 1ms to 10s`},
		{"budget of an hour", link(`budget = "1h"`), `link[0].budget: "1h" is outside 1ms to 10s`},
		{"decision file of exabytes", "[log]\ndecisions_max_mb = 10000000000000\n" + minimalLink, "log.decisions_max_mb: 10000000000000 is outside 1 to 1048576 MB"},
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

// leaksGoNames reports whether a configuration error speaks of the code
// (a Go field, a package) rather than of the keys the user wrote.
func leaksGoNames(err error) bool {
	msg := err.Error()
	for _, s := range []string{"PoolConfig", "Bounds", "bit/s is", "SetupConfig"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	// A package's prefix opens the message or follows another's colon;
	// the user's own key "link[0].policy:" is not one.
	for _, pkg := range []string{"estimator", "controller", "policy", "policies"} {
		if strings.HasPrefix(msg, pkg+": ") || strings.Contains(msg, ": "+pkg+": ") {
			return true
		}
	}
	return false
}

// TestConfigFillsWhatTheDaemonRuns: the defaults are filled in as the
// daemon's parts would take them, so that what config check passes is what
// runs: with method = "timestamp" and no reflectors, the built-in list's
// IPv4 addresses only (its IPv6 ones made the daemon fail at start).
func TestConfigFillsWhatTheDaemonRuns(t *testing.T) {
	for _, method := range []string{"auto", "echo", "timestamp"} {
		t.Run(method, func(t *testing.T) {
			cfg, err := Parse(minimalLink + "[link.probe]\nmethod = \"" + method + "\"\n")
			if err != nil {
				t.Fatalf("Parse() failed: %v", err)
			}
			l := cfg.Links[0]
			if len(l.Reflectors) < 2 || l.ActiveReflectors < 2 || l.ActiveReflectors > len(l.Reflectors) || l.ProbeRate != probe.DefaultPoolRate {
				t.Errorf("reflectors %v, active %d, rate %v: want the defaults", l.Reflectors, l.ActiveReflectors, l.ProbeRate)
			}
			for _, a := range l.Reflectors {
				if method == "timestamp" && !a.Is4() {
					t.Errorf("reflector %s is IPv6: method timestamp cannot probe it", a)
				}
			}
			pc := probe.PoolConfig{Reflectors: l.Reflectors, Active: l.ActiveReflectors, Rate: l.ProbeRate, Method: l.Method}
			if err := pc.Validate(); err != nil {
				t.Errorf("the daemon's probe pool refuses what config check passed: %v", err)
			}
		})
	}
}

// The limits themselves are accepted.
func TestConfigLimits(t *testing.T) {
	with := func(old, new string) string { return strings.Replace(minimalLink, old, new, 1) }
	for _, text := range []string{
		with(`interface = "wan"`, "interface = \"wan0123456789ab\"\nifb = \"ifb0123456789ab\""),
		with(`interface = "wan"`, "interface = \"wan\"\nbackend = \"htb\"\nbudget = \"1ms\"\n[link.probe]\nrate = 2\nactive = 2"),
		with("min = \"1mbit\"\nbase = \"10mbit\"\nmax = \"20mbit\"", "min = \"1.2kbit\"\nbase = \"2kbit\"\nmax = \"2kbit\""),
		with(`max = "20mbit"`, `max = "10000gbit"`),
		with(`interface = "wan"`, "interface = \"wan\"\nbudget = \"10s\"\noverhead = -64\n[link.probe]\nrate = 1000"),
	} {
		if _, err := Parse(text); err != nil {
			t.Errorf("Parse(%q) failed: %v", text, err)
		}
	}
}

// configText writes cfg back as the TOML that configures it.
func configText(t *testing.T, cfg Config) string {
	t.Helper()
	var b strings.Builder
	if err := Write(&b, cfg); err != nil {
		t.Fatalf("Write(%+v) failed: %v", cfg, err)
	}
	return b.String()
}

// FuzzConfig: any text is refused, in the user's terms, or gives a
// configuration whose every link the daemon can run (bounds finite and
// ordered, names the kernel takes, probes within range) and that reads
// back the same when written out again.
func FuzzConfig(f *testing.F) {
	f.Add(minimalLink)
	f.Add(Reference)
	f.Add(strings.Replace(minimalLink, `interface = "wan"`, "interface = \"wan\"\nbackend = \"htb\"\nmode = \"attach\"\noverhead = -3\nlink_layer = \"atm\"", 1))
	f.Add(minimalLink + "[link.probe]\nmethod = \"timestamp\"\nreflectors = [\"192.0.2.1\", \"192.0.2.2\", \"2001:db8::1\"]\nactive = 2\nrate = 1e-300\n")
	f.Add(strings.Replace(minimalLink, "[link.upload]", "[link.upload]\nadjust = false", 1))
	f.Add(minimalUCI)
	f.Add(exampleUCI(f))
	f.Fuzz(func(t *testing.T, text string) {
		cfg, err := Parse(text)
		if err != nil {
			if leaksGoNames(err) {
				t.Fatalf("the message %q names the code, not the configuration", err)
			}
			return
		}
		for i, l := range cfg.Links {
			if checkIfName(l.Interface) != nil || checkIfName(l.IFB) != nil || l.IFB == l.Interface {
				t.Fatalf("link %d: interface %q, IFB %q: want two names the kernel takes", i, l.Interface, l.IFB)
			}
			floor := float64(minWrittenRate)
			if l.Attach || l.Backend == actuator.HTB {
				floor = actuator.HTB.MinRate()
			}
			for d, dc := range l.Directions {
				b := dc.Bounds
				if !(floor <= b.Min && b.Min <= b.Base && b.Base <= b.Max && b.Max <= controller.MaxRate) ||
					math.Ceil(b.Min/1000)*1000 > b.Max || (dc.Safe != 0 && (dc.Safe < b.Min || dc.Safe > b.Max)) {
					t.Fatalf("link %d direction %d: bounds %+v, safe %v: want %v <= min <= base <= max <= %v, a whole kbit/s between min and max, safe between them", i, d, b, dc.Safe, floor, controller.MaxRate)
				}
			}
			if l.Budget < minBudget || l.Budget > maxBudget || len(l.Reflectors) == 0 ||
				!(l.ProbeRate >= minProbeRate && l.ProbeRate <= maxProbeRate) || l.ActiveReflectors < min(2, len(l.Reflectors)) || l.ActiveReflectors > len(l.Reflectors) {
				t.Fatalf("link %d: budget %v, %d reflectors (%d active) at %v per second: out of range", i, l.Budget, len(l.Reflectors), l.ActiveReflectors, l.ProbeRate)
			}
		}
		again := configText(t, cfg)
		back, err := Parse(again)
		if err != nil {
			t.Fatalf("the configuration written back does not parse: %v\n%s", err, again)
		}
		opts := []cmp.Option{cmpopts.EquateApprox(1e-12, 0), cmp.Comparer(func(a, b netip.Addr) bool { return a == b })}
		if diff := cmp.Diff(cfg, back, opts...); diff != "" {
			t.Fatalf("the configuration written back reads differently (-want +got):\n%s", diff)
		}
	})
}
