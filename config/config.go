// Package config reads, checks and writes autoshape's TOML configuration:
// a strict decode (an unknown key is an error) into raw structs, then a
// conversion into checked, typed values with the user's key and units in
// every message. What Parse passes, the daemon's parts accept at start.
package config

import (
	"cmp"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"golang.org/x/sys/unix"

	"github.com/autoshape/autoshape/actuator"
	"github.com/autoshape/autoshape/controller"
	"github.com/autoshape/autoshape/estimator"
	"github.com/autoshape/autoshape/policies"
	"github.com/autoshape/autoshape/probe"
)

// Reference is the commented reference configuration (`autoshape config
// default` prints it); the tests parse it.
//
//go:embed reference.toml
var Reference string

// rawConfig is the TOML as written; toConfig checks it and converts it.
type rawConfig struct {
	StateFile string    `toml:"state_file,omitempty"`
	OnExit    string    `toml:"on_exit,omitempty"`
	Log       rawLog    `toml:"log,omitempty"`
	Metrics   rawMetric `toml:"metrics,omitempty"`
	Links     []rawLink `toml:"link,omitempty"`
}

type rawLog struct {
	Level          string `toml:"level,omitempty"`
	Decisions      string `toml:"decisions,omitempty"`
	DecisionsMaxMB int    `toml:"decisions_max_mb,omitempty"`
}

type rawMetric struct {
	Listen *string `toml:"listen,omitempty"`
}

type rawLink struct {
	Name      string       `toml:"name,omitempty"`
	Interface string       `toml:"interface,omitempty"`
	IFB       string       `toml:"ifb,omitempty"`
	Backend   string       `toml:"backend,omitempty"`
	Mode      string       `toml:"mode,omitempty"`
	Replace   bool         `toml:"replace,omitempty"`
	Budget    string       `toml:"budget,omitempty"`
	Policy    string       `toml:"policy,omitempty"`
	Overhead  int          `toml:"overhead,omitempty"`
	MPU       int          `toml:"mpu,omitempty"`
	LinkLayer string       `toml:"link_layer,omitempty"`
	Download  rawDirection `toml:"download,omitempty"`
	Upload    rawDirection `toml:"upload,omitempty"`
	Probe     rawProbe     `toml:"probe,omitempty"`
}

type rawDirection struct {
	Min    string `toml:"min,omitempty"`
	Base   string `toml:"base,omitempty"`
	Max    string `toml:"max,omitempty"`
	Safe   string `toml:"safe,omitempty"`
	Adjust *bool  `toml:"adjust,omitempty"`
}

type rawProbe struct {
	Method     string   `toml:"method,omitempty"`
	Reflectors []string `toml:"reflectors,omitempty"`
	Active     int      `toml:"active,omitempty"`
	Rate       float64  `toml:"rate,omitempty"`
}

// A Config is a checked configuration.
type Config struct {
	StateFile      string
	RemoveOnExit   bool // false: leave the shapers at their base rates
	LogLevel       string
	Decisions      string
	DecisionsMaxMB int
	MetricsListen  string // "" disables the metrics server
	Links          []Link
}

// A PolicyName names the policy that chooses a link's rates.
type PolicyName string

// The policies a link can run.
const (
	// PolicyBudget moves each rate to the highest that keeps the added
	// delay within the link's budget (the default).
	PolicyBudget PolicyName = "budget"
	// PolicyClassic follows cake-autorate's documented default rules; the
	// budget then only sets the estimator's bloat threshold.
	PolicyClassic PolicyName = "classic"
	// PolicySupervise runs the budget policy as the supervisor of CAKE's
	// autorate-ingress on download (policies.Supervise): an experiment,
	// measured in docs/sim-vs-lab.md; it needs mode = "setup" and
	// backend = "cake".
	PolicySupervise PolicyName = "supervise"
)

// A Link is one shaped link.
type Link struct {
	Name, Interface, IFB string
	Backend              actuator.Backend
	Attach               bool // attach to shaping something else made
	Replace              bool // setup mode: replace other software's root qdiscs
	Budget               time.Duration
	Policy               PolicyName
	Framing              actuator.Framing
	Directions           [2]controller.DirectionConfig // by estimator.Direction
	Method               probe.Method
	Reflectors           []netip.Addr
	ActiveReflectors     int
	ProbeRate            float64
	// Fixed, by estimator.Direction, holds a direction at its base rate
	// (adjust = false): NewPolicy gives it the fixed policy.
	Fixed [2]bool
}

