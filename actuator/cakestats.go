package actuator

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/mdlayher/netlink"
)

// Netlink attribute types around a qdisc's statistics (include/uapi/linux/
// rtnetlink.h and gen_stats.h).
const (
	tcaKind     = 1 // TCA_KIND: the qdisc's kind, a NUL-terminated string
	tcaOptions  = 2 // TCA_OPTIONS: the qdisc's settings, a nest
	tcaStats    = 3 // TCA_STATS: struct tc_stats
	tcaStats2   = 7 // TCA_STATS2: nest of TCA_STATS_* attributes
	tcaStatsApp = 4 // TCA_STATS_APP: the qdisc's own statistics
)

// tcStatsLen is the size of struct tc_stats without its trailing padding
// (a u64 and seven u32).
const tcStatsLen = 36

// TCA_CAKE_BASE_RATE64 and TCA_CAKE_AUTORATE among a cake qdisc's options.
const (
	cakeBaseRate64 = 2
	cakeAutorate   = 9
)

// tcmsgLen is the size of struct tcmsg, which heads every RTM_*QDISC message.
const tcmsgLen = 20

// CAKE's statistics attributes (TCA_CAKE_STATS_*, include/uapi/linux/
// pkt_sched.h), nested in TCA_STATS_APP. Types 11 to 16 are per-flow class
// statistics and never appear here.
const (
	cakeStatsCapacityEstimate64 = 2
	cakeStatsMemoryLimit        = 3
	cakeStatsMemoryUsed         = 4
	cakeStatsAvgNetoff          = 5
	cakeStatsMinNetlen          = 6
	cakeStatsMaxNetlen          = 7
	cakeStatsMinAdjlen          = 8
	cakeStatsMaxAdjlen          = 9
	cakeStatsTinStats           = 10
)

// The per-tin attributes (TCA_CAKE_TIN_STATS_*) inside each tin's nest. The
// types this decoder does not need (the *_BYTES64 siblings of the packet
// counters, BACKLOG_PACKETS, the WAY_* hash statistics, MAX_SKBLEN and
// FLOW_QUANTUM) are skipped like unknown ones.
const (
	cakeTinSentPackets        = 2
	cakeTinSentBytes64        = 3
	cakeTinDroppedPackets     = 4
	cakeTinAcksDroppedPackets = 6
	cakeTinECNMarkedPackets   = 8
	cakeTinBacklogBytes       = 11
	cakeTinThresholdRate64    = 12
	cakeTinTargetUS           = 13
	cakeTinIntervalUS         = 14
	cakeTinPeakDelayUS        = 18
	cakeTinAvgDelayUS         = 19
	cakeTinBaseDelayUS        = 20
	cakeTinSparseFlows        = 21
	cakeTinBulkFlows          = 22
	cakeTinUnresponsiveFlows  = 23
)

// CakeStats are the statistics CAKE reports beyond the generic qdisc
// counters (TCA_STATS_APP of a cake qdisc).
type CakeStats struct {
	// CapacityEstimate is CAKE's ingress capacity estimate in bit/s. It
	// follows the traffic only while CAKE runs with autorate-ingress;
	// otherwise it stays at the rate the qdisc was created with.
	CapacityEstimate uint64
	// MemoryLimit is the queue's memory limit and MemoryUsed the most
	// memory it has used, in bytes.
	MemoryLimit, MemoryUsed uint32
	// AvgNetoff is the average offset of the network header in a packet,
	// in bytes.
	AvgNetoff uint32
	// MinNetlen and MaxNetlen are the smallest and largest packet lengths
	// seen; MinAdjlen and MaxAdjlen the same after CAKE's overhead and
	// cell framing, in bytes.
	MinNetlen, MaxNetlen uint32
	MinAdjlen, MaxAdjlen uint32
	// Tins are the tins' statistics in the kernel's order (tin 1 first).
	Tins []TinStats
}

// errCakeStats marks statistics the decoder cannot read.
var errCakeStats = errors.New("invalid CAKE statistics")

