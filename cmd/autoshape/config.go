package main

import (
	_ "embed"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/autoshape/autoshape/actuator"
	"github.com/autoshape/autoshape/controller"
	"github.com/autoshape/autoshape/estimator"
	"github.com/autoshape/autoshape/policies"
)

// referenceConfig is the commented configuration `autoshape config default`
// prints; the tests parse it.
//
//go:embed reference.toml
var referenceConfig string

// rawConfig is the TOML as written; toConfig checks it and converts it.
type rawConfig struct {
	StateFile string    `toml:"state_file"`
	OnExit    string    `toml:"on_exit"`
	Log       rawLog    `toml:"log"`
	Metrics   rawMetric `toml:"metrics"`
	Links     []rawLink `toml:"link"`
}

type rawLog struct {
	Level          string `toml:"level"`
	Decisions      string `toml:"decisions"`
	DecisionsMaxMB int    `toml:"decisions_max_mb"`
}

type rawMetric struct {
	Listen *string `toml:"listen"`
}

type rawLink struct {
	Name      string       `toml:"name"`
	Interface string       `toml:"interface"`
	IFB       string       `toml:"ifb"`
	Backend   string       `toml:"backend"`
	Mode      string       `toml:"mode"`
	Replace   bool         `toml:"replace"`
	Budget    string       `toml:"budget"`
	Policy    string       `toml:"policy"`
	Overhead  int          `toml:"overhead"`
	MPU       int          `toml:"mpu"`
	LinkLayer string       `toml:"link_layer"`
	Download  rawDirection `toml:"download"`
	Upload    rawDirection `toml:"upload"`
	Probe     rawProbe     `toml:"probe"`
}

type rawDirection struct {
	Min  string `toml:"min"`
	Base string `toml:"base"`
	Max  string `toml:"max"`
	Safe string `toml:"safe"`
}

type rawProbe struct {
	Method     string   `toml:"method"`
	Reflectors []string `toml:"reflectors"`
	Active     int      `toml:"active"`
	Rate       float64  `toml:"rate"`
}

// Config is a checked configuration.
type Config struct {
	StateFile      string
	RemoveOnExit   bool // false: leave the shapers at their base rates
	LogLevel       string
	Decisions      string
	DecisionsMaxMB int
	MetricsListen  string // "" disables the metrics server
	Links          []LinkConfig
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
)

// LinkConfig is one shaped link.
type LinkConfig struct {
	Name, Interface, IFB string
	Backend              actuator.Backend
	Attach               bool // attach to shaping something else made
	Replace              bool // setup mode: replace other software's root qdiscs
	Budget               time.Duration
	Policy               PolicyName
	Framing              actuator.Framing
	Directions           [2]controller.DirectionConfig // by estimator.Direction
	Method               estimator.Method
	Reflectors           []netip.Addr
	ActiveReflectors     int
	ProbeRate            float64
}

// loadConfig reads and checks a configuration file.
func loadConfig(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, err
	}
	cfg, err := parseConfig(string(b))
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// parseConfig decodes TOML strictly (an unknown key is an error) and checks
// every value, naming the key of the first problem.
func parseConfig(text string) (Config, error) {
	var raw rawConfig
	md, err := toml.Decode(text, &raw)
	if err != nil {
		return Config{}, err
	}
	if und := md.Undecoded(); len(und) > 0 {
		return Config{}, fmt.Errorf("unknown key %q", und[0].String())
	}
	return raw.toConfig()
}

func (raw rawConfig) toConfig() (Config, error) {
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
		return cfg, fmt.Errorf("on_exit: %q is neither \"base\" nor \"remove\"", raw.OnExit)
	}
	switch cfg.LogLevel {
	case "":
		cfg.LogLevel = "info"
	case "debug", "info", "warn", "error":
	default:
		return cfg, fmt.Errorf("log.level: %q is not one of debug, info, warn, error", cfg.LogLevel)
	}
	if cfg.DecisionsMaxMB == 0 {
		cfg.DecisionsMaxMB = 10
	}
	if cfg.DecisionsMaxMB < 0 {
		return cfg, fmt.Errorf("log.decisions_max_mb: %d is negative", cfg.DecisionsMaxMB)
	}
	if raw.Metrics.Listen != nil {
		cfg.MetricsListen = *raw.Metrics.Listen
		if cfg.MetricsListen != "" {
			if _, err := netip.ParseAddrPort(cfg.MetricsListen); err != nil {
				return cfg, fmt.Errorf("metrics.listen: %q is not an address:port (\"\" turns metrics off)", cfg.MetricsListen)
			}
		}
	}
	if len(raw.Links) == 0 {
		return cfg, errors.New("no [[link]]: nothing to shape")
	}
	seen := map[string]bool{}
	for i, rl := range raw.Links {
		key := fmt.Sprintf("link[%d]", i)
		if rl.Name != "" {
			key = fmt.Sprintf("link[%d] (%s)", i, rl.Name)
		}
		l, err := rl.toLink()
		if err != nil {
			return cfg, fmt.Errorf("%s.%w", key, err)
		}
		if seen[l.Interface] {
			return cfg, fmt.Errorf("%s.interface: %q is shaped by an earlier link too", key, l.Interface)
		}
		seen[l.Interface] = true
		cfg.Links = append(cfg.Links, l)
	}
	return cfg, nil
}

// keyErr prefixes an error with the key it is about.
func keyErr(key string, format string, a ...any) error {
	return fmt.Errorf("%s: %s", key, fmt.Sprintf(format, a...))
}