// Load reads and checks a configuration file, TOML or UCI (see Parse).
func Load(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, err
	}
	cfg, err := Parse(string(b))
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// Parse decodes TOML strictly (an unknown key is an error) and checks
// every value, naming the key of the first problem. Text whose first
// command is uci's (config, package, option, list) is UCI (uci.go): the
// same keys as options of config autoshape and config link sections.
func Parse(text string) (Config, error) {
	if isUCI(text) {
		return parseUCIConfig(text)
	}
	var raw rawConfig
	md, err := toml.Decode(text, &raw)
	if err != nil {
		return Config{}, err
	}
	if und := md.Undecoded(); len(und) > 0 {
		return Config{}, fmt.Errorf("unknown key %q", und[0].String())
	}
	return raw.toConfig(tomlDialect)
}

// A dialect names keys in messages as the file they come from writes them.
// Keys are given by their TOML path ("log.level", "download.min").
type dialect struct {
	global func(path string) string        // a top-level key
	link   func(i int, name string) string // the i-th link
	sep    string                          // between a link and its key
	key    func(path string) string        // a link's key
	noLink string                          // the message for no link at all
}

var tomlDialect = dialect{
	global: func(path string) string { return path },
	link: func(i int, name string) string {
		if name != "" {
			return fmt.Sprintf("link[%d] (%s)", i, name)
		}
		return fmt.Sprintf("link[%d]", i)
	},
	sep:    ".",
	key:    func(path string) string { return path },
	noLink: "no [[link]]: nothing to shape",
}

func (raw rawConfig) toConfig(dl dialect) (Config, error) {
	cfg := Config{
		StateFile: raw.StateFile, LogLevel: raw.Log.Level,
		Decisions: raw.Log.Decisions, DecisionsMaxMB: raw.Log.DecisionsMaxMB,
		MetricsListen: "127.0.0.1:9877",
	}
	if cfg.StateFile == "" {
		cfg.StateFile = "/var/lib/autoshape/state.json"
	}
	switch raw.OnExit {
	case "", "base":
	case "remove":
		cfg.RemoveOnExit = true
	default:
		return cfg, fmt.Errorf("%s: %q is neither \"base\" nor \"remove\"", dl.global("on_exit"), raw.OnExit)
	}
	switch cfg.LogLevel {
	case "":
		cfg.LogLevel = "info"
	case "debug", "info", "warn", "error":
	default:
		return cfg, fmt.Errorf("%s: %q is not one of debug, info, warn, error", dl.global("log.level"), cfg.LogLevel)
	}
	if cfg.DecisionsMaxMB == 0 {
		cfg.DecisionsMaxMB = 10
	}
	if cfg.DecisionsMaxMB < 0 || cfg.DecisionsMaxMB > maxDecisionsMB {
		return cfg, fmt.Errorf("%s: %d is outside 1 to %d MB", dl.global("log.decisions_max_mb"), cfg.DecisionsMaxMB, maxDecisionsMB)
	}
	if raw.Metrics.Listen != nil {
		cfg.MetricsListen = *raw.Metrics.Listen
		if cfg.MetricsListen != "" {
			if _, err := netip.ParseAddrPort(cfg.MetricsListen); err != nil {
				return cfg, fmt.Errorf("%s: %q is not an address:port (\"\" turns metrics off)", dl.global("metrics.listen"), cfg.MetricsListen)
			}
		}
	}
	if len(raw.Links) == 0 {
		return cfg, errors.New(dl.noLink)
	}
	// Each interface, IFB and name belongs to one link: two links on one
	// device would undo each other's shaping, and the state file and the
	// metrics are keyed by name.
	devices := map[string]string{} // name -> what uses it
	names := map[string]bool{}
	for i, rl := range raw.Links {
		key := dl.link(i, rl.Name)
		l, err := rl.toLink(dl.key)
		if err != nil {
			return cfg, fmt.Errorf("%s%s%w", key, dl.sep, err)
		}
		for _, d := range []struct{ key, dev string }{{"interface", l.Interface}, {"ifb", l.IFB}} {
			if other, ok := devices[d.dev]; ok {
				hint := ""
				if d.key == "ifb" && rl.IFB == "" {
					hint = " (the default ifb4<interface>, cut to 15 characters: set ifb)"
				}
				return cfg, fmt.Errorf("%s%s%s: %q is %s too%s", key, dl.sep, dl.key(d.key), d.dev, other, hint)
			}
			devices[d.dev] = fmt.Sprintf("the %s of %s", d.key, key)
		}
		if names[l.Name] {
			return cfg, fmt.Errorf("%s%s%s: %q names an earlier link too", key, dl.sep, dl.key("name"), l.Name)
		}
		names[l.Name] = true
		cfg.Links = append(cfg.Links, l)
	}
	return cfg, nil
}

