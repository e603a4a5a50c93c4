package actuator

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/florianl/go-tc"
	"github.com/florianl/go-tc/core"
	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

func TestHTBSizes(t *testing.T) {
	for _, tt := range []struct {
		name  string
		bytes uint64
		// Want bfifo limit, burst and quantum in bytes.
		limit, burst, quantum uint32
	}{
		// 1 Mbit/s: both floors, one frame's burst and two frames' queue.
		{"1 Mbit/s", 125_000, 3028, 1514, 12_500},
		{"10 Mbit/s", 1_250_000, 6250, 1514, 125_000},
		{"100 Mbit/s", 12_500_000, 62_500, 12_500, 200_000},
		{"1 Gbit/s", 125_000_000, 625_000, 125_000, 200_000},
		{"8 kbit/s", 1000, 3028, 1514, 1514},
		{"100 Gbit/s", 12_500_000_000, 62_500_000, 12_500_000, 200_000},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := []uint32{bfifoLimit(tt.bytes), burstBytes(tt.bytes), htbQuantum(tt.bytes)}
			want := []uint32{tt.limit, tt.burst, tt.quantum}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("bfifo limit, burst, quantum (-want +got):\n%s", diff)
			}
		})
	}
}

func TestHTBBytesPerSecond(t *testing.T) {
	for _, tt := range []struct {
		bps     uint64
		ll      LinkLayer
		want    uint64
		wantErr bool
	}{
		{bps: 20_000_000, ll: Ethernet, want: 2_500_000},
		{bps: 20_000_000, ll: ATM, want: 2_500_000},
		// PTM: 64 of every 65 bytes carry packets.
		{bps: 20_000_000, ll: PTM, want: 2_461_538},
		{bps: 65_000_000, ll: PTM, want: 8_000_000},
		{bps: 8000, ll: Ethernet, want: 1000},
		{bps: 40_000_000_000, ll: Ethernet, want: 5_000_000_000},
		{bps: 7999, ll: Ethernet, wantErr: true},
		{bps: 0, ll: PTM, wantErr: true},
	} {
		t.Run(fmt.Sprintf("%d %d", tt.bps, tt.ll), func(t *testing.T) {
			got, err := htbBytesPerSecond(tt.bps, tt.ll)
			if (err != nil) != tt.wantErr {
				t.Fatalf("error %v, want error %t", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("got %d bytes/s, want %d", got, tt.want)
			}
		})
	}
}

// TestHTBRateRoundTrip checks that every whole kbit/s the controller may
// write reads back unchanged, PTM scaling included.
func TestHTBRateRoundTrip(t *testing.T) {
	for _, ll := range []LinkLayer{Ethernet, ATM, PTM} {
		var bad []uint64
		for kbit := uint64(8); kbit <= 200_000; kbit++ {
			bps := kbit * 1000
			bytes, err := htbBytesPerSecond(bps, ll)
			if err != nil {
				t.Fatal(err)
			}
			if got := bpsFromKernel(bytes, ll); got != bps {
				bad = append(bad, bps)
			}
		}
		for _, bps := range []uint64{10_000_000_000, 40_000_000_000, 1_000_000_000_000} {
			bytes, _ := htbBytesPerSecond(bps, ll)
			if got := bpsFromKernel(bytes, ll); got != bps {
				bad = append(bad, bps)
			}
		}
		if len(bad) > 0 {
			t.Errorf("link layer %d: %d rates do not read back, first %d", ll, len(bad), bad[0])
		}
	}
	// A rate that is not a whole kbit/s reads back as the lowest rate that
	// maps to the same kernel value.
	if got := bpsFromKernel(2_461_538, PTM); got != 20_000_000 {
		t.Errorf("bpsFromKernel(2461538, PTM) = %d, want 20000000", got)
	}
	if got := bpsFromKernel(1001, Ethernet); got != 8008 {
		t.Errorf("bpsFromKernel(1001, Ethernet) = %d, want 8008", got)
	}
}

func TestHTBClassOptions(t *testing.T) {
	if err := initClock(); err != nil {
		t.Fatal(err)
	}
	ms := uint32(1000 * core.GetTickInUSec()) // 1 ms in ticks
	spec := tc.RateSpec{Linklayer: tcLinkLayerATM, Overhead: 44, Mpu: 96}
	u64 := func(v uint64) *uint64 { return &v }
	for _, tt := range []struct {
		name  string
		bytes uint64
		want  *tc.Htb
	}{
		{
			name: "20 Mbit/s", bytes: 2_500_000,
			want: &tc.Htb{Parms: &tc.HtbOpt{
				Rate:   tc.RateSpec{Linklayer: tcLinkLayerATM, Overhead: 44, Mpu: 96, Rate: 2_500_000},
				Ceil:   tc.RateSpec{Linklayer: tcLinkLayerATM, Overhead: 44, Mpu: 96, Rate: 2_500_000},
				Buffer: ms, Cbuffer: ms, Quantum: 1514, Prio: 3,
			}},
		},
		{
			name: "largest 32-bit rate", bytes: math.MaxUint32,
			want: &tc.Htb{Parms: &tc.HtbOpt{
				Rate:   tc.RateSpec{Linklayer: tcLinkLayerATM, Overhead: 44, Mpu: 96, Rate: math.MaxUint32},
				Ceil:   tc.RateSpec{Linklayer: tcLinkLayerATM, Overhead: 44, Mpu: 96, Rate: math.MaxUint32},
				Buffer: ms, Cbuffer: ms, Quantum: 1514, Prio: 3,
			}},
		},
		{
			// 40 Gbit/s: 32-bit fields saturated, the rate in RATE64/CEIL64.
			name: "40 Gbit/s", bytes: 5_000_000_000,
			want: &tc.Htb{
				Parms: &tc.HtbOpt{
					Rate:   tc.RateSpec{Linklayer: tcLinkLayerATM, Overhead: 44, Mpu: 96, Rate: math.MaxUint32},
					Ceil:   tc.RateSpec{Linklayer: tcLinkLayerATM, Overhead: 44, Mpu: 96, Rate: math.MaxUint32},
					Buffer: ms, Cbuffer: ms, Quantum: 1514, Prio: 3,
				},
				Rate64: u64(5_000_000_000), Ceil64: u64(5_000_000_000),
			},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := htbClassOptions(tt.bytes, spec, 1514, 3)
			// The time is rounded down to whole µs: allow 1 µs less.
			if d := float64(ms) - float64(got.Parms.Buffer); d < 0 || d > core.GetTickInUSec()+1 {
				t.Errorf("buffer %d ticks, want %d (1 ms)", got.Parms.Buffer, ms)
			}
			got.Parms.Buffer, got.Parms.Cbuffer = ms, ms
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("options (-want +got):\n%s", diff)
			}
			if r, c := classRate(got), classCeil(got); r != tt.bytes || c != tt.bytes {
				t.Errorf("classRate, classCeil = %d, %d; want %d", r, c, tt.bytes)
			}
		})
	}
	// At 1 Mbit/s the burst is one frame: 1514 bytes take 12.112 ms.
	if got, want := htbClassOptions(125_000, spec, 1514, 0).Parms.Buffer, uint32(12112*core.GetTickInUSec()); got != want {
		t.Errorf("buffer at 1 Mbit/s: %d ticks, want %d", got, want)
	}
}

