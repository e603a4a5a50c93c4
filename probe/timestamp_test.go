package probe

import (
	"net/netip"
	"testing"
	"time"

	"github.com/autoshape/autoshape/estimator"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap"
	"golang.org/x/net/bpf"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
)

// Pure tests of ICMP timestamp probes: message encoding, clock arithmetic
// and the matching of replies with probes. No sockets, no root.

func TestTimestampMsgEncoding(t *testing.T) {
	tests := []struct {
		name string
		msg  timestampMsg
		want []byte
	}{
		{
			name: "request",
			msg:  timestampMsg{Type: ipv4.ICMPTypeTimestamp, ID: 0x1234, Seq: 7, Originate: 86_399_990},
			want: []byte{
				13, 0, 0x7f, 0xa8, // type, code, checksum
				0x12, 0x34, 0x00, 0x07, // identifier, sequence
				0x05, 0x26, 0x5b, 0xf6, // originate 86 399 990
				0, 0, 0, 0,
				0, 0, 0, 0,
			},
		},
		{
			name: "reply with the non-standard bit",
			msg: timestampMsg{
				Type: ipv4.ICMPTypeTimestampReply, ID: 0xffff, Seq: 0xfffe,
				Originate: 1, Receive: nonStandardTime | 2, Transmit: 3,
			},
			want: []byte{
				14, 0, 0x71, 0xfa,
				0xff, 0xff, 0xff, 0xfe,
				0, 0, 0, 1,
				0x80, 0, 0, 2,
				0, 0, 0, 3,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := appendTimestampMsg(nil, tt.msg)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("appendTimestampMsg() (-want +got):\n%s", diff)
			}
			// x/net agrees on the type and the checksum.
			m, err := icmp.ParseMessage(1, got)
			if err != nil {
				t.Fatalf("icmp.ParseMessage: %v", err)
			}
			if m.Type != tt.msg.Type || m.Checksum != int(got[2])<<8|int(got[3]) {
				t.Errorf("icmp.ParseMessage() = type %v checksum %#x, want type %v", m.Type, m.Checksum, tt.msg.Type)
			}
			if icmpChecksum(got) != 0 {
				t.Errorf("checksum over the message = %#x, want 0", icmpChecksum(got))
			}
		})
	}
}

func TestParseTimestampReply(t *testing.T) {
	reply := timestampMsg{
		Type: ipv4.ICMPTypeTimestampReply, ID: 42, Seq: 9,
		Originate: 1000, Receive: 1003, Transmit: 1004,
	}
	good := appendTimestampMsg(nil, reply)
	tests := []struct {
		name    string
		b       []byte
		want    timestampMsg
		wantErr error
	}{
		{name: "reply", b: good, want: reply},
		{name: "trailing bytes", b: appendPadded(good), want: reply},
		{name: "short", b: good[:19], wantErr: errNotTimestampReply},
		{name: "empty", b: nil, wantErr: errNotTimestampReply},
		{
			name:    "request",
			b:       appendTimestampMsg(nil, timestampMsg{Type: ipv4.ICMPTypeTimestamp, ID: 42}),
			wantErr: errNotTimestampReply,
		},
		{name: "code not zero", b: withByte(good, 1, 1), wantErr: errNotTimestampReply},
		{name: "bad checksum", b: withByte(good, 19, good[19]^1), wantErr: errTimestampChecksum},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseTimestampReply(tt.b)
			if err != tt.wantErr {
				t.Fatalf("parseTimestampReply() error = %v, want %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("parseTimestampReply() (-want +got):\n%s", diff)
			}
		})
	}
}

// appendPadded returns b followed by 4 zero bytes, its checksum still
// right.
func appendPadded(b []byte) []byte { return append(append([]byte(nil), b...), 0, 0, 0, 0) }

// withByte returns a copy of b with b[i] = v.
func withByte(b []byte, i int, v byte) []byte {
	c := append([]byte(nil), b...)
	c[i] = v
	return c
}

