package actuator

// Internal tests: cakeAttrs, cakeCreate and cakeRateChange are unexported.

import (
	"encoding/binary"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/florianl/go-tc"
	"github.com/google/go-cmp/cmp"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// A cakeCapture is one RTM_NEWQDISC request that iproute2's tc sent, read
// from a strace capture in testdata/cake (see its README.md).
type cakeCapture struct {
	// Command is the tc command line, from the file's first line.
	Command string
	// Flags are the netlink header's flags.
	Flags netlink.HeaderFlags
	// Msg is the tcmsg header.
	Msg tc.Msg
	// Kind is TCA_KIND.
	Kind string
	// Cake holds the TCA_OPTIONS attributes, one field per attribute.
	Cake tc.Cake
}

// A cakeField pairs a TCA_CAKE_* attribute type, as go-tc's marshalCake
// numbers it, with the tc.Cake field go-tc sends it from. BaseRate is the
// only 64-bit one.
type cakeField struct {
	typ uint16
	u64 **uint64
	u32 **uint32
}

// cakeFields lists every field of c with its attribute type, in go-tc's
// order (q_cake.go in go-tc v0.4.8).
func cakeFields(c *tc.Cake) []cakeField {
	return []cakeField{
		{typ: 2, u64: &c.BaseRate},
		{typ: 3, u32: &c.DiffServMode},
		{typ: 4, u32: &c.Atm},
		{typ: 5, u32: &c.FlowMode},
		{typ: 6, u32: &c.Overhead},
		{typ: 7, u32: &c.Rtt},
		{typ: 8, u32: &c.Target},
		{typ: 9, u32: &c.Autorate},
		{typ: 10, u32: &c.Memory},
		{typ: 11, u32: &c.Nat},
		{typ: 12, u32: &c.Raw},
		{typ: 13, u32: &c.Wash},
		{typ: 14, u32: &c.Mpu},
		{typ: 15, u32: &c.Ingress},
		{typ: 16, u32: &c.AckFilter},
		{typ: 17, u32: &c.SplitGso},
		{typ: 18, u32: &c.FwMark},
	}
}

// marshalCakeLikeGoTC encodes c the way go-tc does: one attribute per
// non-nil field, in field order.
func marshalCakeLikeGoTC(tb testing.TB, c *tc.Cake) []byte {
	tb.Helper()
	ae := netlink.NewAttributeEncoder()
	for _, f := range cakeFields(c) {
		switch {
		case f.u64 != nil && *f.u64 != nil:
			ae.Uint64(f.typ, **f.u64)
		case f.u32 != nil && *f.u32 != nil:
			ae.Uint32(f.typ, **f.u32)
		}
	}
	b, err := ae.Encode()
	if err != nil {
		tb.Fatalf("failed to encode CAKE options: %v", err)
	}
	return b
}

// unmarshalCakeOptions reads TCA_OPTIONS attributes into a tc.Cake; an
// unknown type or a payload of the wrong size fails tb.
func unmarshalCakeOptions(tb testing.TB, b []byte) tc.Cake {
	tb.Helper()
	var c tc.Cake
	fields := cakeFields(&c)
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		tb.Fatalf("failed to decode CAKE options: %v", err)
	}
	for ad.Next() {
		var field *cakeField
		for i := range fields {
			if fields[i].typ == ad.Type() {
				field = &fields[i]
			}
		}
		switch {
		case field == nil:
			tb.Errorf("unexpected CAKE attribute %d: % x", ad.Type(), ad.Bytes())
		case field.u64 != nil:
			v := ad.Uint64()
			*field.u64 = &v
		default:
			v := ad.Uint32()
			*field.u32 = &v
		}
	}
	if err := ad.Err(); err != nil {
		tb.Fatalf("failed to decode CAKE options: %v", err)
	}
	return c
}