func TestHTBSameClassRate(t *testing.T) {
	if err := initClock(); err != nil {
		t.Fatal(err)
	}
	spec := tc.RateSpec{Linklayer: tcLinkLayerEthernet}
	have := htbClassOptions(2_500_000, spec, 1514, 0)
	for _, tt := range []struct {
		name  string
		bytes uint64
		want  bool
	}{
		{"same", 2_500_000, true},
		{"other", 1_250_000, false},
		{"64-bit", 5_000_000_000, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := sameClassRate(have, htbClassOptions(tt.bytes, spec, 1514, 0)); got != tt.want {
				t.Errorf("got %t, want %t", got, tt.want)
			}
		})
	}
}

func TestHTBFramingCheck(t *testing.T) {
	for _, tt := range []struct {
		framing Framing
		want    string // "" for valid
		spec    tc.RateSpec
	}{
		{framing: Framing{}, spec: tc.RateSpec{Linklayer: tcLinkLayerEthernet}},
		{framing: Framing{LinkLayer: ATM, Overhead: 44}, spec: tc.RateSpec{Linklayer: tcLinkLayerATM, Overhead: 44}},
		// PTM is accounted for in the rate, not the link layer.
		{framing: Framing{LinkLayer: PTM, Overhead: 22, MPU: 68}, spec: tc.RateSpec{Linklayer: tcLinkLayerEthernet, Overhead: 22, Mpu: 68}},
		{framing: Framing{Overhead: 65535, MPU: 65535}, spec: tc.RateSpec{Linklayer: tcLinkLayerEthernet, Overhead: 65535, Mpu: 65535}},
		{framing: Framing{Overhead: -1}, want: "overhead -1 bytes out of HTB's range 0 to 65535"},
		{framing: Framing{Overhead: 65536}, want: "overhead 65536 bytes"},
		{framing: Framing{MPU: 65536}, want: "MPU 65536 bytes"},
		{framing: Framing{LinkLayer: 3}, want: "unknown link layer 3"},
	} {
		t.Run(fmt.Sprintf("%+v", tt.framing), func(t *testing.T) {
			err := tt.framing.checkHTB()
			if tt.want != "" {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("got %v, want an error containing %q", err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.spec, htbRateSpec(tt.framing)); diff != "" {
				t.Errorf("rate spec (-want +got):\n%s", diff)
			}
		})
	}
}

func TestOpErr(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want string
	}{
		{unix.EPERM, "failed to change HTB rate on ifindex 3: operation not permitted (autoshape needs CAP_NET_ADMIN)"},
		{fmt.Errorf("netlink receive: %w", unix.EPERM), "failed to change HTB rate on ifindex 3: netlink receive: operation not permitted (autoshape needs CAP_NET_ADMIN)"},
		{unix.ENODEV, "failed to change HTB rate on ifindex 3: no such device"},
	} {
		got := opErr("change HTB rate", 3, tt.err)
		if diff := cmp.Diff(tt.want, got.Error()); diff != "" {
			t.Errorf("message (-want +got):\n%s", diff)
		}
	}
	if got := linkErr("read IFB", "ifb4wan", unix.EPERM).Error(); !strings.Contains(got, `"ifb4wan"`) || !strings.Contains(got, "CAP_NET_ADMIN") {
		t.Errorf("linkErr: %q lacks the name or the capability", got)
	}
}

