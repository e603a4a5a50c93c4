package probe

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/autoshape/autoshape/estimator"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// Tests of what the targets share, without sockets: the factory's checks,
// the Auto fallback (with fake targets), the window, and the echo target's
// matching of replies fed by hand.

func TestNewTargetRefuses(t *testing.T) {
	v4 := netip.MustParseAddr("10.77.0.2")
	v6 := netip.MustParseAddr("fd77::2")
	tests := []struct {
		name               string
		addr               netip.Addr
		method             Method
		interval, deadline time.Duration
		// device is TargetOptions.Device.
		device string
		want   string
	}{
		{name: "no address", method: Echo, interval: time.Second, deadline: time.Second, want: "invalid reflector address"},
		{name: "zero interval", addr: v4, method: Echo, deadline: time.Second, want: "reflector 10.77.0.2: probe interval 0s is not positive"},
		{name: "negative deadline", addr: v4, method: Echo, interval: time.Second, deadline: -1, want: "reflector 10.77.0.2: probe deadline -1ns is not positive"},
		{
			name: "deadline of too many intervals", addr: v4, method: Echo, interval: time.Microsecond, deadline: time.Second,
			want: "reflector 10.77.0.2: probe deadline 1s is 16384 or more intervals of 1µs",
		},
		{name: "timestamps to IPv6", addr: v6, method: Timestamp, interval: time.Second, deadline: time.Second, want: "reflector fd77::2: icmp timestamps need an IPv4 address"},
		{name: "unknown method", addr: v4, method: Method(7), interval: time.Second, deadline: time.Second, want: "reflector 10.77.0.2: unknown probe method method(7)"},
		{
			name: "link-local zone of another device", addr: netip.MustParseAddr("fe80::1%eth0"), method: Echo, interval: time.Second, deadline: time.Second,
			device: "wan2", want: "reflector fe80::1%eth0: its zone is not wan2, the device its probes are bound to",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewTargetFactory(TargetOptions{EchoSocket: EchoSocketRaw, Device: tt.device})(tt.addr, tt.method, tt.interval, tt.deadline)
			if err == nil || err.Error() != tt.want {
				t.Errorf("factory error = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestNewTargetMethods(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: needs root to open raw icmp sockets (nothing is sent)")
	}
	tests := []struct {
		addr   string
		method Method
		// want is the target's type, wantMethod what its Stats report.
		want       string
		wantMethod Method
	}{
		{"10.77.0.2", Echo, "*estimator.echoTarget", Echo},
		{"fd77::2", Echo, "*estimator.echoTarget", Echo},
		{"10.77.0.2", Timestamp, "*estimator.timestampTarget", Timestamp},
		{"::ffff:10.77.0.2", Timestamp, "*estimator.timestampTarget", Timestamp},
		{"10.77.0.2", Auto, "*estimator.fallbackTarget", Timestamp},
		{"fd77::2", Auto, "*estimator.echoTarget", Echo},
	}
	for _, tt := range tests {
		t.Run(tt.addr+"/"+tt.method.String(), func(t *testing.T) {
			tg, err := NewTarget(netip.MustParseAddr(tt.addr), tt.method, 50*time.Millisecond, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if got := typeName(tg); got != tt.want {
				t.Errorf("target is a %s, want %s", got, tt.want)
			}
			if got := tg.Stats(); got != (TargetStats{Method: tt.wantMethod}) {
				t.Errorf("Stats() = %+v, want only Method %v", got, tt.wantMethod)
			}
		})
	}
}

// typeName names the dynamic type of a target.
func typeName(tg Target) string {
	switch tg.(type) {
	case *echoTarget:
		return "*estimator.echoTarget"
	case *timestampTarget:
		return "*estimator.timestampTarget"
	case *fallbackTarget:
		return "*estimator.fallbackTarget"
	}
	return "unknown"
}

// A fakeTarget hands its results to the sink, then returns err if set, or
// waits for the end of the context. Its counters count what it handed
// over.
type fakeTarget struct {
	method  Method
	results []Result
	err     error

	mu    sync.Mutex
	stats TargetStats
}

func (f *fakeTarget) Run(ctx context.Context, sink func(Result)) error {
	for _, r := range f.results {
		if ctx.Err() != nil {
			return nil
		}
		f.mu.Lock()
		f.stats.Sent++
		if r.Lost {
			f.stats.Lost++
		} else {
			f.stats.Answered++
		}
		f.mu.Unlock()
		sink(r)
	}
	if f.err != nil {
		return f.err
	}
	<-ctx.Done()
	return nil
}

func (f *fakeTarget) Stats() TargetStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.stats
	s.Method = f.method
	return s
}

// fates builds results from a pattern: 'l' lost, 'a' answered, numbered
// from first.
func fates(pattern string, first int) []Result {
	var rs []Result
	for i, c := range pattern {
		r := Result{Seq: first + i}
		if c == 'l' {
			r.Lost = true
		} else {
			r.N = 1
		}
		rs = append(rs, r)
	}
	return rs
}

func TestFallbackTarget(t *testing.T) {
	errFirst := errors.New("socket gone")
	errThen := errors.New("no echo either")
	tests := []struct {
		name string
		// first and then are the fates the timestamp and echo targets
		// give; firstErr ends the first target; thenErr fails the making
		// of the second.
		first, then       string
		firstErr, thenErr error
		// want is what comes out; when it is all, the test ends the run.
		want      []Result
		wantErr   error
		wantStats TargetStats
	}{
		{
			name: "never answered: echo after 5", first: "lllllll", then: "aa",
			want:      append(fates("lllll", 0), fates("aa", 5)...),
			wantStats: TargetStats{Sent: 7, Answered: 2, Lost: 5, Method: Echo},
		},
		{
			name: "answered once, then silent", first: "allllllll", then: "aa",
			want:      fates("allllllll", 0),
			wantStats: TargetStats{Sent: 9, Answered: 1, Lost: 8, Method: Timestamp},
		},
		{
			name: "four misses, then an answer", first: "llllalllll", then: "aa",
			want:      fates("llllalllll", 0),
			wantStats: TargetStats{Sent: 10, Answered: 1, Lost: 9, Method: Timestamp},
		},
		{
			name: "first target fails", first: "ll", firstErr: errFirst, then: "aa",
			want:      fates("ll", 0),
			wantErr:   errFirst,
			wantStats: TargetStats{Sent: 2, Lost: 2, Method: Timestamp},
		},
		{
			name: "second target cannot be made", first: "llllll", thenErr: errThen,
			want:      fates("lllll", 0),
			wantErr:   errThen,
			wantStats: TargetStats{Sent: 5, Lost: 5, Method: Timestamp},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			first := &fakeTarget{method: Timestamp, results: fates(tt.first, 0), err: tt.firstErr}
			then := &fakeTarget{method: Echo, results: fates(tt.then, 0)}
			f := newFallbackTarget(first, func() (Target, error) {
				if tt.thenErr != nil {
					return nil, tt.thenErr
				}
				return then, nil
			}, DefaultAutoMisses)

			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			var got []Result
			err := f.Run(ctx, func(r Result) {
				got = append(got, r)
				if len(got) == len(tt.want) && tt.wantErr == nil {
					cancel()
				}
			})
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("Run() = %v, want %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got, probeCmp); diff != "" {
				t.Errorf("results (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantStats, f.Stats()); diff != "" {
				t.Errorf("Stats() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWindowBounds(t *testing.T) {
	const ms = time.Millisecond
	refl := netip.MustParseAddr("10.77.0.2")
	w := newWindow(refl, 10*ms, 100*ms)
	if got, want := len(w.ring), 10+windowSlack; got != want {
		t.Fatalf("window capacity = %d, want %d", got, want)
	}
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	// Total loss for ten thousand probes, reported as a Run does before
	// each send: the window never holds more than one deadline's worth
	// and the slack.
	var results []Result
	maxHeld := 0
	for i := range 10_000 {
		now := t0.Add(time.Duration(i) * 10 * ms)
		w.expire(now)
		results = w.pop(results[:0])
		for _, r := range results {
			if !r.Lost || now.Sub(r.Sent) < 100*ms {
				t.Fatalf("probe %d reported at %v: %+v", r.Seq, now.Sub(r.Sent), r)
			}
		}
		w.add(now, uint64(i))
		maxHeld = max(maxHeld, w.held())
	}
	if maxHeld > 11 {
		t.Errorf("window held up to %d probes, want at most 11 (100 ms / 10 ms + 1)", maxHeld)
	}
	if w.stats.Sent != 10_000 || w.stats.Lost+uint64(w.held()) != 10_000 {
		t.Errorf("stats = %+v with %d held, want 10000 sent, all lost or held", w.stats, w.held())
	}

	// Reports that lag: the sender frees the oldest slot itself.
	w = newWindow(refl, 10*ms, 100*ms)
	for i := range len(w.ring) {
		w.add(t0, uint64(i))
	}
	if !w.full() {
		t.Fatal("window not full")
	}
	w.evictOldest()
	if got := w.pop(nil); len(got) != 1 || !got[0].Lost || got[0].Seq != 0 {
		t.Errorf("after evictOldest, pop() = %+v, want probe 0 lost", got)
	}
	w.add(t0, 99)
}

// An echoReply describes a reply handed to an echoTarget: by default the
// right answer to probe seq from the reflector, arriving after took.
type echoReply struct {
	seq  int
	took time.Duration
	from netip.Addr
	// change, if set, changes the reply before it is encoded.
	change func(*icmp.Message, *icmp.Echo)
	// corrupt flips a bit of the encoded reply.
	corrupt bool
}

func TestEchoMatching(t *testing.T) {
	const ms = time.Millisecond
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	type tc struct {
		name       string
		privileged bool
		probes     int
		replies    []echoReply
		// end is when the fates are collected, after t0.
		end       time.Duration
		want      map[int]time.Duration // the round trips of the probes answered; the others are lost
		wantStats TargetStats
	}
	for _, v := range []struct {
		name        string
		refl, other netip.Addr
	}{
		{"IPv4", netip.MustParseAddr("10.77.0.2"), netip.MustParseAddr("10.77.0.3")},
		{"IPv6", netip.MustParseAddr("fd77::2"), netip.MustParseAddr("fd77::3")},
	} {
		other := v.other
		tests := []tc{
			{
				name: "answered", privileged: true, probes: 2,
				replies:   []echoReply{{seq: 0, took: 5 * ms}, {seq: 1, took: 2 * ms}},
				end:       20 * ms,
				want:      map[int]time.Duration{0: 5 * ms, 1: 2 * ms},
				wantStats: TargetStats{Sent: 2, Answered: 2, Method: Echo},
			},
			{
				// A forged copy from elsewhere comes first, right in all
				// else: a stray; the genuine reply after it counts.
				name: "forged copy from another address first", privileged: true, probes: 2,
				replies: []echoReply{
					{seq: 0, took: 1 * ms, from: other},
					{seq: 0, took: 2 * ms},
					{seq: 1, took: 1 * ms, from: other},
					{seq: 1, took: 2 * ms},
				},
				end:       20 * ms,
				want:      map[int]time.Duration{0: 2 * ms, 1: 2 * ms},
				wantStats: TargetStats{Sent: 2, Answered: 2, Stray: 2, Method: Echo},
			},
			{
				name: "strays", privileged: true, probes: 1,
				replies: []echoReply{
					{seq: 0, took: 1 * ms, change: func(_ *icmp.Message, e *icmp.Echo) { e.ID++ }},
					{seq: 0, took: 1 * ms, change: func(_ *icmp.Message, e *icmp.Echo) { e.Seq++ }},
					{seq: 0, took: 1 * ms, change: func(_ *icmp.Message, e *icmp.Echo) { e.Data[7]++ }},
					{seq: 0, took: 1 * ms, change: func(_ *icmp.Message, e *icmp.Echo) { e.Data = e.Data[:4] }},
					{seq: 0, took: 1 * ms, change: func(m *icmp.Message, _ *icmp.Echo) {
						if m.Type == ipv4.ICMPTypeEchoReply {
							m.Type = ipv4.ICMPTypeEcho
						} else {
							m.Type = ipv6.ICMPTypeEchoRequest
						}
					}},
					{seq: 0, took: 1 * ms, from: other},
				},
				end:       200 * ms,
				wantStats: TargetStats{Sent: 1, Lost: 1, Stray: 6, Method: Echo},
			},
			{
				// On a datagram socket the kernel chose the identifier and
				// checked it.
				name: "datagram socket: any identifier", probes: 1,
				replies:   []echoReply{{seq: 0, took: 1 * ms, change: func(_ *icmp.Message, e *icmp.Echo) { e.ID = 7 }}},
				end:       20 * ms,
				want:      map[int]time.Duration{0: 1 * ms},
				wantStats: TargetStats{Sent: 1, Answered: 1, Method: Echo},
			},
			{
				name: "datagram socket: the source still counts", probes: 1,
				replies:   []echoReply{{seq: 0, took: 1 * ms, from: other}},
				end:       200 * ms,
				wantStats: TargetStats{Sent: 1, Lost: 1, Stray: 1, Method: Echo},
			},
			{
				name: "duplicate and late", privileged: true, probes: 2,
				replies: []echoReply{
					{seq: 0, took: 1 * ms},
					{seq: 0, took: 2 * ms},
					{seq: 1, took: 150 * ms},
				},
				end:       200 * ms,
				want:      map[int]time.Duration{0: 1 * ms},
				wantStats: TargetStats{Sent: 2, Answered: 1, Lost: 1, Late: 1, Duplicates: 1, Method: Echo},
			},
		}
		if v.refl.Is4() {
			tests = append(tests, tc{
				name: "bad checksum", privileged: true, probes: 1,
				replies:   []echoReply{{seq: 0, took: 1 * ms, corrupt: true}, {seq: 0, took: 2 * ms}},
				end:       20 * ms,
				want:      map[int]time.Duration{0: 2 * ms},
				wantStats: TargetStats{Sent: 1, Answered: 1, Stray: 1, Method: Echo},
			})
		}
		for _, tt := range tests {
			t.Run(v.name+"/"+tt.name, func(t *testing.T) {
				e := newEchoTarget(v.refl, 10*ms, 100*ms, tt.privileged, "", nil, zap.NewNop())
				e.id = 0xbeef
				proto := 1
				if v.refl.Is6() {
					proto = 58
				}
				sent := make([]*icmp.Message, tt.probes)
				sentAt := make([]time.Time, tt.probes)
				for i := range sent {
					sentAt[i] = t0.Add(time.Duration(i) * 10 * ms)
					seq, req := e.prepare(sentAt[i], uint64(0x1234_5678_9abc_0000+i))
					if seq != i {
						t.Fatalf("probe %d got sequence number %d", i, seq)
					}
					m, err := icmp.ParseMessage(proto, req)
					if err != nil {
						t.Fatal(err)
					}
					sent[i] = m
				}
				for _, r := range tt.replies {
					req := sent[r.seq].Body.(*icmp.Echo)
					body := &icmp.Echo{ID: req.ID, Seq: req.Seq, Data: append([]byte(nil), req.Data...)}
					m := &icmp.Message{Type: ipv4.ICMPTypeEchoReply, Body: body}
					if proto == 58 {
						m.Type = ipv6.ICMPTypeEchoReply
					}
					if r.change != nil {
						r.change(m, body)
					}
					b, err := m.Marshal(nil)
					if err != nil {
						t.Fatal(err)
					}
					if r.corrupt {
						b[len(b)-1] ^= 0x40
					}
					from := v.refl
					if r.from.IsValid() {
						from = r.from
					}
					e.receive(b, from, sentAt[r.seq].Add(r.took))
				}
				e.w.expire(t0.Add(tt.end))
				got := e.w.pop(nil)
				var want []Result
				for i := range tt.probes {
					r := Result{Reflector: v.refl, Seq: i, Sent: sentAt[i], Lost: true}
					if took, ok := tt.want[i]; ok {
						r.Lost, r.N = false, 1
						r.Samples[0] = estimator.Sample{Reflector: v.refl.String(), Kind: estimator.RTT, Sent: sentAt[i], Delay: took}
					}
					want = append(want, r)
				}
				if diff := cmp.Diff(want, got, probeCmp); diff != "" {
					t.Errorf("results (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(tt.wantStats, e.Stats()); diff != "" {
					t.Errorf("Stats() (-want +got):\n%s", diff)
				}
			})
		}
	}
}

// TestWindowExpecting: a window expects answers while some probe awaits
// one, whatever else it holds unreported.
func TestWindowExpecting(t *testing.T) {
	const ms = time.Millisecond
	w := newWindow(netip.MustParseAddr("10.77.0.2"), 10*ms, 100*ms)
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	if w.expecting() {
		t.Fatal("an empty window expects an answer")
	}
	a := w.lookup(w.add(t0, 1))
	b := w.lookup(w.add(t0.Add(10*ms), 2))
	if !w.expecting() {
		t.Fatal("two probes sent, none answered: not expecting")
	}
	w.accept(b, 5*ms)
	if !w.expecting() {
		t.Fatal("the first probe still awaits its answer: not expecting")
	}
	w.accept(a, 15*ms)
	if w.expecting() || w.held() != 2 {
		t.Fatalf("both answered, held %d unreported: expecting %v, want false", w.held(), w.expecting())
	}
	c := w.lookup(w.add(t0.Add(20*ms), 3))
	w.lose(c)
	if w.expecting() {
		t.Fatal("a lost probe is still expected")
	}
}