func TestMsSinceMidnight(t *testing.T) {
	tests := []struct {
		t    time.Time
		want uint32
	}{
		{time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC), 0},
		{time.Date(2026, 3, 1, 0, 0, 0, 999_999, time.UTC), 0},
		{time.Date(2026, 3, 1, 0, 0, 0, 1_000_000, time.UTC), 1},
		{time.Date(2026, 3, 1, 23, 59, 59, 990_000_000, time.UTC), 86_399_990},
		{time.Date(2026, 3, 1, 23, 59, 59, 999_999_999, time.UTC), 86_399_999},
		// The zone does not matter: midnight UTC.
		{time.Date(2026, 3, 1, 1, 0, 0, 0, time.FixedZone("CET", 3600)), 0},
		{time.Date(1969, 12, 31, 23, 0, 0, 0, time.UTC), 82_800_000},
	}
	for _, tt := range tests {
		if got := msSinceMidnight(tt.t); got != tt.want {
			t.Errorf("msSinceMidnight(%v) = %d, want %d", tt.t, got, tt.want)
		}
	}
}

func TestOneWayDelays(t *testing.T) {
	const ms = time.Millisecond
	tests := []struct {
		name                      string
		orig, recv, xmit, arrival uint32
		wantUp, wantDown          time.Duration
	}{
		{name: "same clock", orig: 1000, recv: 1010, xmit: 1011, arrival: 1020, wantUp: 10 * ms, wantDown: 9 * ms},
		{
			// Sent at 23:59:59.990, answered after midnight.
			name: "midnight on the way up", orig: 86_399_990, recv: 5, xmit: 6, arrival: 12,
			wantUp: 15 * ms, wantDown: 6 * ms,
		},
		{
			name: "midnight on the way back", orig: 86_399_980, recv: 86_399_995, xmit: 86_399_996, arrival: 4,
			wantUp: 15 * ms, wantDown: 8 * ms,
		},
		{
			// A reflector whose clock is 2 h ahead: up and down carry
			// the offset with opposite signs.
			name: "remote clock ahead", orig: 1000, recv: 7_201_010, xmit: 7_201_010, arrival: 1020,
			wantUp: 2*time.Hour + 10*ms, wantDown: -2*time.Hour + 10*ms,
		},
		{
			name: "remote clock behind across midnight", orig: 100, recv: 86_399_000, xmit: 86_399_001, arrival: 110,
			wantUp: -1100 * ms, wantDown: 1109 * ms,
		},
		{
			name: "non-standard bit", orig: 1000, recv: nonStandardTime | 1010, xmit: nonStandardTime | 1011, arrival: 1020,
			wantUp: 10 * ms, wantDown: 9 * ms,
		},
		{
			// Half a day is the edge of the fold: +12 h, never −12 h.
			name: "half a day", orig: 0, recv: msPerDay / 2, xmit: msPerDay / 2, arrival: 0,
			wantUp: 12 * time.Hour, wantDown: 12 * time.Hour,
		},
		{
			name: "beyond a day", orig: 1000, recv: msPerDay + 1010, xmit: msPerDay + 1011, arrival: 1020,
			wantUp: 10 * ms, wantDown: 9 * ms,
		},
		{
			// 1 ms resolution: a fast reflector may seem to answer
			// before it was asked.
			name: "sub-millisecond", orig: 5000, recv: 4999, xmit: 4999, arrival: 5000,
			wantUp: -1 * ms, wantDown: 1 * ms,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := timestampMsg{Originate: tt.orig, Receive: tt.recv, Transmit: tt.xmit}
			up, down := oneWayDelays(m, tt.arrival)
			if up != tt.wantUp || down != tt.wantDown {
				t.Errorf("oneWayDelays() = %v, %v, want %v, %v", up, down, tt.wantUp, tt.wantDown)
			}
		})
	}
}

// A tsReply describes a reply handed to a timestampTarget: by default the
// right answer to probe seq from the reflector, its receive and transmit
// timestamps the arrival's (clock offset 0) minus remote, arriving after
// took.
type tsReply struct {
	seq    int
	took   time.Duration
	remote time.Duration
	// change, if set, changes the reply before it is encoded.
	change func(*timestampMsg)
	from   netip.Addr
	// raw, if set, replaces the encoded reply.
	raw []byte
	// corrupt flips a bit of the encoded reply.
	corrupt bool
	// expireFirst expires the probes due at the reply's arrival before
	// handing it over; they are always expired after.
	expireFirst bool
}