// Bounds of the configuration that no other rule implies.
const (
	// maxDecisionsMB is the largest decision file: 1 TiB, far above any
	// router's storage, and in bytes well within an int64.
	maxDecisionsMB = 1 << 20
	// minBudget and maxBudget bound the latency budget. ICMP timestamps
	// count whole milliseconds, so a finer budget cannot be measured, and
	// a budget of seconds accepts the bloat autoshape is there to remove.
	minBudget = time.Millisecond
	maxBudget = 10 * time.Second
	// minProbeRate and maxProbeRate bound probe.rate (probes per second,
	// all reflectors together): a link counts as stalled after a second
	// without an answer, so probes must go out at least twice a second;
	// above probe.MaxPoolRate the probes are load of their own.
	minProbeRate = 2
	maxProbeRate = probe.MaxPoolRate
	// minWrittenRate is the lowest rate the controller writes: whole
	// kbit/s, at least one.
	minWrittenRate = 1000
)

// checkIfName reports why the kernel would refuse name as an interface
// name (net/core/dev.c: dev_valid_name), in words for the key it is from.
func checkIfName(name string) error {
	switch {
	case name == "":
		return errors.New("empty")
	case len(name) > unix.IFNAMSIZ-1:
		return fmt.Errorf("%q is %d bytes long: the kernel takes at most %d", name, len(name), unix.IFNAMSIZ-1)
	case name == "." || name == "..":
		return fmt.Errorf("%q is not a name the kernel takes for an interface", name)
	}
	for i := 0; i < len(name); i++ {
		// The kernel's isspace() counts 0xa0 (Latin-1's no-break space)
		// as a space too.
		switch c := name[i]; c {
		case '/', ':', ' ', '\t', '\n', '\v', '\f', '\r', 0:
			return fmt.Errorf("%q holds %q, which the kernel refuses in an interface name", name, string(rune(c)))
		case 0xa0:
			return fmt.Errorf("%q holds the byte 0xa0, which the kernel counts as a space and refuses in an interface name", name)
		}
	}
	return nil
}

// keyErr prefixes an error with the key it is about.
func keyErr(key string, format string, a ...any) error {
	return fmt.Errorf("%s: %s", key, fmt.Sprintf(format, a...))
}