func (rl rawLink) toLink() (LinkConfig, error) {
	l := LinkConfig{Name: rl.Name, Interface: rl.Interface, IFB: rl.IFB, ActiveReflectors: rl.Probe.Active, ProbeRate: rl.Probe.Rate}
	if l.Interface == "" {
		return l, keyErr("interface", "missing: name the WAN interface")
	}
	if l.Name == "" {
		l.Name = l.Interface
	}
	if l.IFB == "" {
		l.IFB = actuator.DefaultIFB(l.Interface)
	}
	b := rl.Backend
	if b == "" {
		b = "cake"
	}
	backend, err := actuator.ParseBackend(b)
	if err != nil {
		return l, keyErr("backend", "%v", err)
	}
	l.Backend = backend
	switch rl.Mode {
	case "", "setup":
	case "attach":
		l.Attach = true
	default:
		return l, keyErr("mode", "%q is neither \"setup\" nor \"attach\"", rl.Mode)
	}
	if rl.Replace && l.Attach {
		return l, keyErr("replace", "true only goes with mode = \"setup\": attach mode never replaces a qdisc")
	}
	l.Replace = rl.Replace
	l.Budget = 15 * time.Millisecond
	if rl.Budget != "" {
		d, err := time.ParseDuration(rl.Budget)
		if err != nil || d <= 0 {
			return l, keyErr("budget", "%q is not a positive duration such as \"15ms\"", rl.Budget)
		}
		l.Budget = d
	}
	if err := (policies.BudgetConfig{Budget: l.Budget}).Validate(); err != nil {
		return l, keyErr("budget", "%v", err)
	}
	switch p := PolicyName(rl.Policy); p {
	case "":
		l.Policy = PolicyBudget
	case PolicyBudget, PolicyClassic:
		l.Policy = p
	default:
		return l, keyErr("policy", "%q is neither %q nor %q", rl.Policy, PolicyBudget, PolicyClassic)
	}
	l.Framing = actuator.Framing{Overhead: rl.Overhead}
	if rl.Overhead < -64 || rl.Overhead > 256 {
		return l, keyErr("overhead", "%d is outside -64 to 256 bytes", rl.Overhead)
	}
	if rl.MPU < 0 || rl.MPU > 256 {
		return l, keyErr("mpu", "%d is outside 0 to 256 bytes", rl.MPU)
	}
	l.Framing.MPU = uint32(rl.MPU)
	switch rl.LinkLayer {
	case "", "ethernet":
	case "atm":
		l.Framing.LinkLayer = actuator.ATM
	case "ptm":
		l.Framing.LinkLayer = actuator.PTM
	default:
		return l, keyErr("link_layer", "%q is not one of ethernet, atm, ptm", rl.LinkLayer)
	}
	for _, d := range []struct {
		name string
		dir  estimator.Direction
		raw  rawDirection
	}{{"download", estimator.Down, rl.Download}, {"upload", estimator.Up, rl.Upload}} {
		dc, err := d.raw.toDirection()
		if err != nil {
			return l, fmt.Errorf("%s.%w", d.name, err)
		}
		l.Directions[d.dir] = dc
	}
	method := rl.Probe.Method
	if method == "" {
		method = "auto"
	}
	if l.Method, err = estimator.ParseMethod(method); err != nil {
		return l, keyErr("probe.method", "%v", err)
	}
	for _, s := range rl.Probe.Reflectors {
		a, err := netip.ParseAddr(strings.TrimSpace(s))
		if err != nil {
			return l, keyErr("probe.reflectors", "%q is not an IP address", s)
		}
		l.Reflectors = append(l.Reflectors, a)
	}
	pc := estimator.PoolConfig{Reflectors: l.Reflectors, Active: l.ActiveReflectors, Rate: l.ProbeRate, Method: l.Method}
	if err := pc.Validate(); err != nil {
		return l, keyErr("probe", "%v", err)
	}
	return l, nil
}

func (rd rawDirection) toDirection() (controller.DirectionConfig, error) {
	var dc controller.DirectionConfig
	for _, v := range []struct {
		key, val string
		dst      *float64
		required bool
	}{{"min", rd.Min, &dc.Bounds.Min, true}, {"base", rd.Base, &dc.Bounds.Base, true}, {"max", rd.Max, &dc.Bounds.Max, true}, {"safe", rd.Safe, &dc.Safe, false}} {
		if v.val == "" {
			if v.required {
				return dc, keyErr(v.key, "missing: a rate such as \"20mbit\"")
			}
			continue
		}
		r, err := actuator.ParseRate(v.val)
		if err != nil {
			return dc, keyErr(v.key, "%v", err)
		}
		*v.dst = r
	}
	if err := controller.ValidateBounds(dc.Bounds); err != nil {
		return dc, keyErr("min/base/max", "%v", err)
	}
	if dc.Safe != 0 && (dc.Safe < dc.Bounds.Min || dc.Safe > dc.Bounds.Max) {
		return dc, keyErr("safe", "%s is outside [min, max]", rd.Safe)
	}
	return dc, nil
}

// configCmd is `autoshape config default|check FILE`.
func configCmd(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usagef("usage: autoshape config default | autoshape config check FILE")
	}
	switch args[0] {
	case "default":
		if len(args) != 1 {
			return usagef("config default takes no arguments")
		}
		_, err := io.WriteString(stdout, referenceConfig)
		return err
	case "check":
		if len(args) != 2 {
			return usagef("usage: autoshape config check FILE")
		}
		cfg, err := loadConfig(args[1])
		if err != nil {
			return usageError{err}
		}
		fmt.Fprintf(stdout, "%s: ok (%d link(s))\n", args[1], len(cfg.Links))
		return nil
	}
	return usagef("unknown config command %q (known: default, check)", args[0])
}