func TestHTBSplitSizes(t *testing.T) {
	for _, tt := range []struct {
		name  string
		bytes uint64
		// Want the sparse and bulk classes' rates in bytes/s and their
		// bfifos' limits in bytes.
		sparse, bulk           uint64
		sparseLimit, bulkLimit uint32
	}{
		// The lowest rate: half each, both above zero.
		{"8 kbit/s", 1000, 500, 500, 1080, 6056},
		// Below 64 kbit/s the bulk class keeps 8 kbit/s.
		{"32 kbit/s", 4000, 3000, 1000, 1080, 6056},
		{"64 kbit/s", 8000, 7000, 1000, 1080, 6056},
		{"128 kbit/s", 16_000, 14_000, 2000, 1080, 6056},
		// The lab's ADSL upload: 4 frames are 22 ms, 5 ms would be 1375
		// bytes; the sparse class holds 5 ms, more than 4 small frames.
		{"2.2 Mbit/s", 275_000, 240_625, 34_375, 1375, 6056},
		// 5 ms takes over from 4 frames at 9.69 Mbit/s.
		{"9 Mbit/s", 1_125_000, 984_375, 140_625, 5625, 6056},
		{"10 Mbit/s", 1_250_000, 1_093_750, 156_250, 6250, 6250},
		// The sparse class holds at most 64 small frames.
		{"100 Mbit/s", 12_500_000, 10_937_500, 1_562_500, 17_280, 62_500},
		{"40 Gbit/s", 5_000_000_000, 4_375_000_000, 625_000_000, 17_280, 25_000_000},
		{"largest", math.MaxUint64 / 1000, math.MaxUint64/1000 - math.MaxUint64/1000/8, math.MaxUint64 / 1000 / 8, 17_280, math.MaxUint32},
	} {
		t.Run(tt.name, func(t *testing.T) {
			want := [2]htbChild{
				{name: "sparse", class: htbSparseClass, leaf: htbSparseLeaf, prio: 0, rate: tt.sparse, fifoLimit: tt.sparseLimit},
				{name: "bulk", class: htbBulkClass, leaf: htbBulkLeaf, prio: 1, rate: tt.bulk, fifoLimit: tt.bulkLimit},
			}
			if diff := cmp.Diff(want, htbSplit(tt.bytes), cmp.AllowUnexported(htbChild{})); diff != "" {
				t.Errorf("split (-want +got):\n%s", diff)
			}
		})
	}
	// The children's rates add up to the parent's, and neither is ever
	// below half the lowest rate; the sparse class gets the larger share.
	for bytes := uint64(minHTBRate / 8); bytes < 2_000_000; bytes += 997 {
		sparse, bulk := htbSplitRates(bytes)
		if sparse+bulk != bytes || sparse < minHTBRate/16 || bulk < minHTBRate/16 || sparse < bulk {
			t.Fatalf("htbSplitRates(%d) = %d, %d", bytes, sparse, bulk)
		}
	}
}