// toLink checks one link; key names its keys in messages.
func (rl rawLink) toLink(key func(path string) string) (Link, error) {
	l := Link{Name: rl.Name, Interface: rl.Interface, IFB: rl.IFB, ActiveReflectors: rl.Probe.Active, ProbeRate: rl.Probe.Rate}
	if l.Interface == "" {
		return l, keyErr(key("interface"), "missing: name the WAN interface")
	}
	if err := checkIfName(l.Interface); err != nil {
		return l, keyErr(key("interface"), "%v", err)
	}
	if l.Name == "" {
		l.Name = l.Interface
	}
	if l.IFB == "" {
		l.IFB = actuator.DefaultIFB(l.Interface)
	} else if err := checkIfName(l.IFB); err != nil {
		return l, keyErr(key("ifb"), "%v", err)
	}
	if l.IFB == l.Interface {
		return l, keyErr(key("ifb"), "%q is the interface itself: the download needs an IFB of its own", l.IFB)
	}
	b := rl.Backend
	if b == "" {
		b = "cake"
	}
	backend, err := actuator.ParseBackend(b)
	if err != nil {
		return l, keyErr(key("backend"), "%v", err)
	}
	l.Backend = backend
	switch rl.Mode {
	case "", "setup":
	case "attach":
		l.Attach = true
	default:
		return l, keyErr(key("mode"), "%q is neither \"setup\" nor \"attach\"", rl.Mode)
	}
	if rl.Replace && l.Attach {
		return l, keyErr(key("replace"), "true only goes with mode = \"setup\": attach mode never replaces a qdisc")
	}
	l.Replace = rl.Replace
	l.Budget = estimator.DefaultBudget
	if rl.Budget != "" {
		d, err := time.ParseDuration(rl.Budget)
		if err != nil || d <= 0 {
			return l, keyErr(key("budget"), "%q is not a positive duration such as \"15ms\"", rl.Budget)
		}
		if d < minBudget || d > maxBudget {
			return l, keyErr(key("budget"), "%q is outside %v to %v", rl.Budget, minBudget, maxBudget)
		}
		l.Budget = d
	}
	if err := (policies.BudgetConfig{Budget: l.Budget}).Validate(); err != nil {
		return l, keyErr(key("budget"), "%v", err)
	}
	switch p := PolicyName(rl.Policy); p {
	case "":
		l.Policy = PolicyBudget
	case PolicyBudget, PolicyClassic:
		l.Policy = p
	case PolicySupervise:
		if l.Attach || l.Backend != actuator.CAKE {
			return l, keyErr(key("policy"), "%q hands the download's rate to autorate-ingress of autoshape's own CAKE: it needs mode = \"setup\" and backend = \"cake\"", rl.Policy)
		}
		l.Policy = p
	default:
		return l, keyErr(key("policy"), "%q is not one of %q, %q, %q", rl.Policy, PolicyBudget, PolicyClassic, PolicySupervise)
	}
	l.Framing = actuator.Framing{Overhead: rl.Overhead}
	if rl.Overhead < -64 || rl.Overhead > 256 {
		return l, keyErr(key("overhead"), "%d is outside -64 to 256 bytes", rl.Overhead)
	}
	if rl.MPU < 0 || rl.MPU > 256 {
		return l, keyErr(key("mpu"), "%d is outside 0 to 256 bytes", rl.MPU)
	}
	l.Framing.MPU = uint32(rl.MPU)
	switch rl.LinkLayer {
	case "", "ethernet":
	case "atm":
		l.Framing.LinkLayer = actuator.ATM
	case "ptm":
		l.Framing.LinkLayer = actuator.PTM
	default:
		return l, keyErr(key("link_layer"), "%q is not one of ethernet, atm, ptm", rl.LinkLayer)
	}
	if !l.Attach && l.Backend == actuator.HTB && rl.Overhead < 0 {
		return l, keyErr(key("overhead"), "%d: the HTB backend takes 0 to 256 bytes (a negative overhead needs backend = \"cake\")", rl.Overhead)
	}
	// The lowest rate the shaper takes. Attach mode may find sqm-scripts'
	// HTB, whatever the backend key says.
	floor, why := float64(minWrittenRate), "the lowest rate the controller writes (whole kbit/s)"
	switch {
	case l.Attach:
		floor, why = actuator.HTB.MinRate(), "the lowest rate HTB takes (mode = \"attach\" may find an HTB made by sqm-scripts)"
	case l.Backend == actuator.HTB:
		floor, why = actuator.HTB.MinRate(), "the lowest rate HTB takes"
	}
	for _, d := range []struct {
		name string
		dir  estimator.Direction
		raw  rawDirection
	}{{"download", estimator.Down, rl.Download}, {"upload", estimator.Up, rl.Upload}} {
		dc, err := d.raw.toDirection(direction{name: d.name, min: max(floor, minWrittenRate), why: why, key: key})
		if err != nil {
			return l, err
		}
		l.Directions[d.dir] = dc
		l.Fixed[d.dir] = d.raw.Adjust != nil && !*d.raw.Adjust
	}
	method := rl.Probe.Method
	if method == "" {
		method = "auto"
	}
	if l.Method, err = probe.ParseMethod(method); err != nil {
		return l, keyErr(key("probe.method"), "%v", err)
	}
	if err := l.probes(rl.Probe, key); err != nil {
		return l, err
	}
	if err := l.runnable(key); err != nil {
		return l, err
	}
	return l, nil
}