// readCakeCapture reads the request in a strace capture: the hex dump that
// "strace -e write=all" prints under the sendmsg call.
func readCakeCapture(tb testing.TB, name string) cakeCapture {
	tb.Helper()
	text, err := os.ReadFile(filepath.Join("testdata", "cake", name))
	if err != nil {
		tb.Fatal(err)
	}
	var capture cakeCapture
	var b []byte
	for i, line := range strings.Split(string(text), "\n") {
		if i == 0 {
			capture.Command = strings.TrimPrefix(line, "# ")
			continue
		}
		// " | 00010  00 00 00 00 01 00 ...  ascii |": offset, then 16 bytes
		// in 49 columns.
		rest, ok := strings.CutPrefix(line, " | ")
		if !ok {
			continue
		}
		off, hexes, ok := strings.Cut(rest, "  ")
		if !ok || len(hexes) < 49 {
			tb.Fatalf("%s:%d: malformed dump line %q", name, i+1, line)
		}
		if n, err := strconv.ParseInt(off, 16, 64); err != nil || int(n) != len(b) {
			tb.Fatalf("%s:%d: offset %q, want %x", name, i+1, off, len(b))
		}
		for _, h := range strings.Fields(hexes[:49]) {
			v, err := hex.DecodeString(h)
			if err != nil || len(v) != 1 {
				tb.Fatalf("%s:%d: bad byte %q", name, i+1, h)
			}
			b = append(b, v[0])
		}
	}

	// struct nlmsghdr (16 bytes), struct tcmsg (20 bytes), attributes.
	if len(b) < 16+tcmsgLen {
		tb.Fatalf("%s: request of %d bytes is too short", name, len(b))
	}
	if l := binary.NativeEndian.Uint32(b[0:4]); int(l) != len(b) {
		tb.Fatalf("%s: nlmsg_len %d, dumped %d bytes", name, l, len(b))
	}
	if typ := binary.NativeEndian.Uint16(b[4:6]); typ != unix.RTM_NEWQDISC {
		tb.Fatalf("%s: message type %d, want RTM_NEWQDISC", name, typ)
	}
	capture.Flags = netlink.HeaderFlags(binary.NativeEndian.Uint16(b[6:8]))
	tcm := b[16 : 16+tcmsgLen]
	capture.Msg = tc.Msg{
		Family:  uint32(tcm[0]),
		Ifindex: binary.NativeEndian.Uint32(tcm[4:8]),
		Handle:  binary.NativeEndian.Uint32(tcm[8:12]),
		Parent:  binary.NativeEndian.Uint32(tcm[12:16]),
		Info:    binary.NativeEndian.Uint32(tcm[16:20]),
	}
	ad, err := netlink.NewAttributeDecoder(b[16+tcmsgLen:])
	if err != nil {
		tb.Fatalf("%s: %v", name, err)
	}
	for ad.Next() {
		switch ad.Type() {
		case 1: // TCA_KIND
			capture.Kind = ad.String()
		case 2: // TCA_OPTIONS
			capture.Cake = unmarshalCakeOptions(tb, ad.Bytes())
		default:
			tb.Errorf("%s: unexpected attribute %d", name, ad.Type())
		}
	}
	if err := ad.Err(); err != nil {
		tb.Fatalf("%s: %v", name, err)
	}
	return capture
}

