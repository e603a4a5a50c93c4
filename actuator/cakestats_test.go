package actuator

// Internal tests: the decoders are unexported. The inputs are built here in
// the kernel's layout (sch_cake.c cake_dump_stats, with the attribute
// numbers of include/uapi/linux/pkt_sched.h written out as literals, so that
// a wrong constant in the decoder shows).

import (
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/mdlayher/netlink"
)

// cakeStatsLayout says how to lay a CakeStats out for the decoder.
type cakeStatsLayout struct {
	// unknown adds attribute types the decoder does not know, at the top
	// level and in every tin, as a newer kernel might.
	unknown bool
	// pad adds the zero-length PAD attributes that nla_put_u64_64bit puts
	// before a misaligned 64-bit value on some architectures.
	pad bool
	// nestedFlag sets NLA_F_NESTED on the nests (the kernel does not).
	nestedFlag bool
}

// encodeCakeStats lays s out as the payload of TCA_STATS_APP, in the order
// cake_dump_stats writes it, with the kernel's units (bytes/s, µs).
func encodeCakeStats(tb testing.TB, s CakeStats, l cakeStatsLayout) []byte {
	tb.Helper()
	nest := uint16(0)
	if l.nestedFlag {
		nest = netlink.Nested
	}
	u64 := func(ae *netlink.AttributeEncoder, typ uint16, v uint64) {
		if l.pad {
			ae.Bytes(1, nil) // TCA_CAKE_STATS_PAD, TCA_CAKE_TIN_STATS_PAD
		}
		ae.Uint64(typ, v)
	}
	us := func(d time.Duration) uint32 { return uint32(d / time.Microsecond) }

	ae := netlink.NewAttributeEncoder()
	u64(ae, 2, s.CapacityEstimate/8) // CAPACITY_ESTIMATE64
	ae.Uint32(3, s.MemoryLimit)      // MEMORY_LIMIT
	ae.Uint32(4, s.MemoryUsed)       // MEMORY_USED
	ae.Uint32(5, s.AvgNetoff)        // AVG_NETOFF
	ae.Uint32(7, s.MaxNetlen)        // MAX_NETLEN
	ae.Uint32(9, s.MaxAdjlen)        // MAX_ADJLEN
	ae.Uint32(6, s.MinNetlen)        // MIN_NETLEN
	ae.Uint32(8, s.MinAdjlen)        // MIN_ADJLEN
	if l.unknown {
		ae.Uint32(17, 4) // ACTIVE_QUEUES, newer kernels
	}
	tins := netlink.NewAttributeEncoder()
	for i, t := range s.Tins {
		tin := netlink.NewAttributeEncoder()
		u64(tin, 12, t.ThresholdRate/8)           // THRESHOLD_RATE64
		u64(tin, 3, t.SentBytes)                  // SENT_BYTES64
		tin.Uint32(11, uint32(t.BacklogBytes))    // BACKLOG_BYTES
		tin.Uint32(13, us(t.Target))              // TARGET_US
		tin.Uint32(14, us(t.Interval))            // INTERVAL_US
		tin.Uint32(2, uint32(t.SentPackets))      // SENT_PACKETS
		tin.Uint32(4, uint32(t.DroppedPackets))   // DROPPED_PACKETS
		tin.Uint32(8, uint32(t.ECNMarkedPackets)) // ECN_MARKED_PACKETS
		tin.Uint32(6, uint32(t.AckDropsPackets))  // ACKS_DROPPED_PACKETS
		tin.Uint32(18, us(t.PeakDelay))           // PEAK_DELAY_US
		tin.Uint32(19, us(t.AvgDelay))            // AVG_DELAY_US
		tin.Uint32(20, us(t.BaseDelay))           // BASE_DELAY_US
		tin.Uint32(15, 7)                         // WAY_INDIRECT_HITS
		tin.Uint32(16, 8)                         // WAY_MISSES
		tin.Uint32(17, 9)                         // WAY_COLLISIONS
		tin.Uint32(21, t.SparseFlows)             // SPARSE_FLOWS
		tin.Uint32(22, t.BulkFlows)               // BULK_FLOWS
		tin.Uint32(23, t.UnresponsiveFlows)       // UNRESPONSIVE_FLOWS
		tin.Uint32(24, 1514)                      // MAX_SKBLEN
		tin.Uint32(25, 1514)                      // FLOW_QUANTUM
		if l.unknown {
			tin.Uint64(40, 1<<40)
			tin.Bytes(41, []byte{1, 2, 3})
		}
		b, err := tin.Encode()
		if err != nil {
			tb.Fatal(err)
		}
		tins.Bytes(uint16(i+1)|nest, b)
	}
	b, err := tins.Encode()
	if err != nil {
		tb.Fatal(err)
	}
	ae.Bytes(10|nest, b) // TIN_STATS
	if l.unknown {
		ae.Bytes(30|nest, []byte{8, 0, 1, 0, 1, 0, 0, 0})
	}
	out, err := ae.Encode()
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// cakeTestTin returns distinct statistics for tin n.
func cakeTestTin(n uint64) TinStats {
	return TinStats{
		SentPackets:       1000*n + 1,
		SentBytes:         1<<33 + n, // beyond 32 bits
		DroppedPackets:    10*n + 2,
		ECNMarkedPackets:  10*n + 3,
		AckDropsPackets:   10*n + 4,
		BacklogBytes:      1514 * n,
		ThresholdRate:     8 * 1_250_000 * n,
		Target:            time.Duration(5000+n) * time.Microsecond,
		Interval:          time.Duration(100_000+n) * time.Microsecond,
		PeakDelay:         time.Duration(3000+n) * time.Microsecond,
		AvgDelay:          time.Duration(1000+n) * time.Microsecond,
		BaseDelay:         time.Duration(10+n) * time.Microsecond,
		SparseFlows:       uint32(n),
		BulkFlows:         uint32(2 * n),
		UnresponsiveFlows: uint32(n % 2),
	}
}

// cakeTestStats returns statistics with n tins.
func cakeTestStats(n int) CakeStats {
	s := CakeStats{
		CapacityEstimate: 8 * 2_500_000,
		MemoryLimit:      4 << 20,
		MemoryUsed:       123_456,
		AvgNetoff:        14,
		MinNetlen:        42,
		MaxNetlen:        1514,
		MinAdjlen:        106,
		MaxAdjlen:        1696,
	}
	for i := range n {
		s.Tins = append(s.Tins, cakeTestTin(uint64(i+1)))
	}
	return s
}

func TestDecodeCakeStats(t *testing.T) {
	three := cakeTestStats(3)
	tests := []struct {
		name   string
		layout cakeStatsLayout
		want   CakeStats
	}{
		{name: "three tins", want: three},
		{name: "one tin", want: cakeTestStats(1)},
		{name: "eight tins", want: cakeTestStats(8)},
		{name: "unknown attributes are skipped", layout: cakeStatsLayout{unknown: true}, want: three},
		{name: "padding before 64-bit values", layout: cakeStatsLayout{pad: true}, want: three},
		{name: "nests flagged NLA_F_NESTED", layout: cakeStatsLayout{nestedFlag: true}, want: three},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeCakeStats(encodeCakeStats(t, tt.want, tt.layout))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("decodeCakeStats (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDecodeCakeStatsUnits checks the conversions on hand-written values.
func TestDecodeCakeStatsUnits(t *testing.T) {
	tin := netlink.NewAttributeEncoder()
	tin.Uint64(12, 1_250_000) // THRESHOLD_RATE64: 10 Mbit/s
	tin.Uint32(13, 5000)      // TARGET_US: 5 ms
	tin.Uint32(19, 1)         // AVG_DELAY_US: 1 µs
	tb, _ := tin.Encode()
	tins := netlink.NewAttributeEncoder()
	tins.Bytes(1, tb)
	tsb, _ := tins.Encode()
	ae := netlink.NewAttributeEncoder()
	ae.Uint64(2, 2_500_000) // CAPACITY_ESTIMATE64: 20 Mbit/s
	ae.Bytes(10, tsb)
	b, _ := ae.Encode()

	got, err := decodeCakeStats(b)
	if err != nil {
		t.Fatal(err)
	}
	want := CakeStats{
		CapacityEstimate: 20_000_000,
		Tins: []TinStats{{
			ThresholdRate: 10_000_000,
			Target:        5 * time.Millisecond,
			AvgDelay:      time.Microsecond,
		}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("decodeCakeStats (-want +got):\n%s", diff)
	}
}

// cakeStatsWith builds TCA_STATS_APP payloads for the error cases: top is
// called to add top-level attributes before the tins, tin to fill tin 1.
func cakeStatsWith(tb testing.TB, top func(ae *netlink.AttributeEncoder), tin func(ae *netlink.AttributeEncoder)) []byte {
	tb.Helper()
	ae := netlink.NewAttributeEncoder()
	if top != nil {
		top(ae)
	}
	if tin != nil {
		t := netlink.NewAttributeEncoder()
		tin(t)
		b, err := t.Encode()
		if err != nil {
			tb.Fatal(err)
		}
		tins := netlink.NewAttributeEncoder()
		tins.Bytes(1, b)
		b, err = tins.Encode()
		if err != nil {
			tb.Fatal(err)
		}
		ae.Bytes(10, b)
	}
	b, err := ae.Encode()
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// cakeStatsErrorInputs are malformed TCA_STATS_APP payloads, by name.
func cakeStatsErrorInputs(tb testing.TB) map[string][]byte {
	tb.Helper()
	okTin := func(ae *netlink.AttributeEncoder) { ae.Uint32(2, 1) }
	tinsOutOfOrder := netlink.NewAttributeEncoder()
	tinsOutOfOrder.Bytes(2, []byte{8, 0, 2, 0, 1, 0, 0, 0})
	oob, _ := tinsOutOfOrder.Encode()
	return map[string][]byte{
		"empty":        {},
		"no tin stats": cakeStatsWith(tb, func(ae *netlink.AttributeEncoder) { ae.Uint64(2, 1) }, nil),
		"no tins":      cakeStatsWith(tb, func(ae *netlink.AttributeEncoder) { ae.Bytes(10, nil) }, nil),
		"capacity estimate of 4 bytes": cakeStatsWith(tb, func(ae *netlink.AttributeEncoder) {
			ae.Uint32(2, 2_500_000)
		}, okTin),
		"memory limit of 8 bytes": cakeStatsWith(tb, func(ae *netlink.AttributeEncoder) {
			ae.Uint64(3, 1)
		}, okTin),
		"tin sent bytes of 4 bytes": cakeStatsWith(tb, nil, func(ae *netlink.AttributeEncoder) {
			ae.Uint32(3, 1)
		}),
		"tin threshold rate of 4 bytes": cakeStatsWith(tb, nil, func(ae *netlink.AttributeEncoder) {
			ae.Uint32(12, 1)
		}),
		"tin target of 2 bytes": cakeStatsWith(tb, nil, func(ae *netlink.AttributeEncoder) {
			ae.Uint16(13, 1)
		}),
		"tins out of order": cakeStatsWith(tb, func(ae *netlink.AttributeEncoder) { ae.Bytes(10, oob) }, nil),
		"tin that is not a nest": cakeStatsWith(tb, func(ae *netlink.AttributeEncoder) {
			ae.Bytes(10, []byte{5, 0, 1, 0, 0xff, 0, 0, 0})
		}, nil),
		"attribute length below its header": {2, 0, 2, 0},
		"attribute length beyond the input": {12, 0, 2, 0, 0, 0, 0, 0},
		"half a header":                     {8, 0},
	}
}

func TestDecodeCakeStatsErrors(t *testing.T) {
	for name, b := range cakeStatsErrorInputs(t) {
		t.Run(name, func(t *testing.T) {
			got, err := decodeCakeStats(b)
			if err == nil {
				t.Fatalf("decodeCakeStats(% x) = %+v, want an error", b, got)
			}
			if !errors.Is(err, errCakeStats) {
				t.Errorf("error %q does not wrap errCakeStats", err)
			}
			if diff := cmp.Diff(CakeStats{}, got); diff != "" {
				t.Errorf("decodeCakeStats returned statistics with its error (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDecodeCakeStatsTruncated cuts full statistics at every byte: each
// prefix is an error, never a panic or a silent partial result.
func TestDecodeCakeStatsTruncated(t *testing.T) {
	for _, layout := range []cakeStatsLayout{{}, {pad: true}} {
		full := encodeCakeStats(t, cakeTestStats(3), layout)
		for cut := range len(full) {
			t.Run(fmt.Sprintf("pad=%t/%d of %d bytes", layout.pad, cut, len(full)), func(t *testing.T) {
				if got, err := decodeCakeStats(full[:cut]); err == nil {
					t.Fatalf("decodeCakeStats succeeded on %d of %d bytes: %+v", cut, len(full), got)
				}
			})
		}
	}
}

// testQdiscOptions are the cake options encodeQdiscMessage sends: a rate,
// an overhead and autorate-ingress on.
func testQdiscOptions(tb testing.TB) []byte {
	tb.Helper()
	opts := netlink.NewAttributeEncoder()
	opts.Uint64(2, 2_500_000) // TCA_CAKE_BASE_RATE64
	opts.Uint32(6, 44)        // TCA_CAKE_OVERHEAD
	opts.Uint32(cakeAutorate, 1)
	b, err := opts.Encode()
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// testQdiscCounters are the counters encodeQdiscMessage sends in TCA_STATS.
var testQdiscCounters = Stats{Bytes: 1 << 40, Packets: 1_000_000, Drops: 70, Backlog: 3000}

// encodeQdiscMessage lays out an RTM_NEWQDISC payload as tc_fill_qdisc
// writes it: tcmsg, TCA_KIND, TCA_OPTIONS, TCA_STATS2 (BASIC, QUEUE, then
// the qdisc's APP), TCA_STATS (testQdiscCounters, with overlimits, bps, pps
// and qlen that the decoder skips). app nil leaves TCA_STATS_APP out.
func encodeQdiscMessage(tb testing.TB, ifindex, handle, parent uint32, kind string, app []byte) []byte {
	tb.Helper()
	tcm := make([]byte, tcmsgLen)
	binary.NativeEndian.PutUint32(tcm[4:], ifindex)
	binary.NativeEndian.PutUint32(tcm[8:], handle)
	binary.NativeEndian.PutUint32(tcm[12:], parent)
	binary.NativeEndian.PutUint32(tcm[16:], 2) // tcm_info: refcount

	st := netlink.NewAttributeEncoder()
	st.Bytes(1, make([]byte, 16)) // TCA_STATS_BASIC
	st.Bytes(3, make([]byte, 20)) // TCA_STATS_QUEUE
	if app != nil {
		st.Bytes(tcaStatsApp, app)
	}
	sb, _ := st.Encode()

	// struct tc_stats, with its trailing padding.
	ts := make([]byte, 40)
	binary.NativeEndian.PutUint64(ts[0:], testQdiscCounters.Bytes)
	binary.NativeEndian.PutUint32(ts[8:], uint32(testQdiscCounters.Packets))
	binary.NativeEndian.PutUint32(ts[12:], uint32(testQdiscCounters.Drops))
	for off := 16; off < 32; off += 4 {
		binary.NativeEndian.PutUint32(ts[off:], 99)
	}
	binary.NativeEndian.PutUint32(ts[32:], uint32(testQdiscCounters.Backlog))

	ae := netlink.NewAttributeEncoder()
	ae.String(tcaKind, kind)
	ae.Bytes(tcaOptions, testQdiscOptions(tb))
	ae.Bytes(tcaStats2, sb)
	ae.Bytes(tcaStats, ts)
	b, err := ae.Encode()
	if err != nil {
		tb.Fatal(err)
	}
	return append(tcm, b...)
}

func TestDecodeQdiscMessage(t *testing.T) {
	app := encodeCakeStats(t, cakeTestStats(3), cakeStatsLayout{})
	opts := testQdiscOptions(t)
	tests := []struct {
		name string
		b    []byte
		want qdiscMessage
	}{
		{
			name: "cake with statistics",
			b:    encodeQdiscMessage(t, 3, 0x8001_0000, 0xFFFF_FFFF, "cake", app),
			want: qdiscMessage{Ifindex: 3, Handle: 0x8001_0000, Parent: 0xFFFF_FFFF, Kind: "cake",
				Counters: &testQdiscCounters, Options: opts, App: app},
		},
		{
			name: "no TCA_STATS_APP",
			b:    encodeQdiscMessage(t, 2, 0, 0xFFFF_FFFF, "noqueue", nil),
			want: qdiscMessage{Ifindex: 2, Parent: 0xFFFF_FFFF, Kind: "noqueue", Counters: &testQdiscCounters, Options: opts},
		},
		{
			name: "header only",
			b:    make([]byte, tcmsgLen),
			want: qdiscMessage{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeQdiscMessage(tt.b)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("decodeQdiscMessage (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("short TCA_STATS", func(t *testing.T) {
		ae := netlink.NewAttributeEncoder()
		ae.Bytes(tcaStats, make([]byte, tcStatsLen-4))
		b, _ := ae.Encode()
		if got, err := decodeQdiscMessage(append(make([]byte, tcmsgLen), b...)); err == nil {
			t.Errorf("decodeQdiscMessage accepted a TCA_STATS of %d bytes: %+v", tcStatsLen-4, got)
		}
	})
}

func TestDecodeCakeSettings(t *testing.T) {
	enc := func(attrs map[uint16]uint32) []byte {
		ae := netlink.NewAttributeEncoder()
		ae.Uint64(cakeBaseRate64, 2_500_000)
		for typ, v := range attrs {
			ae.Uint32(typ, v)
		}
		b, err := ae.Encode()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	tests := []struct {
		name    string
		options []byte
		want    cakeSettings
		wantErr bool
	}{
		{name: "on", options: enc(map[uint16]uint32{cakeAutorate: 1}), want: cakeSettings{BaseRate: 2_500_000, Autorate: true}},
		{name: "off", options: enc(map[uint16]uint32{cakeAutorate: 0}), want: cakeSettings{BaseRate: 2_500_000}},
		{name: "absent", options: enc(nil), want: cakeSettings{BaseRate: 2_500_000}},
		{name: "no options", options: nil},
		{name: "cut short", options: enc(map[uint16]uint32{cakeAutorate: 1})[:14], wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeCakeSettings(tt.options)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("decodeCakeSettings = %+v, %v; want %+v, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestDecodeQdiscMessageErrors(t *testing.T) {
	full := encodeQdiscMessage(t, 3, 0x10000, 0xFFFF_FFFF, "cake", encodeCakeStats(t, cakeTestStats(1), cakeStatsLayout{}))
	t.Run("short header", func(t *testing.T) {
		if _, err := decodeQdiscMessage(full[:tcmsgLen-1]); err == nil {
			t.Fatal("decodeQdiscMessage succeeded on a short header")
		}
	})
	// A cut inside an attribute's header or payload breaks the framing (a
	// cut on an attribute boundary, or in an attribute's trailing padding,
	// leaves a shorter valid message).
	for _, cut := range []int{tcmsgLen + 2, tcmsgLen + 6, len(full) / 2, len(full) - 1} {
		t.Run(fmt.Sprintf("cut at %d of %d", cut, len(full)), func(t *testing.T) {
			got, err := decodeQdiscMessage(full[:cut])
			if err == nil {
				t.Fatalf("decodeQdiscMessage succeeded on %d of %d bytes: %+v", cut, len(full), got)
			}
			// The header is still read, to say whose message was broken.
			if got.Ifindex != 3 || got.Handle != 0x10000 {
				t.Errorf("header not returned with the error: %+v", got)
			}
		})
	}
}

// FuzzDecodeCakeStats feeds the decoder arbitrary bytes: it must never
// panic, and what it accepts has at least one tin.
func FuzzDecodeCakeStats(f *testing.F) {
	full := encodeCakeStats(f, cakeTestStats(3), cakeStatsLayout{})
	f.Add(full)
	f.Add(encodeCakeStats(f, cakeTestStats(8), cakeStatsLayout{unknown: true, pad: true}))
	f.Add(encodeCakeStats(f, cakeTestStats(1), cakeStatsLayout{nestedFlag: true}))
	for _, cut := range []int{0, 3, 4, 12, len(full) / 2, len(full) - 4, len(full) - 1} {
		f.Add(full[:cut])
	}
	for _, b := range cakeStatsErrorInputs(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := decodeCakeStats(b)
		if err == nil && len(s.Tins) == 0 {
			t.Errorf("decodeCakeStats accepted statistics without tins: % x", b)
		}
	})
}

// FuzzDecodeQdiscMessage feeds the qdisc message decoder arbitrary bytes:
// it must never panic.
func FuzzDecodeQdiscMessage(f *testing.F) {
	app := encodeCakeStats(f, cakeTestStats(3), cakeStatsLayout{})
	full := encodeQdiscMessage(f, 3, 0x10000, 0xFFFF_FFFF, "cake", app)
	f.Add(full)
	f.Add(encodeQdiscMessage(f, 1, 0, 0xFFFF_FFFF, "noqueue", nil))
	f.Add(full[:len(full)/2])
	f.Fuzz(func(t *testing.T, b []byte) {
		q, err := decodeQdiscMessage(b)
		if err == nil && q.App != nil {
			// What the reader would do next.
			_, _ = decodeCakeStats(q.App)
		}
	})
}

func BenchmarkDecodeCakeStats(b *testing.B) {
	for _, tins := range []int{1, 3, 8} {
		in := encodeCakeStats(b, cakeTestStats(tins), cakeStatsLayout{})
		b.Run(fmt.Sprintf("tins=%d", tins), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(in)))
			for b.Loop() {
				if _, err := decodeCakeStats(in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkDecodeQdiscMessage(b *testing.B) {
	in := encodeQdiscMessage(b, 3, 0x10000, 0xFFFF_FFFF, "cake", encodeCakeStats(b, cakeTestStats(3), cakeStatsLayout{}))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeQdiscMessage(in); err != nil {
			b.Fatal(err)
		}
	}
}