// probes checks the [link.probe] table and fills in its defaults: the
// built-in reflectors (IPv4 only for method = "timestamp"), as many active
// as there are up to six, 40 probes per second.
func (l *Link) probes(rp rawProbe, key func(string) string) error {
	seen := map[netip.Addr]string{}
	for _, s := range rp.Reflectors {
		a, err := netip.ParseAddr(strings.TrimSpace(s))
		if err != nil {
			return keyErr(key("probe.reflectors"), "%q is not an IP address", s)
		}
		a = a.Unmap()
		switch {
		case a.IsUnspecified() || a.IsMulticast():
			return keyErr(key("probe.reflectors"), "%q is not a unicast address", s)
		case l.Method == probe.Timestamp && !a.Is4():
			return keyErr(key("probe.reflectors"), "%q is IPv6, which method = \"timestamp\" cannot probe (use \"auto\")", s)
		}
		if prev, dup := seen[a]; dup {
			return keyErr(key("probe.reflectors"), "%q is %q again", s, prev)
		}
		seen[a] = s
		l.Reflectors = append(l.Reflectors, a)
	}
	if len(l.Reflectors) == 0 {
		for _, a := range probe.DefaultReflectors {
			if l.Method != probe.Timestamp || a.Is4() {
				l.Reflectors = append(l.Reflectors, a)
			}
		}
	}
	n := len(l.Reflectors)
	if l.ActiveReflectors == 0 {
		l.ActiveReflectors = min(probe.DefaultPoolActive, n)
	}
	if lo := min(2, n); l.ActiveReflectors < lo || l.ActiveReflectors > n {
		return keyErr(key("probe.active"), "%d: want %d to the number of reflectors (%d)", l.ActiveReflectors, lo, n)
	}
	if l.ProbeRate == 0 {
		l.ProbeRate = probe.DefaultPoolRate
	}
	if !(l.ProbeRate >= minProbeRate && l.ProbeRate <= maxProbeRate) {
		return keyErr(key("probe.rate"), "%g: want %d to %d probes per second, all reflectors together (a link counts as stalled after 1 s without an answer)", l.ProbeRate, minProbeRate, maxProbeRate)
	}
	if every := time.Duration(float64(l.ActiveReflectors) / l.ProbeRate * float64(time.Second)); every > probe.MaxPoolInterval {
		return keyErr(key("probe"), "active = %d at rate = %g probes each reflector every %v: want at most every %v (raise rate or lower active)", l.ActiveReflectors, l.ProbeRate, every.Round(time.Millisecond), probe.MaxPoolInterval)
	}
	return nil
}

// runnable runs the checks the daemon's parts make when the link starts
// (the probe pool, the estimator, the policy, the controller and, in setup
// mode, the actuator), so that what passes here also starts. The checks
// above are meant to have caught everything in the user's terms already:
// an error here is a gap in them.
func (l Link) runnable(key func(string) string) error {
	pc := probe.PoolConfig{Reflectors: l.Reflectors, Active: l.ActiveReflectors, Rate: l.ProbeRate, Method: l.Method}
	if err := pc.Validate(); err != nil {
		return keyErr(key("probe"), "%v", err)
	}
	if err := (estimator.Config{Budget: l.Budget}).Validate(); err != nil {
		return keyErr(key("budget"), "%v", err)
	}
	for _, d := range estimator.Directions {
		if _, err := NewPolicy(l, d); err != nil {
			return keyErr(key("policy"), "%v", err)
		}
	}
	cc := controller.Config{Link: l.Name, Directions: l.Directions}
	if err := cc.Validate(); err != nil {
		return keyErr(key("download/upload"), "%v", err)
	}
	if !l.Attach {
		sc := actuator.SetupConfig{
			Iface: l.Interface, IFB: l.IFB, Backend: l.Backend, Framing: l.Framing,
			Up: uint64(l.Directions[estimator.Up].Bounds.Base), Down: uint64(l.Directions[estimator.Down].Bounds.Base),
		}
		if err := sc.Validate(); err != nil {
			return fmt.Errorf("%s: %w", key("interface/ifb/backend"), err)
		}
	}
	return nil
}