func TestHTBChildOptions(t *testing.T) {
	if err := initClock(); err != nil {
		t.Fatal(err)
	}
	tick := core.GetTickInUSec()
	spec := tc.RateSpec{Linklayer: tcLinkLayerATM, Overhead: 44}
	u64 := func(v uint64) *uint64 { return &v }
	for _, tt := range []struct {
		name       string
		rate, ceil uint64
		want       *tc.Htb
		// Want buffer and cbuffer in µs: one burst at the rate and at
		// the ceiling.
		bufferUS, cbufferUS float64
	}{
		{
			// The bulk class at 20 Mbit/s: one frame at 2.5 Mbit/s,
			// 1 ms at 20 Mbit/s.
			name: "bulk at 20 Mbit/s", rate: 312_500, ceil: 2_500_000,
			want: &tc.Htb{Parms: &tc.HtbOpt{
				Rate:    tc.RateSpec{Linklayer: tcLinkLayerATM, Overhead: 44, Rate: 312_500},
				Ceil:    tc.RateSpec{Linklayer: tcLinkLayerATM, Overhead: 44, Rate: 2_500_000},
				Quantum: 31_250, Prio: 0,
			}},
			bufferUS: 1514e6 / 312_500, cbufferUS: 1000,
		},
		{
			// 40 Gbit/s: only the ceiling needs the 64-bit attribute.
			name: "bulk at 40 Gbit/s", rate: 625_000_000, ceil: 5_000_000_000,
			want: &tc.Htb{
				Parms: &tc.HtbOpt{
					Rate:    tc.RateSpec{Linklayer: tcLinkLayerATM, Overhead: 44, Rate: 625_000_000},
					Ceil:    tc.RateSpec{Linklayer: tcLinkLayerATM, Overhead: 44, Rate: math.MaxUint32},
					Quantum: 31_250, Prio: 0,
				},
				Ceil64: u64(5_000_000_000),
			},
			bufferUS: 1000, cbufferUS: 1000,
		},
		{
			name: "sparse at 40 Gbit/s", rate: 4_375_000_000, ceil: 5_000_000_000,
			want: &tc.Htb{
				Parms: &tc.HtbOpt{
					Rate:    tc.RateSpec{Linklayer: tcLinkLayerATM, Overhead: 44, Rate: math.MaxUint32},
					Ceil:    tc.RateSpec{Linklayer: tcLinkLayerATM, Overhead: 44, Rate: math.MaxUint32},
					Quantum: 31_250, Prio: 0,
				},
				Rate64: u64(4_375_000_000), Ceil64: u64(5_000_000_000),
			},
			bufferUS: 1000, cbufferUS: 1000,
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := htbChildOptions(tt.rate, tt.ceil, spec, 31_250, 0)
			for _, b := range []struct {
				name  string
				ticks *uint32
				us    float64
			}{{"buffer", &got.Parms.Buffer, tt.bufferUS}, {"cbuffer", &got.Parms.Cbuffer, tt.cbufferUS}} {
				// The time is rounded down to whole µs: allow 1 µs less.
				if d := b.us*tick - float64(*b.ticks); d < 0 || d > 2*tick {
					t.Errorf("%s %d ticks, want %.0f (%.0f µs)", b.name, *b.ticks, b.us*tick, b.us)
				}
				*b.ticks = 0
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("options (-want +got):\n%s", diff)
			}
			if r, c := classRate(got), classCeil(got); r != tt.rate || c != tt.ceil {
				t.Errorf("classRate, classCeil = %d, %d; want %d, %d", r, c, tt.rate, tt.ceil)
			}
		})
	}
}

