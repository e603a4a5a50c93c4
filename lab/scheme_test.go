package lab_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/autoshape/autoshape/lab"
)

func TestParseScheme(t *testing.T) {
	tests := []struct {
		in      string
		want    lab.Scheme
		wantErr string
	}{
		{in: "unshaped", want: lab.Scheme{Name: "unshaped"}},
		{in: "static:0.9", want: lab.Scheme{Name: "static:0.9", Fraction: 0.9}},
		{in: "autoshape", want: lab.Scheme{Name: "autoshape"}},
		{in: "autoshape:/etc/a.toml", want: lab.Scheme{Name: "autoshape", Config: "/etc/a.toml"}},
		{in: "classic", want: lab.Scheme{Name: "classic", Policy: "classic"}},
		{in: "supervise", want: lab.Scheme{Name: "supervise", Policy: "supervise"}},
		{in: "supervise:x", wantErr: `scheme "supervise:x": supervise takes no argument`},
		{in: "exec:sleep 1000", want: lab.Scheme{Name: "exec", Command: "sleep 1000"}},
		{in: "autorate", want: lab.Scheme{Name: "autorate",
			Command: `tc qdisc change dev "$LINKLAB_DOWN_IFACE" root cake autorate-ingress && exec sleep 1000000`}},
		// Only the first colon separates the command.
		{in: "exec:echo a:b; tc -s qdisc", want: lab.Scheme{Name: "exec", Command: "echo a:b; tc -s qdisc"}},
		{in: "exec", wantErr: `scheme "exec": want exec:COMMAND`},
		{in: "exec:", wantErr: `scheme "exec:": want exec:COMMAND`},
		{in: "exec:  ", wantErr: `scheme "exec:  ": want exec:COMMAND`},
		{in: "classic:/etc/a.toml", wantErr: `scheme "classic:/etc/a.toml": classic takes no argument`},
		{in: "unshaped:", wantErr: `scheme "unshaped:": unshaped takes no argument`},
		{in: "static:7", wantErr: `scheme "static:7": want static:FRACTION`},
		{in: "static", wantErr: `scheme "static": want static:FRACTION`},
		{in: "cake-autorate", wantErr: `scheme "cake-autorate": want unshaped, static:FRACTION, autoshape[:CONFIG], classic, supervise, autorate or exec:COMMAND`},
		{in: "autorate:x", wantErr: `scheme "autorate:x": autorate takes no argument`},
		{in: "", wantErr: `scheme "": want`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := lab.ParseScheme(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseScheme(%q) error = %v, want it to contain %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseScheme(%q) failed: %v", tt.in, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseScheme(%q) (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func TestNeedsAutoshape(t *testing.T) {
	for in, want := range map[string]bool{"unshaped": false, "static:0.9": false, "autoshape": true, "classic": true, "supervise": true, "exec:true": false} {
		s, err := lab.ParseScheme(in)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.NeedsAutoshape(); got != want {
			t.Errorf("%s: NeedsAutoshape() = %v, want %v", in, got, want)
		}
	}
}