// A direction is what toDirection needs to know of its link: the key
// ("download" or "upload"), the lowest rate the shaper takes, with the
// reason for it, and how the file names keys.
type direction struct {
	name string
	min  float64
	why  string
	key  func(path string) string
}

// toDirection checks one direction's rates, naming them as the user wrote
// them: each with a unit, min > 0 and at least the shaper's floor, min <=
// base <= max, safe (default base) within [min, max], and a whole kbit/s
// between min and max, since that is what the controller writes. With
// adjust = false, min and max default to base: the rate never moves.
func (rd rawDirection) toDirection(d direction) (controller.DirectionConfig, error) {
	var dc controller.DirectionConfig
	if rd.Adjust != nil && !*rd.Adjust && rd.Base != "" {
		rd.Min = cmp.Or(rd.Min, rd.Base)
		rd.Max = cmp.Or(rd.Max, rd.Base)
	}
	text := map[string]string{}
	for _, v := range []struct {
		key, val string
		dst      *float64
		required bool
	}{{"base", rd.Base, &dc.Bounds.Base, true}, {"min", rd.Min, &dc.Bounds.Min, true}, {"max", rd.Max, &dc.Bounds.Max, true}, {"safe", rd.Safe, &dc.Safe, false}} {
		key := d.key(d.name + "." + v.key)
		if v.val == "" {
			if v.required {
				return dc, keyErr(key, "missing: a rate such as \"20mbit\"")
			}
			continue
		}
		if err := hasUnit(v.val); err != nil {
			return dc, keyErr(key, "%v", err)
		}
		r, err := controller.ParseRate(v.val)
		if err != nil {
			return dc, keyErr(key, "%v", err)
		}
		*v.dst = r
		text[v.key] = key + " " + strings.TrimSpace(v.val)
	}
	b := dc.Bounds
	switch {
	case b.Min < d.min:
		return dc, fmt.Errorf("%s is below %s, %s", text["min"], controller.FormatRate(d.min), d.why)
	case b.Min > b.Max:
		return dc, fmt.Errorf("%s > %s", text["min"], text["max"])
	case b.Base < b.Min:
		return dc, fmt.Errorf("%s < %s", text["base"], text["min"])
	case b.Base > b.Max:
		return dc, fmt.Errorf("%s > %s", text["base"], text["max"])
	case math.Ceil(b.Min/1000)*1000 > b.Max:
		return dc, fmt.Errorf("%s and %s hold no whole kbit/s, the unit the controller writes", text["min"], text["max"])
	case text["safe"] != "" && dc.Safe < b.Min:
		return dc, fmt.Errorf("%s < %s", text["safe"], text["min"])
	case dc.Safe > b.Max:
		return dc, fmt.Errorf("%s > %s", text["safe"], text["max"])
	}
	return dc, nil
}

// hasUnit refuses a plain number as a rate: sqm-scripts and cake-autorate
// mean kbit/s by one, controller.ParseRate bit/s.
func hasUnit(rate string) error {
	v := strings.TrimSpace(rate)
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return nil
	}
	write := fmt.Sprintf("%q", v+"kbit")
	if f >= 1000 {
		write += fmt.Sprintf(" or %q", controller.FormatRate(f*1000))
	}
	return fmt.Errorf("%q has no unit: write %s (units: bit, kbit, mbit, gbit)", rate, write)
}

// NewPolicy returns the policy that runs direction d of link l: the fixed
// policy at its base rate where adjust = false, else the link's policy.
func NewPolicy(l Link, d estimator.Direction) (policies.Policy, error) {
	if l.Fixed[d] {
		return policies.NewFixed(l.Directions[d].Bounds.Base), nil
	}
	switch l.Policy {
	case PolicyClassic:
		return policies.NewClassic(policies.DefaultClassicConfig())
	case PolicySupervise:
		return policies.NewSupervise(policies.BudgetConfig{Budget: l.Budget})
	}
	return policies.NewBudget(policies.BudgetConfig{Budget: l.Budget})
}