func TestTimestampMatching(t *testing.T) {
	const ms = time.Millisecond
	refl := netip.MustParseAddr("10.77.0.2")
	other := netip.MustParseAddr("10.77.0.3")
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	beforeMidnight := time.Date(2026, 3, 1, 23, 59, 59, 990_000_000, time.UTC)
	answer := func(t0 time.Time, seq int, up, down time.Duration) Result {
		return Result{
			Reflector: refl, Seq: seq, Sent: t0, N: 2,
			Samples: [2]estimator.Sample{
				{Reflector: "10.77.0.2", Kind: estimator.OWDUp, Sent: t0, Delay: up},
				{Reflector: "10.77.0.2", Kind: estimator.OWDDown, Sent: t0, Delay: down},
			},
		}
	}
	tests := []struct {
		name string
		// start is when the first probe is sent; probes go 10 ms apart.
		start   time.Time
		probes  int
		replies []tsReply
		// end is when the fates are collected, after start.
		end       time.Duration
		want      []Result
		wantStats TargetStats
	}{
		{
			name: "answered", start: t0, probes: 1,
			replies:   []tsReply{{seq: 0, took: 4 * ms, remote: 2 * ms}},
			end:       5 * ms,
			want:      []Result{answer(t0, 0, 2*ms, 2*ms)},
			wantStats: TargetStats{Sent: 1, Answered: 1, Method: Timestamp},
		},
		{
			name: "midnight", start: beforeMidnight, probes: 1,
			// Answered at 00:00:00.005, back at 00:00:00.012.
			replies:   []tsReply{{seq: 0, took: 22 * ms, remote: 7 * ms}},
			end:       30 * ms,
			want:      []Result{answer(beforeMidnight, 0, 15*ms, 7*ms)},
			wantStats: TargetStats{Sent: 1, Answered: 1, Method: Timestamp},
		},
		{
			name: "non-standard bit", start: t0, probes: 1,
			replies: []tsReply{{seq: 0, took: 4 * ms, remote: 2 * ms, change: func(m *timestampMsg) {
				m.Receive |= nonStandardTime
				m.Transmit |= nonStandardTime
			}}},
			end:       5 * ms,
			want:      []Result{answer(t0, 0, 2*ms, 2*ms)},
			wantStats: TargetStats{Sent: 1, Answered: 1, Method: Timestamp},
		},
		{
			// The reflector's clock is 2 h ahead: the offset cancels in
			// up + down, which match the round trip.
			name: "clock offset", start: t0, probes: 1,
			replies: []tsReply{{seq: 0, took: 4 * ms, remote: 2 * ms, change: func(m *timestampMsg) {
				m.Receive = (m.Receive + 2*3_600_000) % msPerDay
				m.Transmit = (m.Transmit + 2*3_600_000) % msPerDay
			}}},
			end:       5 * ms,
			want:      []Result{answer(t0, 0, 2*time.Hour+2*ms, -2*time.Hour+2*ms)},
			wantStats: TargetStats{Sent: 1, Answered: 1, Method: Timestamp},
		},
		{
			// Up + down is not the round trip timed on our monotonic
			// clock: garbage, or a clock stepped while the probe was out.
			// Answered, but no sample.
			name: "timestamps that contradict the round trip", start: t0, probes: 3,
			replies: []tsReply{
				{seq: 0, took: 4 * ms, remote: 2 * ms, change: func(m *timestampMsg) { m.Receive = 12_345 }},
				{seq: 1, took: 4 * ms, remote: 2 * ms, change: func(m *timestampMsg) { m.Transmit -= 2000 }},
				{seq: 2, took: 4 * ms, remote: 2 * ms, change: func(m *timestampMsg) { m.Originate, m.Receive, m.Transmit = 0, 0, 0 }},
			},
			end: 130 * ms,
			want: []Result{
				{Reflector: refl, Seq: 0, Sent: t0, Inconsistent: true},
				{Reflector: refl, Seq: 1, Sent: t0.Add(10 * ms), Inconsistent: true},
				{Reflector: refl, Seq: 2, Sent: t0.Add(20 * ms), Lost: true},
			},
			wantStats: TargetStats{Sent: 3, Answered: 2, Lost: 1, Stray: 1, Inconsistent: 2, Method: Timestamp},
		},
		{
			name: "answers out of order come out in send order", start: t0, probes: 3,
			replies: []tsReply{
				{seq: 2, took: 1 * ms},
				{seq: 0, took: 25 * ms},
				{seq: 1, took: 16 * ms},
			},
			end: 30 * ms,
			want: []Result{
				answer(t0, 0, 25*ms, 0),
				answer(t0.Add(10*ms), 1, 16*ms, 0),
				answer(t0.Add(20*ms), 2, 1*ms, 0),
			},
			wantStats: TargetStats{Sent: 3, Answered: 3, Method: Timestamp},
		},
		{
			name: "strays", start: t0, probes: 1,
			replies: []tsReply{
				{seq: 0, took: 1 * ms, change: func(m *timestampMsg) { m.ID++ }},
				{seq: 0, took: 1 * ms, change: func(m *timestampMsg) { m.Seq++ }},
				{seq: 0, took: 1 * ms, change: func(m *timestampMsg) { m.Seq += 1 << 15 }},
				{seq: 0, took: 1 * ms, change: func(m *timestampMsg) { m.Originate++ }},
				{seq: 0, took: 1 * ms, change: func(m *timestampMsg) { m.Type = ipv4.ICMPTypeTimestamp }},
				{seq: 0, took: 1 * ms, from: other},
				{seq: 0, took: 1 * ms, raw: []byte{14, 0, 0, 0}},
			},
			end:       200 * ms,
			want:      []Result{{Reflector: refl, Seq: 0, Sent: t0, Lost: true}},
			wantStats: TargetStats{Sent: 1, Lost: 1, Stray: 7, Method: Timestamp},
		},
		{
			name: "bad checksum", start: t0, probes: 1,
			replies: []tsReply{
				{seq: 0, took: 1 * ms, corrupt: true},
				{seq: 0, took: 2 * ms},
			},
			end:       5 * ms,
			want:      []Result{answer(t0, 0, 2*ms, 0)},
			wantStats: TargetStats{Sent: 1, Answered: 1, Stray: 1, Method: Timestamp},
		},
		{
			name: "duplicate", start: t0, probes: 2,
			replies: []tsReply{
				{seq: 0, took: 1 * ms},
				{seq: 0, took: 2 * ms},
				{seq: 1, took: 1 * ms},
				// After probe 0 was reported: still known as answered.
				{seq: 0, took: 40 * ms},
			},
			end:       50 * ms,
			want:      []Result{answer(t0, 0, 1*ms, 0), answer(t0.Add(10*ms), 1, 1*ms, 0)},
			wantStats: TargetStats{Sent: 2, Answered: 2, Duplicates: 2, Method: Timestamp},
		},
		{
			name: "late", start: t0, probes: 2,
			replies: []tsReply{
				// Past the deadline (100 ms), before the probe expired.
				{seq: 0, took: 101 * ms},
				// After the probe expired.
				{seq: 1, took: 150 * ms, expireFirst: true},
			},
			end: 200 * ms,
			want: []Result{
				{Reflector: refl, Seq: 0, Sent: t0, Lost: true},
				{Reflector: refl, Seq: 1, Sent: t0.Add(10 * ms), Lost: true},
			},
			wantStats: TargetStats{Sent: 2, Lost: 2, Late: 2, Method: Timestamp},
		},
		{
			name: "unanswered until the deadline", start: t0, probes: 2,
			end:  105 * ms,
			want: []Result{{Reflector: refl, Seq: 0, Sent: t0, Lost: true}},
			// Probe 1 is due at 110 ms.
			wantStats: TargetStats{Sent: 2, Lost: 1, Method: Timestamp},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tg := newTimestampTarget(refl, 10*ms, 100*ms, "", nil, zap.NewNop())
			tg.id = 0xbeef
			sent := make([]timestampMsg, tt.probes)
			sentAt := make([]time.Time, tt.probes)
			for i := range sent {
				sentAt[i] = tt.start.Add(time.Duration(i) * 10 * ms)
				seq, req := tg.prepare(sentAt[i])
				if seq != i {
					t.Fatalf("probe %d got sequence number %d", i, seq)
				}
				m, err := parseTimestampRequest(req)
				if err != nil {
					t.Fatal(err)
				}
				sent[i] = m
			}
			// Replies are handed over in the order listed, each with its
			// arrival time; after each, the fates known are collected, as
			// Run's reporter does.
			var got []Result
			for _, r := range tt.replies {
				arrival := sentAt[r.seq].Add(r.took)
				stamp := msSinceMidnight(arrival.Add(-r.remote))
				m := sent[r.seq]
				m.Type, m.Receive, m.Transmit = ipv4.ICMPTypeTimestampReply, stamp, stamp
				if r.change != nil {
					r.change(&m)
				}
				b := appendTimestampMsg(nil, m)
				if r.raw != nil {
					b = r.raw
				}
				if r.corrupt {
					b = withByte(b, 9, b[9]^0x40)
				}
				from := refl
				if r.from.IsValid() {
					from = r.from
				}
				if r.expireFirst {
					tg.w.expire(arrival)
					got = tg.w.pop(got)
				}
				tg.receive(b, from, arrival)
				tg.w.expire(arrival)
				got = tg.w.pop(got)
			}
			tg.w.expire(tt.start.Add(tt.end))
			got = tg.w.pop(got)
			if diff := cmp.Diff(tt.want, got, probeCmp); diff != "" {
				t.Errorf("results (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantStats, tg.Stats()); diff != "" {
				t.Errorf("Stats() (-want +got):\n%s", diff)
			}
		})
	}
}