// TestCakeAttrsMatchIproute2 checks that the options cakeAttrs produces are,
// attribute by attribute, what tc sends for the same settings.
func TestCakeAttrsMatchIproute2(t *testing.T) {
	yes, no := true, false
	tests := []struct {
		capture string
		bps     uint64
		framing Framing
		opts    CakeOptions
		// tcOmitsATM: the command has no atm/ptm/noatm keyword, so tc sends
		// no ATM attribute; cakeAttrs always sends one, and noatm (0) is the
		// kernel's default, so a create means the same.
		tcOmitsATM bool
	}{
		{
			capture: "atm-overhead44.strace",
			bps:     20_000_000,
			framing: Framing{Overhead: 44, LinkLayer: ATM},
		},
		{
			capture: "ptm-overhead-4-mpu64.strace",
			bps:     50_000_000,
			framing: Framing{Overhead: -4, MPU: 64, LinkLayer: PTM},
		},
		{
			capture: "rtt-diffserv4-dualdst-nat-wash-ingress.strace",
			bps:     100_000_000,
			opts: CakeOptions{
				RTT: 50 * time.Millisecond, DiffServ: "diffserv4", FlowMode: "dual-dsthost",
				NAT: &yes, Wash: &yes, Ingress: &yes,
			},
			tcOmitsATM: true,
		},
		{
			capture: "ackaggr-nosplitgso-memlimit-besteffort.strace",
			bps:     10_000_000,
			opts: CakeOptions{
				AckFilter: "ack-filter-aggressive", SplitGSO: &no, Memory: 8 << 20, DiffServ: "besteffort",
			},
			tcOmitsATM: true,
		},
		{
			capture: "flowblind-noatm-precedence.strace",
			bps:     30_000_000,
			framing: Framing{LinkLayer: Ethernet},
			opts:    CakeOptions{FlowMode: "flowblind", DiffServ: "precedence"},
		},
		{
			capture:    "bandwidth-only.strace",
			bps:        20_000_000,
			tcOmitsATM: true,
		},
		{
			capture: "off-switches.strace",
			bps:     20_000_000,
			opts: CakeOptions{
				DiffServ: "diffserv3", FlowMode: "dsthost", NAT: &no, Wash: &no, Ingress: &no,
				AckFilter: "no-ack-filter", SplitGSO: &yes,
			},
			tcOmitsATM: true,
		},
		{
			capture:    "diffserv8-triple-ackfilter.strace",
			bps:        1_000_000_000,
			opts:       CakeOptions{DiffServ: "diffserv8", FlowMode: "triple-isolate", AckFilter: "ack-filter"},
			tcOmitsATM: true,
		},
		{capture: "srchost.strace", bps: 20_000_000, opts: CakeOptions{FlowMode: "srchost"}, tcOmitsATM: true},
		{capture: "hosts.strace", bps: 20_000_000, opts: CakeOptions{FlowMode: "hosts"}, tcOmitsATM: true},
		{capture: "flows.strace", bps: 20_000_000, opts: CakeOptions{FlowMode: "flows"}, tcOmitsATM: true},
		{capture: "dual-srchost.strace", bps: 20_000_000, opts: CakeOptions{FlowMode: "dual-srchost"}, tcOmitsATM: true},
	}
	for _, tt := range tests {
		t.Run(strings.TrimSuffix(tt.capture, ".strace"), func(t *testing.T) {
			capture := readCakeCapture(t, tt.capture)
			t.Log(capture.Command)
			want := capture.Cake
			if tt.tcOmitsATM {
				if want.Atm != nil {
					t.Fatalf("tc sent ATM %d", *want.Atm)
				}
				want.Atm = new(uint32(cakeATMNone))
			}

			// ifindex 1 is lo in the namespace the captures were made in,
			// and the commands say "root handle 1:".
			obj, err := cakeCreate(1, 0x0001_0000, tt.bps, tt.framing, tt.opts)
			if err != nil {
				t.Fatalf("cakeCreate: %v", err)
			}
			if diff := cmp.Diff(capture.Msg, obj.Msg); diff != "" {
				t.Errorf("tcmsg (-want +got):\n%s", diff)
			}
			if obj.Kind != capture.Kind {
				t.Errorf("kind %q, want %q", obj.Kind, capture.Kind)
			}
			if diff := cmp.Diff(&want, obj.Cake); diff != "" {
				t.Errorf("CAKE options (-want +got):\n%s", diff)
			}
			// And once more through the wire format: go-tc's encoding of our
			// options, decoded, holds the same attributes.
			if diff := cmp.Diff(want, unmarshalCakeOptions(t, marshalCakeLikeGoTC(t, obj.Cake))); diff != "" {
				t.Errorf("CAKE attributes (-want +got):\n%s", diff)
			}
			if want := netlink.Request | netlink.Acknowledge | netlink.Create | netlink.Excl; capture.Flags != want {
				// go-tc's Qdisc().Add sends these flags too.
				t.Errorf("tc sent flags %#x, want %#x", capture.Flags, want)
			}
		})
	}
}

// TestCakeRateChange checks that a rate change holds only the rate, and
// that it addresses the root qdisc as "tc qdisc change dev lo root cake
// bandwidth 15mbit" does, but for the handle, which tc leaves 0.
func TestCakeRateChange(t *testing.T) {
	obj, err := cakeRateChange(1, 0, 15_000_000)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&tc.Cake{BaseRate: new(uint64(1_875_000)), Autorate: new(uint32(0))}, obj.Cake); diff != "" {
		t.Errorf("CAKE options (-want +got):\n%s", diff)
	}

	capture := readCakeCapture(t, "change-bandwidth.strace")
	if diff := cmp.Diff(capture.Msg, obj.Msg); diff != "" {
		t.Errorf("tcmsg (-want +got):\n%s", diff)
	}
	if obj.Kind != capture.Kind {
		t.Errorf("kind %q, want %q", obj.Kind, capture.Kind)
	}
	// tc sends AUTORATE 0 with every "bandwidth", and so does a rate
	// change: it takes the rate over from autorate-ingress.
	want := capture.Cake
	if diff := cmp.Diff(&want, obj.Cake); diff != "" {
		t.Errorf("CAKE options (-want +got):\n%s", diff)
	}
	if want := netlink.Request | netlink.Acknowledge; capture.Flags != want {
		// go-tc's Qdisc().Change sends these flags too.
		t.Errorf("tc sent flags %#x, want %#x", capture.Flags, want)
	}

	// The handle makes the kernel check that the root is still that
	// qdisc.
	if obj, err := cakeRateChange(1, OwnRootHandle, 15_000_000); err != nil || obj.Handle != OwnRootHandle {
		t.Errorf("cakeRateChange with handle %s: %+v, %v", handleString(OwnRootHandle), obj, err)
	}

	for _, bps := range []uint64{0, 7} {
		if _, err := cakeRateChange(1, OwnRootHandle, bps); err == nil {
			t.Errorf("cakeRateChange(%d) succeeded, want an error", bps)
		}
	}
}

