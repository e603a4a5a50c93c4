package config

import (
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/autoshape/autoshape/actuator"
	"github.com/autoshape/autoshape/estimator"
)

func readSQM(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("testdata/sqm/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestFromSQM: an enabled CAKE queue becomes a link attached to sqm's
// qdiscs with sqm's interface, IFB, rates and framing; the queues it cannot
// use are left out with a comment saying why.
func TestFromSQM(t *testing.T) {
	out, err := FromSQM(readSQM(t, "fibre-and-lte"), "/etc/config/sqm")
	if err != nil {
		t.Fatalf("FromSQM() failed: %v", err)
	}
	cfg, err := Parse(out)
	if err != nil {
		t.Fatalf("the output does not parse: %v\n%s", err, out)
	}
	if len(cfg.Links) != 1 {
		t.Fatalf("links = %d, want 1:\n%s", len(cfg.Links), out)
	}
	l := cfg.Links[0]
	if l.Name != "pppoe_wan" || l.Interface != "pppoe-wan" || l.IFB != "ifb4pppoe-wan" || !l.Attach {
		t.Errorf("link %q on %q, IFB %q, attach %v: want pppoe_wan on pppoe-wan, ifb4pppoe-wan, attach", l.Name, l.Interface, l.IFB, l.Attach)
	}
	if want := (actuator.Framing{Overhead: 34, MPU: 64, LinkLayer: actuator.Ethernet}); l.Framing != want {
		t.Errorf("framing = %+v, want %+v", l.Framing, want)
	}
	for d, rate := range map[estimator.Direction]float64{estimator.Down: 95e6, estimator.Up: 38e6} {
		b := l.Directions[d].Bounds
		if b.Base != rate || b.Max != rate || b.Min != rate/5 {
			t.Errorf("direction %v: bounds %+v, want base = max = sqm's %v bit/s, min a fifth of it", d, b, rate)
		}
	}
	for _, want := range []string{
		"# Left out: sqm queue 'eth1': disabled (option enabled '0')",
		"# Left out: sqm queue 'lte': option script 'simple.qos' does not put CAKE at the root",
		"_min is 20 % of it",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the output lacks %q:\n%s", want, out)
		}
	}
}

// TestFromSQMOutput pins the output's format for an ADSL line.
func TestFromSQMOutput(t *testing.T) {
	out, err := FromSQM(readSQM(t, "adsl"), "sqm")
	if err != nil {
		t.Fatalf("FromSQM() failed: %v", err)
	}
	want := "\nconfig link 'dsl'\n" +
		"\toption interface 'pppoa-wan'\n" +
		"\toption ifb 'ifb4pppoa-wan'\n" +
		"\toption mode 'attach'\n" +
		"\toption link_layer 'atm'\n" +
		"\toption overhead '44'\n" +
		"\toption download_min '2800'\n" +
		"\toption download_base '14000'\n" +
		"\toption download_max '14000'\n" +
		"\toption upload_min '180'\n" +
		"\toption upload_base '900'\n" +
		"\toption upload_max '900'\n"
	_, links, _ := strings.Cut(out, "\n\nconfig")
	if diff := cmp.Diff(want, "\nconfig"+links); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
	if !strings.HasPrefix(out, "# autoshape configuration made from sqm by `autoshape config from-sqm`.\n") {
		t.Errorf("output begins %q", out[:min(len(out), 80)])
	}
}

// TestFromSQMNothingUsable: with no queue it can attach to, FromSQM fails
// and says why of each queue.
func TestFromSQMNothingUsable(t *testing.T) {
	adsl := readSQM(t, "adsl")
	tests := []struct {
		name, text, want string
	}{
		{"OpenWrt's default", readSQM(t, "openwrt-default"), "sqm: no sqm queue autoshape can attach to:\n  sqm queue 'eth1': disabled (option enabled '0')"},
		{"empty", "# nothing\n", "sqm: no config queue section"},
		{"no download shaping", strings.Replace(adsl, "download '14000'", "download '0'", 1), "option download '0': sqm does not shape the download"},
		{"no upload rate", strings.Replace(adsl, "\toption upload '900'\n", "", 1), "option upload '' is not a rate in kbit/s"},
		{"unknown link layer", strings.Replace(adsl, "'atm'", "'docsis'", 1), "option linklayer 'docsis' is none of none, ethernet, atm"},
		{"a rate too low for HTB's floor", strings.Replace(adsl, "upload '900'", "upload '5'", 1), "link 'dsl' option upload_min 8kbit > option upload_max 5kbit"},
		{"an interface the kernel refuses", strings.Replace(adsl, "'pppoa-wan'", "'pppoa-wan-with-a-long-name'", 1), `link 'dsl' option interface: "pppoa-wan-with-a-long-name" is 26 bytes long`},
		{"not UCI", "config queue 'x\n", "sqm: line 1: ' without its closing '"},
		{"not UTF-8", strings.Replace(adsl, "'pppoa-wan'", "'pppoa-\xff'", 1), "invalid UTF-8 byte 0xff"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := FromSQM(tt.text, "sqm")
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("FromSQM() = %q, error %v; want an error mentioning %q", out, err, tt.want)
			}
		})
	}
}