// decodeCakeStats decodes the payload of a cake qdisc's TCA_STATS_APP
// attribute: the nested TCA_CAKE_STATS_* attributes. Attribute types it does
// not know are skipped, since newer kernels add some; a known attribute of
// the wrong size, a truncated attribute, tins out of order or missing tin
// statistics are errors.
func decodeCakeStats(b []byte) (CakeStats, error) {
	var s CakeStats
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return CakeStats{}, fmt.Errorf("%w: %w", errCakeStats, err)
	}
	sawTins := false
	for ad.Next() {
		switch ad.Type() {
		case cakeStatsCapacityEstimate64:
			s.CapacityEstimate = cakeBits(ad.Uint64())
		case cakeStatsMemoryLimit:
			s.MemoryLimit = ad.Uint32()
		case cakeStatsMemoryUsed:
			s.MemoryUsed = ad.Uint32()
		case cakeStatsAvgNetoff:
			s.AvgNetoff = ad.Uint32()
		case cakeStatsMinNetlen:
			s.MinNetlen = ad.Uint32()
		case cakeStatsMaxNetlen:
			s.MaxNetlen = ad.Uint32()
		case cakeStatsMinAdjlen:
			s.MinAdjlen = ad.Uint32()
		case cakeStatsMaxAdjlen:
			s.MaxAdjlen = ad.Uint32()
		case cakeStatsTinStats:
			sawTins = true
			ad.Nested(func(nad *netlink.AttributeDecoder) error {
				tins, err := decodeCakeTins(nad)
				s.Tins = tins
				return err
			})
		}
	}
	if err := ad.Err(); err != nil {
		return CakeStats{}, fmt.Errorf("%w: %w", errCakeStats, err)
	}
	// The kernel always ends with the tins and a qdisc has at least one, so
	// their absence means the input was cut short.
	if !sawTins || len(s.Tins) == 0 {
		return CakeStats{}, fmt.Errorf("%w: no tin statistics", errCakeStats)
	}
	return s, nil
}

// decodeCakeTins decodes the nest of tins, numbered 1 to N in order.
func decodeCakeTins(ad *netlink.AttributeDecoder) ([]TinStats, error) {
	tins := make([]TinStats, 0, ad.Len())
	for ad.Next() {
		n := len(tins) + 1
		if int(ad.Type()) != n {
			return nil, fmt.Errorf("tin %d where tin %d was expected", ad.Type(), n)
		}
		var tin TinStats
		ad.Nested(func(nad *netlink.AttributeDecoder) error {
			tin = decodeCakeTin(nad)
			if err := nad.Err(); err != nil {
				return fmt.Errorf("tin %d: %w", n, err)
			}
			return nil
		})
		tins = append(tins, tin)
	}
	return tins, ad.Err()
}

// decodeCakeTin decodes one tin's attributes; errors stay in ad.
func decodeCakeTin(ad *netlink.AttributeDecoder) TinStats {
	var t TinStats
	for ad.Next() {
		switch ad.Type() {
		case cakeTinSentPackets:
			t.SentPackets = uint64(ad.Uint32())
		case cakeTinSentBytes64:
			t.SentBytes = ad.Uint64()
		case cakeTinDroppedPackets:
			t.DroppedPackets = uint64(ad.Uint32())
		case cakeTinAcksDroppedPackets:
			t.AckDropsPackets = uint64(ad.Uint32())
		case cakeTinECNMarkedPackets:
			t.ECNMarkedPackets = uint64(ad.Uint32())
		case cakeTinBacklogBytes:
			t.BacklogBytes = uint64(ad.Uint32())
		case cakeTinThresholdRate64:
			t.ThresholdRate = cakeBits(ad.Uint64())
		case cakeTinTargetUS:
			t.Target = cakeMicros(ad.Uint32())
		case cakeTinIntervalUS:
			t.Interval = cakeMicros(ad.Uint32())
		case cakeTinPeakDelayUS:
			t.PeakDelay = cakeMicros(ad.Uint32())
		case cakeTinAvgDelayUS:
			t.AvgDelay = cakeMicros(ad.Uint32())
		case cakeTinBaseDelayUS:
			t.BaseDelay = cakeMicros(ad.Uint32())
		case cakeTinSparseFlows:
			t.SparseFlows = ad.Uint32()
		case cakeTinBulkFlows:
			t.BulkFlows = ad.Uint32()
		case cakeTinUnresponsiveFlows:
			t.UnresponsiveFlows = ad.Uint32()
		}
	}
	return t
}

// cakeBits converts bytes/s to bit/s, saturating instead of wrapping.
func cakeBits(v uint64) uint64 {
	if v > math.MaxUint64/8 {
		return math.MaxUint64
	}
	return v * 8
}