// TestCakeAttrs covers settings the captures do not.
func TestCakeAttrs(t *testing.T) {
	tests := []struct {
		name    string
		bps     uint64
		framing Framing
		opts    CakeOptions
		want    *tc.Cake
	}{
		{
			name: "rate rounds down to bytes",
			bps:  12_345,
			want: &tc.Cake{BaseRate: new(uint64(1543)), Autorate: new(uint32(0)), Atm: new(uint32(0))},
		},
		{
			name:    "bounds of overhead and mpu",
			bps:     8,
			framing: Framing{Overhead: -64, MPU: 256},
			want: &tc.Cake{
				BaseRate: new(uint64(1)), Autorate: new(uint32(0)), Atm: new(uint32(0)),
				Overhead: new(uint32(0xFFFFFFC0)), Mpu: new(uint32(256)),
			},
		},
		{
			name:    "largest overhead",
			bps:     8000,
			framing: Framing{Overhead: 256, LinkLayer: ATM},
			want: &tc.Cake{
				BaseRate: new(uint64(1000)), Autorate: new(uint32(0)), Atm: new(uint32(1)), Overhead: new(uint32(256)),
			},
		},
		{
			name: "short rtt keeps a target of 1µs",
			bps:  8000,
			opts: CakeOptions{RTT: 10 * time.Microsecond},
			want: &tc.Cake{
				BaseRate: new(uint64(1000)), Autorate: new(uint32(0)), Atm: new(uint32(0)),
				Rtt: new(uint32(10)), Target: new(uint32(1)),
			},
		},
		{
			name: "rtt truncates to microseconds",
			bps:  8000,
			opts: CakeOptions{RTT: 100*time.Millisecond + 999*time.Nanosecond},
			want: &tc.Cake{
				BaseRate: new(uint64(1000)), Autorate: new(uint32(0)), Atm: new(uint32(0)),
				Rtt: new(uint32(100_000)), Target: new(uint32(5000)),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := cakeAttrs(tt.bps, tt.framing, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("cakeAttrs (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCakeAttrsErrors checks that settings CAKE cannot take are refused with
// a message naming the setting and, for names, the ones allowed.
func TestCakeAttrsErrors(t *testing.T) {
	tests := []struct {
		name     string
		bps      uint64
		framing  Framing
		opts     CakeOptions
		contains []string
	}{
		{name: "overhead 300", framing: Framing{Overhead: 300}, contains: []string{"overhead 300", "-64 to 256"}},
		{name: "overhead -65", framing: Framing{Overhead: -65}, contains: []string{"overhead -65", "-64 to 256"}},
		{name: "mpu 257", framing: Framing{MPU: 257}, contains: []string{"mpu 257"}},
		{name: "unknown link layer", framing: Framing{LinkLayer: 7}, contains: []string{"link layer 7"}},
		{
			name:     "diffserv5",
			opts:     CakeOptions{DiffServ: "diffserv5"},
			contains: []string{`diffserv mode "diffserv5"`, "diffserv3, diffserv4, diffserv8, besteffort, precedence"},
		},
		{
			name: "unknown flow mode",
			opts: CakeOptions{FlowMode: "quad-isolate"},
			contains: []string{
				`flow mode "quad-isolate"`,
				"flowblind, srchost, dsthost, hosts, flows, dual-srchost, dual-dsthost, triple-isolate",
			},
		},
		{
			name:     "unknown ack filter",
			opts:     CakeOptions{AckFilter: "ack-filter-gentle"},
			contains: []string{`ack filter "ack-filter-gentle"`, "no-ack-filter, ack-filter, ack-filter-aggressive"},
		},
		{name: "negative rtt", opts: CakeOptions{RTT: -time.Millisecond}, contains: []string{"rtt -1ms"}},
		{name: "rtt below 1µs", opts: CakeOptions{RTT: 999 * time.Nanosecond}, contains: []string{"rtt 999ns"}},
		{name: "rtt beyond 32 bits of µs", opts: CakeOptions{RTT: 2 * time.Hour}, contains: []string{"rtt 2h0m0s"}},
		{name: "rate 0", bps: 0, contains: []string{"rate 0 bit/s"}},
		{name: "rate 7", bps: 7, contains: []string{"rate 7 bit/s"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bps := tt.bps
			if bps == 0 && !strings.HasPrefix(tt.name, "rate") {
				bps = 20_000_000
			}
			got, err := cakeAttrs(bps, tt.framing, tt.opts)
			if err == nil {
				t.Fatalf("cakeAttrs succeeded with %+v, want an error", got)
			}
			for _, s := range tt.contains {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
		})
	}
}