// probeCmp compares Results, whose reflector is a netip.Addr.
var probeCmp = cmp.Comparer(func(a, b netip.Addr) bool { return a == b })

// parseTimestampRequest decodes a timestamp request, as a reflector does.
func parseTimestampRequest(b []byte) (timestampMsg, error) {
	c := append([]byte(nil), b...)
	c[0] = byte(ipv4.ICMPTypeTimestampReply)
	// The type is in the checksum's high byte: 14 − 13 less.
	sum := uint16(c[2])<<8 | uint16(c[3])
	sum -= 0x100
	c[2], c[3] = byte(sum>>8), byte(sum)
	m, err := parseTimestampReply(c)
	m.Type = ipv4.ICMPTypeTimestamp
	return m, err
}

func TestTimestampFilter(t *testing.T) {
	tests := []struct {
		name string
		pkt  []byte
		want int
	}{
		{name: "our reply", pkt: ipv4Packet(appendTimestampMsg(nil, timestampMsg{Type: ipv4.ICMPTypeTimestampReply, ID: 0xbeef})), want: 0xffff},
		{name: "other identifier", pkt: ipv4Packet(appendTimestampMsg(nil, timestampMsg{Type: ipv4.ICMPTypeTimestampReply, ID: 0xbeee})), want: 0},
		{name: "request", pkt: ipv4Packet(appendTimestampMsg(nil, timestampMsg{Type: ipv4.ICMPTypeTimestamp, ID: 0xbeef})), want: 0},
		{name: "with IP options", pkt: ipv4PacketWithOptions(appendTimestampMsg(nil, timestampMsg{Type: ipv4.ICMPTypeTimestampReply, ID: 0xbeef})), want: 0xffff},
	}
	vm, err := bpf.NewVM(timestampFilter(0xbeef))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := vm.Run(tt.pkt)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("filter passes %d bytes, want %d", got, tt.want)
			}
		})
	}
}

// ipv4Packet prefixes an ICMP message with a 20-byte IPv4 header (only the
// version and length matter to the filter).
func ipv4Packet(icmpMsg []byte) []byte {
	h := make([]byte, 20)
	h[0] = 0x45
	h[9] = 1
	return append(h, icmpMsg...)
}

// ipv4PacketWithOptions prefixes an ICMP message with a 24-byte IPv4
// header.
func ipv4PacketWithOptions(icmpMsg []byte) []byte {
	h := make([]byte, 24)
	h[0] = 0x46
	h[9] = 1
	return append(h, icmpMsg...)
}
