package estimator

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	probing "github.com/prometheus-community/pro-bing"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// Tests of what the targets share, without sockets: the factory's checks,
// the Auto fallback (with fake targets), the window, and the echo target's
// pro-bing hooks fed by hand.

func TestNewTargetRefuses(t *testing.T) {
	v4 := netip.MustParseAddr("10.77.0.2")
	v6 := netip.MustParseAddr("fd77::2")
	tests := []struct {
		name               string
		addr               netip.Addr
		method             Method
		interval, deadline time.Duration
		want               string
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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewTargetFactory(TargetOptions{EchoSocket: EchoSocketRaw})(tt.addr, tt.method, tt.interval, tt.deadline)
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

func TestWindowFindTag(t *testing.T) {
	refl := netip.MustParseAddr("10.77.0.2")
	w := newWindow(refl, time.Millisecond, 4*time.Millisecond)
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	run0 := &echoRun{gen: 0}
	run1 := &echoRun{gen: 1}
	w.addUnsent(t0, run0.tag(0)) // 0: refused; pro-bing sends 0 again
	w.add(t0, run0.tag(0))       // 1
	w.add(t0, run0.tag(1))       // 2
	w.addUnsent(t0, run1.tag(0)) // 3: the next pinger's first send fails
	w.add(t0, run1.tag(0))       // 4
	w.add(t0, run1.tag(1))       // 5
	tests := []struct {
		tag     uint64
		wantSeq int
		found   bool
	}{
		{run0.tag(0), 1, true},
		{run0.tag(1), 2, true},
		{run0.tag(2), 0, false},
		{run1.tag(0), 4, true},
		{run1.tag(1), 5, true},
		{run1.tag(2), 0, false},
		{(&echoRun{gen: 2}).tag(0), 0, false},
	}
	for _, tt := range tests {
		seq, p := w.findTag(tt.tag)
		if (p != nil) != tt.found || seq != tt.wantSeq {
			t.Errorf("findTag(%#x) = %d, found %v; want %d, found %v", tt.tag, seq, p != nil, tt.wantSeq, tt.found)
		}
	}
}

func TestEchoHooks(t *testing.T) {
	const ms = time.Millisecond
	refl := netip.MustParseAddr("fd77::2")
	other := &net.IPAddr{IP: net.ParseIP("fd77::3")}
	from := &net.IPAddr{IP: net.ParseIP("fd77::2")}
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	now := t0
	e := newEchoTarget(refl, 10*ms, 100*ms, true, zap.NewNop())
	e.now = func() time.Time { return now }
	e.rep = newReporter(&e.mu, e.w, e.now)
	sendErr := &net.OpError{Op: "write", Net: "ip6:ipv6-icmp", Err: os.NewSyscallError("sendto", syscall.ENETUNREACH)}
	retried := &net.OpError{Op: "write", Net: "ip6:ipv6-icmp", Err: syscall.ENOBUFS}

	run0 := &echoRun{gen: 0, count: 3, done: make(chan struct{})}
	run1 := &echoRun{gen: 1, count: 3, done: make(chan struct{})}
	step := func() { now = now.Add(10 * ms) }
	e.onSend(run0, &probing.Packet{Seq: 0}) // probe 0 at t0
	step()
	e.onSend(run0, &probing.Packet{Seq: 1}) // 1 at 10 ms
	step()
	e.onSendError(run0, &probing.Packet{Seq: 2}, retried) // pro-bing retries: nothing
	e.onSendError(run0, &probing.Packet{Seq: 2}, sendErr) // 2 at 20 ms: refused
	step()
	e.onSend(run0, &probing.Packet{Seq: 2}) // 3 at 30 ms
	step()
	e.onSend(run1, &probing.Packet{Seq: 0}) // 4 at 40 ms, the next pinger
	select {
	case <-run0.done:
	default:
		t.Error("the first pinger's batch is not done after 3 sends")
	}

	// Replies, each at its time; pkt.Rtt is not used (the first lies).
	recv := func(run *echoRun, seq int, at time.Duration, ip *net.IPAddr) {
		now = t0.Add(at)
		e.onRecv(run, &probing.Packet{Seq: seq, Rtt: -time.Hour, IPAddr: ip})
	}
	recv(run0, 1, 15*ms, from)  // probe 1 after 5 ms
	recv(run0, 2, 32*ms, from)  // probe 3 after 2 ms
	recv(run1, 0, 41*ms, other) // stray
	recv(run1, 0, 190*ms, from) // probe 4 after 150 ms: late
	recv(run0, 0, 191*ms, from) // probe 0 after 191 ms: late
	recv(run1, 7, 192*ms, from) // never sent: pro-bing would not pass it; late
	e.newPinger(run0).OnDuplicateRecv(&probing.Packet{Seq: 0})

	e.w.expire(t0.Add(time.Second))
	got := e.w.pop(nil)
	rtt := func(sent time.Time, d time.Duration) [2]Sample {
		return [2]Sample{{Reflector: "fd77::2", Kind: RTT, Sent: sent, Delay: d}}
	}
	want := []Result{
		{Reflector: refl, Seq: 0, Sent: t0, Lost: true},
		{Reflector: refl, Seq: 1, Sent: t0.Add(10 * ms), Samples: rtt(t0.Add(10*ms), 5*ms), N: 1},
		{Reflector: refl, Seq: 2, Sent: t0.Add(20 * ms), Lost: true},
		{Reflector: refl, Seq: 3, Sent: t0.Add(30 * ms), Samples: rtt(t0.Add(30*ms), 2*ms), N: 1},
		{Reflector: refl, Seq: 4, Sent: t0.Add(40 * ms), Lost: true},
	}
	if diff := cmp.Diff(want, got, probeCmp); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
	wantStats := TargetStats{Sent: 5, Answered: 2, Lost: 3, Late: 3, Duplicates: 1, Stray: 1, Method: Echo}
	if diff := cmp.Diff(wantStats, e.Stats()); diff != "" {
		t.Errorf("Stats() (-want +got):\n%s", diff)
	}
}

func TestProbingLoggerDoesNotExit(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	// Were Fatalf passed on as zap's Fatal, the test would panic here
	// rather than exit.
	l := probingLogger{zap.New(core, zap.WithFatalHook(zapcore.WriteThenPanic)).Sugar()}
	l.Fatalf("sending packet: %s", "network is unreachable")
	l.Errorf("e")
	l.Warnf("w")
	l.Infof("i")
	l.Debugf("d")
	type entry struct {
		Level   zapcore.Level
		Message string
	}
	var got []entry
	for _, e := range logs.All() {
		got = append(got, entry{e.Level, e.Message})
	}
	want := []entry{
		{zapcore.DebugLevel, "pro-bing: sending packet: network is unreachable"},
		{zapcore.DebugLevel, "pro-bing: e"},
		{zapcore.WarnLevel, "pro-bing: w"},
		{zapcore.InfoLevel, "pro-bing: i"},
		{zapcore.DebugLevel, "pro-bing: d"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("log entries (-want +got):\n%s", diff)
	}
}
