package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/autoshape/autoshape/actuator"
)

// sqmMinShare is the fraction of sqm-scripts' rate that FromSQM makes a
// link's min.
const sqmMinShare = 0.2

// sqmCakeScripts are sqm-scripts' scripts whose root qdiscs are CAKE, on the
// interface and on its IFB.
var sqmCakeScripts = map[string]bool{"piece_of_cake.qos": true, "layer_cake.qos": true}

// FromSQM turns sqm-scripts' UCI configuration (/etc/config/sqm, read from
// source) into an autoshape configuration in UCI, one link per enabled
// queue that runs CAKE, attached to sqm's qdiscs. Queues it cannot use are
// left out with a comment saying why; if none is left, the error says why
// of each. What it returns, Parse accepts.
func FromSQM(text, source string) (string, error) {
	secs, err := parseUCI(text)
	if err != nil {
		return "", fmt.Errorf("%s: %w", source, err)
	}
	var (
		links   []string
		skipped []string
		names   = map[string]bool{}
	)
	for _, s := range secs {
		if s.typ != "queue" {
			continue
		}
		link, err := sqmLink(s, names)
		if err != nil {
			skipped = append(skipped, fmt.Sprintf("sqm queue %s: %v", strings.TrimPrefix(s.ref(), "queue "), err))
			continue
		}
		links = append(links, link)
	}
	if len(links) == 0 {
		if len(skipped) == 0 {
			return "", fmt.Errorf("%s: no config queue section: sqm-scripts shapes nothing", source)
		}
		return "", fmt.Errorf("%s: no sqm queue autoshape can attach to:\n  %s", source, strings.Join(skipped, "\n  "))
	}
	var b strings.Builder
	fmt.Fprintf(&b, `# autoshape configuration made from %s by `+"`autoshape config from-sqm`"+`.
# Save it as /etc/config/autoshape. Each link attaches to the CAKE that
# sqm-scripts sets up (mode 'attach') and only moves its bandwidth: keep the
# sqm queue enabled. Rates are in kbit/s, as in sqm.
# _base and _max are sqm's rate: raise _max if the line can do more.
# _min is %d %% of it: low enough to hold the latency when the link sags,
# high enough that a false alarm leaves the link usable.
`, source, int(sqmMinShare*100))
	for _, s := range skipped {
		fmt.Fprintf(&b, "\n# Left out: %s\n", strings.ReplaceAll(s, "\n", "\n# "))
	}
	for _, l := range links {
		b.WriteString("\n" + l)
	}
	out := b.String()
	if _, err := Parse(out); err != nil {
		// Each link passed on its own; together they can still clash.
		return "", fmt.Errorf("%s: the configuration made from it is refused: %w", source, err)
	}
	return out, nil
}

// sqmLink returns the link section for one sqm queue, or why there is none.
// names holds the section names taken so far.
func sqmLink(s *uciSection, names map[string]bool) (string, error) {
	get := func(name string) string {
		if o := s.opts[name]; o != nil {
			return strings.TrimSpace(o.values[len(o.values)-1])
		}
		return ""
	}
	// sqm-scripts starts a queue only when enabled is 1 (run-openwrt.sh).
	if v := get("enabled"); v != "1" {
		return "", fmt.Errorf("disabled (option enabled %s)", uciQuote(v))
	}
	iface := get("interface")
	if iface == "" {
		return "", errors.New("no option interface")
	}
	if script := get("script"); !sqmCakeScripts[script] {
		return "", fmt.Errorf("option script '%s' does not put CAKE at the root (piece_of_cake.qos and layer_cake.qos do)", script)
	}
	var rates [2]int // download, upload in kbit/s
	for i, key := range []string{"download", "upload"} {
		v := get(key)
		n, err := strconv.Atoi(v)
		switch {
		case err != nil:
			return "", fmt.Errorf("option %s '%s' is not a rate in kbit/s", key, v)
		case n <= 0:
			return "", fmt.Errorf("option %s '%s': sqm does not shape the %s, and autoshape needs both directions", key, v, key)
		}
		rates[i] = n
	}
	// sqm's CAKE takes the framing only with a link layer (get_cake_lla_string).
	var framing []string
	switch ll := get("linklayer"); ll {
	case "", "none":
	case "ethernet", "atm":
		framing = append(framing, "link_layer", ll)
		for _, kv := range [][2]string{{"overhead", "overhead"}, {"tcMPU", "mpu"}} {
			v := get(kv[0])
			if v == "" || v == "0" {
				continue
			}
			if _, err := strconv.Atoi(v); err != nil {
				return "", fmt.Errorf("option %s '%s' is not a whole number", kv[0], v)
			}
			framing = append(framing, kv[1], v)
		}
	default:
		return "", fmt.Errorf("option linklayer '%s' is none of none, ethernet, atm", ll)
	}
	name := s.name
	if name == "" {
		name = strings.Map(func(r rune) rune {
			if r < 128 && uciName(string(r)) {
				return r
			}
			return '_'
		}, iface)
	}
	for base, i := name, 2; names[name]; i++ {
		name = fmt.Sprintf("%s_%d", base, i)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "config link %s\n", uciQuote(name))
	opt := func(k, v string) { fmt.Fprintf(&b, "\toption %s %s\n", k, uciQuote(v)) }
	opt("interface", iface)
	// sqm-scripts names the IFB as actuator.DefaultIFB does (ifb_name).
	opt("ifb", actuator.DefaultIFB(iface))
	opt("mode", "attach")
	for i := 0; i < len(framing); i += 2 {
		opt(framing[i], framing[i+1])
	}
	for i, dir := range []string{"download", "upload"} {
		// The floor of attach mode is HTB's 8 kbit/s.
		opt(dir+"_min", strconv.Itoa(max(int(float64(rates[i])*sqmMinShare), 8)))
		opt(dir+"_base", strconv.Itoa(rates[i]))
		opt(dir+"_max", strconv.Itoa(rates[i]))
	}
	if _, err := Parse(b.String()); err != nil {
		return "", err
	}
	names[name] = true
	return b.String(), nil
}

// uciQuote quotes v as uci export does.
func uciQuote(v string) string {
	return "'" + strings.ReplaceAll(v, "'", `'\''`) + "'"
}
