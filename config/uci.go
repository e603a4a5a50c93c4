package config

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// UCI files (OpenWrt's /etc/config/autoshape) hold the same configuration
// as the TOML, one section per table:
//
//	config autoshape 'main'         # at most one: the top-level keys
//		option state_file '/var/lib/autoshape/state.json'
//		option log_level 'info'     # [log] level; log_decisions, log_decisions_max_mb
//		option metrics_listen '127.0.0.1:9877'
//	config link 'wan'               # one per link; the section's name is the link's
//		option interface 'eth1'
//		option download_base '40000'  # kbit/s, as sqm-scripts writes rates
//		option download_adjust '0'    # [link.download] adjust = false
//		list reflector '1.1.1.1'      # [link.probe] reflectors
//		option enabled '0'            # a disabled link is checked but not run
//
// An option is the TOML key with its table's name and an underscore before
// it (probe_rate, download_min), except reflector. A rate without a unit is
// in kbit/s; one with a unit is taken as written. A section of another type
// is an error, as an unknown key is in the TOML.

// A uciSection is one `config TYPE ['NAME']` section.
type uciSection struct {
	typ, name string // name is "" for an anonymous section
	index     int    // among the sections of its type: @typ[index]
	line      int
	opts      map[string]*uciOption
	order     []string // option names, first set first
}

// A uciOption is an option's value, or a list's values.
type uciOption struct {
	values []string
	list   bool
}

// ref names the section as uci does: "link 'wan'", or "@link[0]" when
// anonymous.
func (s *uciSection) ref() string {
	if s.name == "" {
		return fmt.Sprintf("@%s[%d]", s.typ, s.index)
	}
	return fmt.Sprintf("%s '%s'", s.typ, s.name)
}

// isUCI reports whether text is a UCI file: its first command is one of
// uci's, which no TOML file can start with (a TOML key is followed by =).
func isUCI(text string) bool {
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		switch f[0] {
		case "config", "package", "option", "list":
			return len(f) == 1 || !strings.HasPrefix(f[1], "=")
		}
		return false
	}
	return false
}

// parseUCI reads what libuci's file parser reads: commands config, option,
// list and package (or their first letters), one per line or separated by
// ';'; words bare, 'single-quoted' (no escapes) or "double-quoted" (a
// backslash takes the next character as it is), quoted parts of one word
// joined; '#' outside quotes starts a comment; a backslash at the end of a
// line continues it. Like uci, a second section of an existing name
// reopens it, a second option replaces the first, and a list appends.
func parseUCI(text string) ([]*uciSection, error) {
	if err := checkUTF8(text); err != nil {
		return nil, err
	}
	lx := &uciLexer{s: text, line: 1}
	var (
		secs   []*uciSection
		byName = map[string]*uciSection{}
		count  = map[string]int{}
		cur    *uciSection
	)
	for lx.pos < len(lx.s) {
		line := lx.line
		words, err := lx.command()
		if err != nil {
			return nil, err
		}
		if len(words) == 0 {
			continue
		}
		errf := func(format string, a ...any) error {
			return fmt.Errorf("line %d: %s", line, fmt.Sprintf(format, a...))
		}
		switch words[0] {
		case "package", "p":
			if len(words) != 2 || !uciName(words[1]) {
				return nil, errf("want package NAME")
			}
		case "config", "c":
			if len(words) < 2 || words[1] == "" || len(words) > 3 {
				return nil, errf("want config TYPE ['NAME']")
			}
			typ, name := words[1], ""
			if len(words) == 3 {
				name = words[2]
			}
			if !uciName(typ) {
				return nil, errf("config %q: the type holds a character uci refuses (want letters, digits, _)", typ)
			}
			if name != "" && !uciName(name) {
				return nil, errf("config %s %q: the name holds a character uci refuses (want letters, digits, _)", typ, name)
			}
			if s := byName[name]; s != nil {
				if s.typ != typ {
					return nil, errf("config %s '%s': section '%s' is a %s (line %d)", typ, name, name, s.typ, s.line)
				}
				cur = s
				continue
			}
			cur = &uciSection{typ: typ, name: name, index: count[typ], line: line, opts: map[string]*uciOption{}}
			count[typ]++
			secs = append(secs, cur)
			if name != "" {
				byName[name] = cur
			}
		case "option", "o", "list", "l":
			list := words[0][0] == 'l'
			switch {
			case cur == nil:
				return nil, errf("%s before the first config section", words[0])
			case len(words) < 2 || words[1] == "":
				return nil, errf("%s without a name", words[0])
			case len(words) > 3:
				return nil, errf("%s %s: more than one value (quote a value that holds spaces)", words[0], words[1])
			case !uciName(words[1]):
				return nil, errf("%s %q: the name holds a character uci refuses (want letters, digits, _)", words[0], words[1])
			}
			name, value := words[1], ""
			if len(words) == 3 {
				value = words[2]
			}
			o := cur.opts[name]
			if o == nil {
				cur.order = append(cur.order, name)
			}
			if list && o != nil {
				// uci turns an option into a list that starts with its value.
				o.values, o.list = append(o.values, value), true
				continue
			}
			cur.opts[name] = &uciOption{values: []string{value}, list: list}
		default:
			return nil, errf("unknown command %q (want config, option, list or package)", words[0])
		}
	}
	return secs, nil
}