// TestFindSplit tells autoshape's priority split from other trees under
// the top class.
func TestFindSplit(t *testing.T) {
	htbClass := func(handle, parent, leaf uint32) tc.Object {
		return tc.Object{
			Msg:       tc.Msg{Handle: handle, Parent: parent, Info: leaf},
			Attribute: tc.Attribute{Kind: "htb", Htb: &tc.Htb{Parms: &tc.HtbOpt{}}},
		}
	}
	top := htbClass(htbClassHandle, tc.HandleRoot, 0)
	sparse := htbClass(htbSparseClass, htbClassHandle, htbSparseLeaf)
	bulk := htbClass(htbBulkClass, htbClassHandle, htbBulkLeaf)
	for _, tt := range []struct {
		name    string
		classes []tc.Object
		want    bool
	}{
		{"split", []tc.Object{top, bulk, sparse}, true},
		{"single class", []tc.Object{htbClass(htbClassHandle, tc.HandleRoot, htbLeafHandle)}, false},
		{"sparse class only", []tc.Object{top, sparse}, false},
		{
			// sqm-scripts' simple.qos: 1:11 to 1:13 with leaves 110: to
			// 130:, here under autoshape's major.
			name: "simple.qos",
			classes: []tc.Object{top,
				htbClass(htbSparseClass, htbClassHandle, 0x0110_0000),
				htbClass(htbBulkClass, htbClassHandle, 0x0120_0000),
				htbClass(htbRootHandle|0x13, htbClassHandle, 0x0130_0000)},
			want: false,
		},
		{"children of another parent", []tc.Object{top,
			htbClass(htbSparseClass, htbRootHandle|2, htbSparseLeaf),
			htbClass(htbBulkClass, htbRootHandle|2, htbBulkLeaf)}, false},
		{"inner classes", []tc.Object{top,
			htbClass(htbSparseClass, htbClassHandle, 0),
			htbClass(htbBulkClass, htbClassHandle, 0)}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			children, ok := findSplit(tt.classes, htbClassHandle)
			if ok != tt.want {
				t.Fatalf("findSplit: ok %t, want %t", ok, tt.want)
			}
			if ok && (children[0].Handle != htbSparseClass || children[1].Handle != htbBulkClass) {
				t.Errorf("findSplit: classes %s, %s; want a5:11, a5:12",
					handleString(children[0].Handle), handleString(children[1].Handle))
			}
		})
	}
	// The split an earlier autoshape built under 1:1, found from that class.
	old := []tc.Object{htbClass(0x0001_0001, tc.HandleRoot, 0),
		htbClass(0x0001_0011, 0x0001_0001, htbSparseLeaf), htbClass(0x0001_0012, 0x0001_0001, htbBulkLeaf)}
	if _, ok := findSplit(old, 0x0001_0001); !ok {
		t.Errorf("findSplit under 1:1: not found")
	}
	if _, ok := findSplit(old, htbClassHandle); ok {
		t.Errorf("findSplit under a5:1 found the split under 1:1")
	}
}

// TestSparseFilterKeys checks the u32 keys as go-tc writes them (the struct
// in host order) against struct tc_u32_key as iproute2 sends it for
// "match u16 0 0xff00 at 2" and "at 4": mask and value in network byte
// order, the offset of the 32-bit word in host order.
func TestSparseFilterKeys(t *testing.T) {
	off := func(v uint32) []byte { return binary.NativeEndian.AppendUint32(nil, v) }
	for i, want := range [][]byte{
		slices.Concat([]byte{0, 0, 0xff, 0}, []byte{0, 0, 0, 0}, off(0), off(0)),
		slices.Concat([]byte{0xff, 0, 0, 0}, []byte{0, 0, 0, 0}, off(4), off(0)),
	} {
		var got bytes.Buffer
		if err := binary.Write(&got, binary.NativeEndian, sparseFilterSpecs[i].key); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got.Bytes()); diff != "" {
			t.Errorf("%s key (-want +got):\n%s", sparseFilterSpecs[i].name, diff)
		}
	}
}

func TestHandleString(t *testing.T) {
	for h, want := range map[uint32]string{
		htbRootHandle: "a5:", htbClassHandle: "a5:1", htbSparseClass: "a5:11",
		htbBulkClass: "a5:12", htbLeafHandle: "10:", htbBulkLeaf: "12:", 0x0001_0000: "1:",
	} {
		if got := handleString(h); got != want {
			t.Errorf("handleString(%#x) = %q, want %q", h, got, want)
		}
	}
}
