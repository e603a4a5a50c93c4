package controller_test

import (
	"math"
	"strings"
	"testing"

	"github.com/autoshape/autoshape/controller"
	"github.com/google/go-cmp/cmp"
)

func TestParseRate(t *testing.T) {
	tests := []struct {
		in      string
		want    float64
		wantErr string
	}{
		{in: "850kbit", want: 850_000},
		{in: "20mbit", want: 20e6},
		{in: "1.5gbit", want: 1.5e9},
		{in: "1000", want: 1000},
		{in: "20Mbit", want: 20e6},
		{in: "20MBIT", want: 20e6},
		{in: " 20 mbit ", want: 20e6},
		{in: "64kbps", want: 64e3},
		{in: "100mbps", want: 100e6},
		{in: "2gbps", want: 2e9},
		{in: "512bit", want: 512},
		{in: "512bps", want: 512},
		{in: "0", want: 0},
		{in: "1e3kbit", want: 1e6},
		{in: "", wantErr: "empty rate"},
		{in: "   ", wantErr: "empty rate"},
		{in: "abc", wantErr: `invalid rate "abc"`},
		{in: "mbit", wantErr: `invalid rate "mbit"`},
		{in: "20 megabit", wantErr: `invalid rate "20 megabit"`},
		{in: "-5mbit", wantErr: `invalid rate "-5mbit": negative`},
		{in: "NaN", wantErr: `invalid rate "NaN"`},
		{in: "inf", wantErr: `invalid rate "inf"`},
		{in: "+Infmbit", wantErr: `invalid rate "+Infmbit"`},
		// Finite numbers whose product with the unit is not, or is absurd.
		{in: "1e300gbit", wantErr: `invalid rate "1e300gbit": above 10 Tbit/s`},
		{in: "1e308kbit", wantErr: `invalid rate "1e308kbit": above 10 Tbit/s`},
		{in: "2000000000000000000", wantErr: "above 10 Tbit/s"},
		{in: "10001gbit", wantErr: "above 10 Tbit/s"},
		{in: "10000gbit", want: 10e12},
		{in: "-0", want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := controller.ParseRate(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("ParseRate(%q) = %v, %v; want an error containing %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseRate(%q) failed: %v", tt.in, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseRate(%q) mismatch (-want +got):\n%s", tt.in, diff)
			}
			if math.Signbit(got) {
				t.Errorf("ParseRate(%q) = %v: a negative zero prints as \"-0\"", tt.in, got)
			}
		})
	}
}

func TestFormatRate(t *testing.T) {
	tests := []struct {
		bps  float64
		want string
	}{
		{bps: 20e6, want: "20mbit"},
		{bps: 850e3, want: "850kbit"},
		{bps: 1.5e9, want: "1.5gbit"},
		{bps: 12.5e6, want: "12.5mbit"},
		{bps: 1e3, want: "1kbit"},
		{bps: 999, want: "999bit"},
		{bps: 0, want: "0bit"},
		{bps: 1e9, want: "1gbit"},
		{bps: 10e9, want: "10gbit"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			got := controller.FormatRate(tt.bps)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("FormatRate(%v) mismatch (-want +got):\n%s", tt.bps, diff)
			}
			// What FormatRate prints, ParseRate reads back.
			back, err := controller.ParseRate(got)
			if err != nil {
				t.Fatalf("ParseRate(%q) failed: %v", got, err)
			}
			if back != tt.bps {
				t.Errorf("ParseRate(FormatRate(%v)) = %v", tt.bps, back)
			}
		})
	}
}

// FuzzParseRate: any string is refused or read as a finite rate from 0 to
// MaxRate that FormatRate prints back as the same rate.
func FuzzParseRate(f *testing.F) {
	for _, s := range []string{"850kbit", "20mbit", "1.5gbit", "1000", "0", "-0", "1e300gbit", "NaN", "inf", "0x1p4mbit", "4.9e-324"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := controller.ParseRate(s)
		if err != nil {
			if r != 0 {
				t.Errorf("ParseRate(%q) = %v with error %v: want 0", s, r, err)
			}
			return
		}
		if math.IsNaN(r) || r < 0 || r > controller.MaxRate || math.Signbit(r) {
			t.Fatalf("ParseRate(%q) = %v: want a finite rate from 0 to %v", s, r, controller.MaxRate)
		}
		back, err := controller.ParseRate(controller.FormatRate(r))
		if err != nil {
			t.Fatalf("ParseRate(FormatRate(%v) = %q) failed: %v", r, controller.FormatRate(r), err)
		}
		if math.Abs(back-r) > 1e-12*r {
			t.Errorf("ParseRate(FormatRate(%v)) = %v", r, back)
		}
	})
}