// uciName reports whether uci takes s as a section or option name.
func uciName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

type uciLexer struct {
	s    string
	pos  int
	line int
}

// command reads the words of one command: up to the end of its line, a ';'
// or a comment.
func (lx *uciLexer) command() ([]string, error) {
	var words []string
	for {
		for lx.pos < len(lx.s) && isUCIBlank(lx.s[lx.pos]) {
			lx.pos++
		}
		if lx.pos >= len(lx.s) {
			return words, nil
		}
		switch lx.s[lx.pos] {
		case '\n':
			lx.pos++
			lx.line++
			return words, nil
		case ';':
			lx.pos++
			return words, nil
		case '#':
			if i := strings.IndexByte(lx.s[lx.pos:], '\n'); i >= 0 {
				lx.pos += i
			} else {
				lx.pos = len(lx.s)
			}
			continue
		}
		w, err := lx.word()
		if err != nil {
			return nil, err
		}
		words = append(words, w)
	}
}

// word reads one word, joining its bare and quoted parts.
func (lx *uciLexer) word() (string, error) {
	var b strings.Builder
	for lx.pos < len(lx.s) {
		switch c := lx.s[lx.pos]; {
		case c == '\'':
			end := strings.IndexByte(lx.s[lx.pos+1:], '\'')
			if end < 0 {
				return "", fmt.Errorf("line %d: ' without its closing '", lx.line)
			}
			v := lx.s[lx.pos+1 : lx.pos+1+end]
			lx.line += strings.Count(v, "\n")
			b.WriteString(v)
			lx.pos += end + 2
		case c == '"':
			start := lx.line
			lx.pos++
			for {
				if lx.pos >= len(lx.s) {
					return "", fmt.Errorf("line %d: \" without its closing \"", start)
				}
				c := lx.s[lx.pos]
				if c == '"' {
					lx.pos++
					break
				}
				if c == '\\' {
					lx.pos++
					if lx.continued() {
						continue
					}
					c = lx.s[lx.pos]
				}
				if c == '\n' {
					lx.line++
				}
				b.WriteByte(c)
				lx.pos++
			}
		case c == '#' || c == ';' || c == '\n' || isUCIBlank(c):
			return b.String(), nil
		case c == '\\':
			lx.pos++
			if !lx.continued() {
				b.WriteByte(lx.s[lx.pos])
				lx.pos++
			}
		default:
			b.WriteByte(c)
			lx.pos++
		}
	}
	return b.String(), nil
}

// continued skips a line break after a backslash (and reports true), or
// reports whether the text ends there.
func (lx *uciLexer) continued() bool {
	rest := lx.s[lx.pos:]
	switch {
	case rest == "":
		return true
	case strings.HasPrefix(rest, "\n"):
		lx.pos++
	case strings.HasPrefix(rest, "\r\n"):
		lx.pos += 2
	default:
		return false
	}
	lx.line++
	return true
}

// isUCIBlank reports the white space that separates words on a line.
func isUCIBlank(c byte) bool {
	return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'
}

// parseUCIConfig converts a UCI file into the TOML's raw form and checks
// it as the TOML is checked, naming sections and options in messages.
func parseUCIConfig(text string) (Config, error) {
	secs, err := parseUCI(text)
	if err != nil {
		return Config{}, err
	}
	var (
		raw    rawConfig
		global *uciSection
		refs   []string // by raw.Links index
	)
	for _, s := range secs {
		switch s.typ {
		case "autoshape":
			if global != nil {
				return Config{}, fmt.Errorf("%s: a second autoshape section (the first, %s, is at line %d)", s.ref(), global.ref(), global.line)
			}
			global = s
			if err := s.each(func(name string, o *uciOption, v string) (bool, error) { return raw.setUCI(name, v) }); err != nil {
				return Config{}, err
			}
		case "link":
			rl := rawLink{Name: s.name}
			enabled := true
			err := s.each(func(name string, o *uciOption, v string) (bool, error) {
				if name == "enabled" {
					var err error
					enabled, err = uciBool(v)
					return true, err
				}
				if name == "reflector" {
					rl.Probe.Reflectors = append(rl.Probe.Reflectors, o.values...)
					return true, nil
				}
				return rl.setUCI(name, v)
			})
			if err != nil {
				return Config{}, err
			}
			if enabled {
				raw.Links = append(raw.Links, rl)
				refs = append(refs, s.ref())
			}
		default:
			return Config{}, fmt.Errorf("line %d: config %s: unknown section type (want autoshape or link)", s.line, s.typ)
		}
	}
	globalRef := "config autoshape"
	if global != nil {
		globalRef = global.ref()
	}
	return raw.toConfig(dialect{
		global: func(path string) string { return globalRef + " " + uciKey(path) },
		link:   func(i int, _ string) string { return refs[i] },
		sep:    " ",
		key:    uciKey,
		noLink: "no enabled config link section: nothing to shape",
	})
}