// cakeMicros converts a kernel count of microseconds to a Duration.
func cakeMicros(us uint32) time.Duration {
	return time.Duration(us) * time.Microsecond
}

// A qdiscMessage is what the CAKE statistics reader needs from one
// RTM_NEWQDISC message.
type qdiscMessage struct {
	// Ifindex, Handle and Parent come from the tcmsg header.
	Ifindex        uint32
	Handle, Parent uint32
	// Kind is TCA_KIND, e.g. "cake".
	Kind string
	// Counters are the bytes, packets, drops and backlog of TCA_STATS,
	// nil when the message has none.
	Counters *Stats
	// Options is the payload of TCA_OPTIONS, nil when the message has
	// none.
	Options []byte
	// App is the payload of TCA_STATS2 -> TCA_STATS_APP, nil when the
	// message has none.
	App []byte
}

// decodeQdiscMessage decodes the payload of one RTM_NEWQDISC message: the
// 20-byte tcmsg header, then the attributes, of which it keeps TCA_KIND,
// TCA_OPTIONS, TCA_STATS and TCA_STATS2 -> TCA_STATS_APP. When only the attributes are malformed, the
// header fields are still returned with the error, so that a caller can tell
// whose message it was.
func decodeQdiscMessage(b []byte) (qdiscMessage, error) {
	if len(b) < tcmsgLen {
		return qdiscMessage{}, fmt.Errorf("qdisc message of %d bytes is shorter than its %d-byte header", len(b), tcmsgLen)
	}
	// struct tcmsg: family u8, 3 bytes of padding, ifindex s32, handle u32,
	// parent u32, info u32, all in the host's byte order.
	q := qdiscMessage{
		Ifindex: binary.NativeEndian.Uint32(b[4:8]),
		Handle:  binary.NativeEndian.Uint32(b[8:12]),
		Parent:  binary.NativeEndian.Uint32(b[12:16]),
	}
	ad, err := netlink.NewAttributeDecoder(b[tcmsgLen:])
	if err != nil {
		return q, fmt.Errorf("invalid qdisc attributes: %w", err)
	}
	for ad.Next() {
		switch ad.Type() {
		case tcaKind:
			q.Kind = ad.String()
		case tcaOptions:
			q.Options = ad.Bytes()
		case tcaStats:
			b := ad.Bytes()
			if len(b) < tcStatsLen {
				return q, fmt.Errorf("TCA_STATS of %d bytes is shorter than struct tc_stats", len(b))
			}
			// struct tc_stats: bytes u64, packets, drops, overlimits,
			// bps, pps, qlen, backlog u32, in the host's byte order.
			q.Counters = &Stats{
				Bytes:   binary.NativeEndian.Uint64(b[0:8]),
				Packets: uint64(binary.NativeEndian.Uint32(b[8:12])),
				Drops:   uint64(binary.NativeEndian.Uint32(b[12:16])),
				Backlog: uint64(binary.NativeEndian.Uint32(b[32:36])),
			}
		case tcaStats2:
			ad.Nested(func(nad *netlink.AttributeDecoder) error {
				for nad.Next() {
					if nad.Type() == tcaStatsApp {
						q.App = nad.Bytes()
					}
				}
				return nil
			})
		}
	}
	if err := ad.Err(); err != nil {
		return q, fmt.Errorf("invalid qdisc attributes: %w", err)
	}
	return q, nil
}

// cakeSettings are the settings of a cake qdisc that its rate changes
// depend on.
type cakeSettings struct {
	// BaseRate is the rate the kernel holds, in bytes/s (0: unlimited or
	// absent).
	BaseRate uint64
	// Autorate is autorate-ingress: CAKE sets its own rate.
	Autorate bool
}

// decodeCakeSettings decodes a cake qdisc's options (the payload of
// TCA_OPTIONS): its rate and autorate-ingress.
func decodeCakeSettings(options []byte) (cakeSettings, error) {
	var cs cakeSettings
	ad, err := netlink.NewAttributeDecoder(options)
	if err != nil {
		return cs, fmt.Errorf("invalid CAKE options: %w", err)
	}
	for ad.Next() {
		switch ad.Type() {
		case cakeBaseRate64:
			cs.BaseRate = ad.Uint64()
		case cakeAutorate:
			cs.Autorate = ad.Uint32() != 0
		}
	}
	if err := ad.Err(); err != nil {
		return cakeSettings{}, fmt.Errorf("invalid CAKE options: %w", err)
	}
	return cs, nil
}
