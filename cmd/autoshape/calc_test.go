package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// The published hand calculations this command must reproduce to 0.1 kbit/s.
func TestCalcPublished(t *testing.T) {
	pppoe := []string{"--mtu", "1492", "--overhead", "38"}
	adsl := []string{"--mtu", "1500", "--overhead", "44", "--atm"}
	tests := []struct {
		name        string
		args        []string
		wantGoodput float64
		wantGross   float64
	}{
		{"VDSL 37730 IPv4", append([]string{"--rate", "37730kbit", "--ip", "4"}, pppoe...), 35806.5, 37730},
		{"VDSL 37730 IPv6", append([]string{"--rate", "37730kbit", "--ip", "6"}, pppoe...), 35313.3, 37730},
		{"VDSL 35844 IPv4", append([]string{"--rate", "35844kbit", "--ip", "4"}, pppoe...), 34016.7, 35844},
		{"VDSL 35844 IPv6", append([]string{"--rate", "35844kbit", "--ip", "6"}, pppoe...), 33548.1, 35844},
		{"109341 IPv4", append([]string{"--rate", "109341kbit", "--ip", "4"}, pppoe...), 103766.8, 109341},
		{"109341 IPv6", append([]string{"--rate", "109341kbit", "--ip", "6"}, pppoe...), 102337.5, 109341},
		{"98407 IPv4", append([]string{"--rate", "98407kbit", "--ip", "4"}, pppoe...), 93390.2, 98407},
		{"98407 IPv6", append([]string{"--rate", "98407kbit", "--ip", "6"}, pppoe...), 92103.8, 98407},
		{"ADSL down", append([]string{"--rate", "17613kbit", "--ip", "4"}, adsl...), 14702.7, 17613},
		{"ADSL up", append([]string{"--rate", "2604kbit"}, adsl...), 2173.7, 2604},
		{"inverse", append([]string{"--goodput", "15000kbit", "--ip", "4"}, pppoe...), 15000, 15805.8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(append(append([]string{"calc"}, tt.args...), "--json"), &stdout, &stderr); code != 0 {
				t.Fatalf("calc exited %d: %s", code, stderr.String())
			}
			var got calcResult
			if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
				t.Fatalf("calc printed %q: %v", stdout.String(), err)
			}
			want := struct{ Goodput, Gross float64 }{tt.wantGoodput, tt.wantGross}
			if diff := cmp.Diff(want, struct{ Goodput, Gross float64 }{got.GoodputKbit, got.GrossKbit}, cmpopts.EquateApprox(0, 0.051)); diff != "" {
				t.Errorf("calc %v mismatch (-want +got):\n%s", tt.args, diff)
			}
		})
	}
}

func TestCalcFraming(t *testing.T) {
	tests := []struct {
		name      string
		args      []string
		wantWire  float64
		wantBytes int
	}{
		{"ethernet", []string{"--rate", "10mbit", "--overhead", "18"}, 1518, 1460},
		{"timestamps", []string{"--rate", "10mbit", "--tcp-timestamps"}, 1500, 1448},
		{"atm exactly 32 cells", []string{"--rate", "10mbit", "--mtu", "1492", "--overhead", "44", "--atm"}, 32 * 53, 1452},
		{"ptm", []string{"--rate", "10mbit", "--overhead", "28", "--ptm"}, 1528.0 * 65 / 64, 1460},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(append(append([]string{"calc"}, tt.args...), "--json"), &stdout, &stderr); code != 0 {
				t.Fatalf("calc exited %d: %s", code, stderr.String())
			}
			var got calcResult
			if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			if got.WireBytesPerPacket != tt.wantWire || got.PayloadBytes != tt.wantBytes {
				t.Errorf("wire %v payload %d, want %v and %d", got.WireBytesPerPacket, got.PayloadBytes, tt.wantWire, tt.wantBytes)
			}
		})
	}
}

func TestCalcErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"neither", []string{}, "exactly one of --rate and --goodput"},
		{"both", []string{"--rate", "1mbit", "--goodput", "1mbit"}, "exactly one"},
		{"garbage", []string{"--rate", "fast"}, `invalid rate "fast"`},
		{"zero", []string{"--rate", "0"}, "must be positive"},
		{"atm and ptm", []string{"--rate", "1mbit", "--atm", "--ptm"}, "exclude each other"},
		{"ip 5", []string{"--rate", "1mbit", "--ip", "5"}, "--ip 5"},
		{"tiny mtu", []string{"--rate", "1mbit", "--mtu", "40"}, "--mtu 40"},
		{"overhead", []string{"--rate", "1mbit", "--overhead", "300"}, "--overhead 300"},
		{"frame smaller than its payload", []string{"--rate", "10mbit", "--mtu", "68", "--overhead", "-64"}, "--overhead -64 with --mtu 68 leaves 4 bytes on the wire for 28 bytes of TCP payload"},
		{"frame one byte short of its payload", []string{"--rate", "10mbit", "--overhead", "-41"}, "leaves 1459 bytes on the wire for 1460 bytes"},
		{"infinite rate", []string{"--rate", "1e300gbit", "--json"}, `--rate: invalid rate "1e300gbit": above 10 Tbit/s`},
		{"infinite goodput", []string{"--goodput", "1e300gbit"}, `--goodput: invalid rate "1e300gbit": above 10 Tbit/s`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(append([]string{"calc"}, tt.args...), &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), tt.want) {
				t.Errorf("exit %d, stderr %q: want 2 and %q", code, stderr.String(), tt.want)
			}
		})
	}
}

// TestCalcNeverAbove100Percent: whatever the framing, goodput never
// exceeds the rate; a framing that would make it is refused (exit 2).
func TestCalcNeverAbove100Percent(t *testing.T) {
	for _, mtu := range []string{"68", "100", "576", "1500", "9000", "65535"} {
		for _, overhead := range []string{"-64", "-41", "-40", "-1", "0", "44", "256"} {
			for _, extra := range [][]string{nil, {"--atm"}, {"--ptm"}, {"--ip", "6"}, {"--tcp-timestamps"}, {"--ip", "6", "--tcp-timestamps", "--atm"}} {
				args := append([]string{"calc", "--rate", "10000gbit", "--mtu", mtu, "--overhead", overhead, "--json"}, extra...)
				var stdout, stderr bytes.Buffer
				code := run(args, &stdout, &stderr)
				if code == 2 {
					continue
				}
				var got calcResult
				if err := json.Unmarshal(stdout.Bytes(), &got); code != 0 || err != nil {
					t.Fatalf("%v: exit %d, %q, %q", args, code, stdout.String(), stderr.String())
				}
				if got.Efficiency > 1 || got.GoodputKbit > got.GrossKbit || got.WireBytesPerPacket < float64(got.PayloadBytes) {
					t.Errorf("%v: efficiency %v, goodput %v of %v kbit/s, %d payload bytes in %v on the wire", args, got.Efficiency, got.GoodputKbit, got.GrossKbit, got.PayloadBytes, got.WireBytesPerPacket)
				}
			}
		}
	}
}
