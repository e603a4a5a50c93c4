//go:build linux

package probe

import (
	"sync"
	"testing"
	"time"

	"github.com/autoshape/autoshape/estimator"
)

// Root tests of the timestamp target and the Auto method, in the namespace
// lab of echo_linux_test.go: the reflector namespace's kernel answers ICMP
// timestamp requests itself.

func TestTimestampAnswered(t *testing.T) {
	l := newProbeLab(t)
	tg := newLabTarget(t, l.v4, Timestamp, 10*time.Millisecond, 500*time.Millisecond)
	got, err := l.run(t, tg, 400*time.Millisecond, nil)
	if err != nil {
		t.Fatalf("Run() = %v", err)
	}
	// One clock on both sides, 1 ms resolution: each way takes 0 or 1 ms,
	// more only when the machine is busy.
	checkAnswered(t, got, 20, []estimator.Kind{estimator.OWDUp, estimator.OWDDown}, -time.Millisecond, 50*time.Millisecond)
	for _, r := range got {
		if rtt := r.Samples[0].Delay + r.Samples[1].Delay; rtt > 50*time.Millisecond {
			t.Errorf("probe %d: up %v + down %v = %v, want a round trip of a few ms", r.Seq, r.Samples[0].Delay, r.Samples[1].Delay, rtt)
		}
	}
	s := tg.Stats()
	if s.Answered < uint64(len(got)) || s.Lost != 0 || s.Stray != 0 || s.Late != 0 || s.Duplicates != 0 || s.Method != Timestamp {
		t.Errorf("Stats() = %+v, want at least %d answered and nothing else", s, len(got))
	}
}

func TestTimestampTargetsShareAReflector(t *testing.T) {
	// Each target's socket sees only its own replies (BPF filter on the
	// identifier): without the filter, each would count the others'
	// replies, some 120, as stray. A reply that the kernel was delivering
	// while the socket was opened, before its filter was on, may still
	// slip in.
	l := newProbeLab(t)
	const n = 3
	targets := make([]*timestampTarget, n)
	for i := range targets {
		targets[i] = newLabTarget(t, l.v4, Timestamp, 5*time.Millisecond, 500*time.Millisecond).(*timestampTarget)
		// Distinct identifiers, whatever the random draw.
		targets[i].id = 0x7700 + uint16(i)
	}
	var wg sync.WaitGroup
	results := make([][]reported, n)
	errs := make([]error, n)
	for i, tg := range targets {
		// Long enough for a first probe lost on a busy machine (see
		// TestEchoAnswered).
		wg.Go(func() { results[i], errs[i] = l.run(t, tg, 1500*time.Millisecond, nil) })
	}
	wg.Wait()
	for i, tg := range targets {
		if errs[i] != nil {
			t.Fatalf("target %d: Run() = %v", i, errs[i])
		}
		checkAnswered(t, results[i], 20, []estimator.Kind{estimator.OWDUp, estimator.OWDDown}, -time.Millisecond, 50*time.Millisecond)
		if s := tg.Stats(); s.Stray > n-1 || s.Lost > 3 {
			t.Errorf("target %d: Stats() = %+v, want at most %d stray, at most 3 lost (at the start)", i, s, n-1)
		}
	}
}

func TestTimestampLost(t *testing.T) {
	tests := []struct {
		name     string
		linkDown bool
	}{
		{name: "answers dropped"},
		{name: "link down", linkDown: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newProbeLab(t)
			if tt.linkDown {
				l.linkDown(t)
			} else {
				l.blackhole(t)
			}
			const deadline = 100 * time.Millisecond
			tg := newLabTarget(t, l.v4, Timestamp, 10*time.Millisecond, deadline)
			got, err := l.run(t, tg, 500*time.Millisecond, nil)
			if err != nil {
				t.Fatalf("Run() = %v", err)
			}
			checkLost(t, got, 20, deadline)
			if s := tg.Stats(); s.Lost < uint64(len(got)) || s.Answered != 0 || s.Method != Timestamp {
				t.Errorf("Stats() = %+v, want at least %d lost, none answered", s, len(got))
			}
		})
	}
}

func TestTimestampMemoryBounded(t *testing.T) {
	l := newProbeLab(t)
	const interval, deadline = time.Millisecond, 50 * time.Millisecond
	tg := newLabTarget(t, l.v4, Timestamp, interval, deadline).(*timestampTarget)
	checkBounded(t, l, tg, tg.w, &tg.mu, interval, deadline, 3*time.Second, nil)
}

func TestAuto(t *testing.T) {
	tests := []struct {
		name string
		// dropTimestamps makes the router drop timestamp requests on their
		// way out, as a CGNAT does: echo still passes.
		dropTimestamps bool
		wantMethod     Method
	}{
		{name: "timestamps answered", wantMethod: Timestamp},
		{name: "timestamps dropped", dropTimestamps: true, wantMethod: Echo},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newProbeLab(t)
			if tt.dropTimestamps {
				dropTimestampRequests(t, l.router, labRouterDev)
			}
			const deadline = 50 * time.Millisecond
			tg := newLabTarget(t, l.v4, Auto, 10*time.Millisecond, deadline)
			got, err := l.run(t, tg, 600*time.Millisecond, nil)
			if err != nil {
				t.Fatalf("Run() = %v", err)
			}
			if s := tg.Stats(); s.Method != tt.wantMethod {
				t.Errorf("Stats().Method = %v, want %v (stats %+v)", s.Method, tt.wantMethod, s)
			}
			if !tt.dropTimestamps {
				checkAnswered(t, got, 20, []estimator.Kind{estimator.OWDUp, estimator.OWDDown}, -time.Millisecond, 50*time.Millisecond)
				return
			}
			// Five timestamp probes lost, then echo, numbered on.
			if len(got) < 20 {
				t.Fatalf("got %d results, want at least 20", len(got))
			}
			checkLost(t, got[:DefaultAutoMisses], DefaultAutoMisses, deadline)
			echo := got[DefaultAutoMisses:]
			for i, r := range echo {
				if r.Lost || r.N != 1 || r.Samples[0].Kind != estimator.RTT {
					t.Fatalf("result %d after the switch: %+v, want an echo answer", i, r.Result)
				}
				if i > 0 && r.Seq != echo[i-1].Seq+1 {
					t.Errorf("result %d after the switch is probe %d, after probe %d", i, r.Seq, echo[i-1].Seq)
				}
			}
			if echo[0].Seq < DefaultAutoMisses {
				t.Errorf("first echo result is probe %d, want %d or more", echo[0].Seq, DefaultAutoMisses)
			}
		})
	}
}

// dropTimestampRequests makes device dev of namespace ns drop the ICMP
// timestamp requests it sends (a u32 filter sends them to an HTB class
// whose bfifo holds no bytes), and pass the rest.
func dropTimestampRequests(tb testing.TB, ns, dev string) {
	tb.Helper()
	tc := func(args ...string) { labCmd(tb, "tc", append([]string{"-n", ns}, args...)...) }
	tc("qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "1")
	tc("class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb", "rate", "1gbit")
	tc("class", "add", "dev", dev, "parent", "1:", "classid", "1:2", "htb", "rate", "1gbit")
	tc("qdisc", "add", "dev", dev, "parent", "1:2", "bfifo", "limit", "0")
	// Protocol ICMP, and the byte after a 20-byte IP header is type 13.
	tc("filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "1", "u32",
		"match", "ip", "protocol", "1", "0xff", "match", "u8", "13", "0xff", "at", "20", "flowid", "1:2")
}