// each calls set with each option's last value, in the order the options
// first appear; set reports whether it knows the option. A list where an
// option belongs is refused, but for reflector.
func (s *uciSection) each(set func(name string, o *uciOption, v string) (bool, error)) error {
	for _, name := range s.order {
		o := s.opts[name]
		if o.list && name != "reflector" {
			return fmt.Errorf("%s list %s: want option %s (one value)", s.ref(), name, name)
		}
		known, err := set(name, o, o.values[len(o.values)-1])
		if err != nil {
			return fmt.Errorf("%s option %s: %w", s.ref(), name, err)
		}
		if !known {
			return fmt.Errorf("%s: unknown option %q", s.ref(), name)
		}
	}
	return nil
}

// uciKey names a link's key, given by its TOML path, as a UCI option.
func uciKey(path string) string {
	switch path {
	case "probe.reflectors":
		return "list reflector"
	case "probe":
		return "options probe_active, probe_rate"
	case "download/upload":
		return "options download_*, upload_*"
	case "interface/ifb/backend":
		return "options interface, ifb, backend"
	case "name":
		return "section name"
	}
	return "option " + strings.ReplaceAll(path, ".", "_")
}

// setUCI sets a top-level option; it reports false for an unknown one.
func (raw *rawConfig) setUCI(name, v string) (bool, error) {
	var err error
	switch name {
	case "state_file":
		raw.StateFile = v
	case "on_exit":
		raw.OnExit = v
	case "log_level":
		raw.Log.Level = v
	case "log_decisions":
		raw.Log.Decisions = v
	case "log_decisions_max_mb":
		raw.Log.DecisionsMaxMB, err = uciInt(v)
	case "metrics_listen":
		raw.Metrics.Listen = &v
	default:
		return false, nil
	}
	return true, err
}

// setUCI sets a link's option; it reports false for an unknown one.
func (rl *rawLink) setUCI(name, v string) (bool, error) {
	var err error
	strs := map[string]*string{
		"interface": &rl.Interface, "ifb": &rl.IFB, "backend": &rl.Backend, "mode": &rl.Mode,
		"budget": &rl.Budget, "policy": &rl.Policy, "link_layer": &rl.LinkLayer, "probe_method": &rl.Probe.Method,
	}
	if dst, ok := strs[name]; ok {
		*dst = v
		return true, nil
	}
	for _, d := range []struct {
		name string
		raw  *rawDirection
	}{{"download_", &rl.Download}, {"upload_", &rl.Upload}} {
		key, ok := strings.CutPrefix(name, d.name)
		if !ok {
			continue
		}
		rates := map[string]*string{"min": &d.raw.Min, "base": &d.raw.Base, "max": &d.raw.Max, "safe": &d.raw.Safe}
		if dst, ok := rates[key]; ok {
			*dst = uciRate(v)
			return true, nil
		}
		if key == "adjust" {
			b, err := uciBool(v)
			d.raw.Adjust = &b
			return true, err
		}
		return false, nil
	}
	switch name {
	case "replace":
		rl.Replace, err = uciBool(v)
	case "overhead":
		rl.Overhead, err = uciInt(v)
	case "mpu":
		rl.MPU, err = uciInt(v)
	case "probe_active":
		rl.Probe.Active, err = uciInt(v)
	case "probe_rate":
		rl.Probe.Rate, err = strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			err = fmt.Errorf("%q is not a number", v)
		}
	default:
		return false, nil
	}
	return true, err
}

// uciRate reads a rate as sqm-scripts writes them: a plain number is in
// kbit/s; one with a unit is taken as written.
func uciRate(v string) string {
	if _, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
		return strings.TrimSpace(v) + "kbit"
	}
	return v
}

// uciBool reads a boolean as uci's scripts do (config_get_bool).
func uciBool(v string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "1", "on", "true", "yes", "enabled":
		return true, nil
	case "0", "off", "false", "no", "disabled":
		return false, nil
	}
	return false, fmt.Errorf("%q is not a boolean: want '1' or '0'", v)
}

func uciInt(v string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		return 0, fmt.Errorf("%q is not a whole number", v)
	}
	return n, nil
}

// checkUTF8 refuses text that is not UTF-8, as the TOML reader does: a
// name or path holding such bytes could not be written back or logged as
// it was read.
func checkUTF8(text string) error {
	for i, r := range text {
		if r == utf8.RuneError {
			if _, n := utf8.DecodeRuneInString(text[i:]); n == 1 {
				return fmt.Errorf("line %d: invalid UTF-8 byte 0x%02x", strings.Count(text[:i], "\n")+1, text[i])
			}
		}
	}
	return nil
}
