package probe

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/autoshape/autoshape/estimator"
	"golang.org/x/net/ipv4"
)

// Clock steps against ICMP timestamps: a fake set of reflectors answers
// timestamp probes with the timestamps their clocks and ours would give,
// through the same arithmetic and consistency check as the timestamp
// target, into an Estimator. A step of either clock must not read as
// delay, and real delay on one side must still be reported, before and
// after a step.

// A stepWorld is six reflectors, our clock and theirs, and the queues.
type stepWorld struct {
	start time.Time
	// ours is our clock's offset at t; theirs reflector i's.
	ours   func(t time.Time) time.Duration
	theirs func(i int, t time.Time) time.Duration
	// queue is the delay load adds up and down at t.
	queue func(t time.Time) (up, down time.Duration)
	// split, if set, says whether a tick comes between the up and down
	// samples of reflector i's probe sent at t.
	split func(i int, t time.Time) bool
	rng   *rand.Rand
}

// stepResult is what the estimator reported in one run.
type stepResult struct {
	// bloat lists the ticks (since start) at which each direction was
	// reported bloated.
	bloat [2][]time.Duration
	// over counts the per-sample deltas over the threshold, per direction,
	// outside the stretches of real load.
	over [2]int
	// dropped counts the answers the consistency check refused.
	dropped int
}

// run probes for d: reflector i every 150 ms, turns 25 ms apart, a tick
// every 50 ms.
func (w *stepWorld) run(t *testing.T, d time.Duration) stepResult {
	t.Helper()
	e, err := estimator.New(estimator.Config{})
	if err != nil {
		t.Fatal(err)
	}
	const slot, reflectors = 25 * time.Millisecond, 6
	rates := [2]float64{10e6, 10e6}
	var res stepResult
	observe := func(now time.Time) {
		obs := e.Observe(now, rates)
		// The samples a tick takes were sent up to a tick and a round
		// trip before it.
		qu, qd := w.queue(now)
		pu, pd := w.queue(now.Add(-100 * time.Millisecond))
		loaded := [2]bool{qd > 0 || pd > 0, qu > 0 || pu > 0}
		for _, dir := range estimator.Directions {
			if obs[dir].Bloat {
				res.bloat[dir] = append(res.bloat[dir], now.Sub(w.start))
			}
			if loaded[dir] {
				continue
			}
			for _, delta := range obs[dir].Deltas {
				if delta > obs[dir].Threshold {
					res.over[dir]++
				}
			}
		}
	}
	for k := 0; time.Duration(k)*slot < d; k++ {
		sent := w.start.Add(time.Duration(k) * slot)
		i := k % reflectors
		qu, qd := w.queue(sent)
		up := time.Duration(5+i)*time.Millisecond + time.Duration(w.rng.Int64N(int64(2*time.Millisecond))) + qu
		down := time.Duration(6+i)*time.Millisecond + time.Duration(w.rng.Int64N(int64(2*time.Millisecond))) + qd
		recv, arrived := sent.Add(up), sent.Add(up+down)
		// What the clocks read: ours when the probe leaves and when its
		// answer arrives, the reflector's when it answers.
		m := timestampMsg{
			Type:      ipv4.ICMPTypeTimestampReply,
			Originate: msSinceMidnight(sent.Add(w.ours(sent))),
			Receive:   msSinceMidnight(recv.Add(w.theirs(i, recv))),
		}
		m.Transmit = m.Receive
		owdUp, owdDown := oneWayDelays(m, msSinceMidnight(arrived.Add(w.ours(arrived))))
		if !consistent(owdUp, owdDown, arrived.Sub(sent)) {
			res.dropped++
		} else {
			name := fmt.Sprintf("r%d", i)
			e.AddSample(estimator.Sample{Reflector: name, Kind: estimator.OWDUp, Sent: sent, Delay: owdUp})
			if w.split != nil && w.split(i, sent) {
				observe(arrived)
			}
			e.AddSample(estimator.Sample{Reflector: name, Kind: estimator.OWDDown, Sent: sent, Delay: owdDown})
		}
		if k%2 == 1 {
			observe(sent.Add(slot))
		}
	}
	return res
}

// stepAt returns an offset that is 0 before at and by after.
func stepAt(start time.Time, at, by time.Duration) func(t time.Time) time.Duration {
	return func(t time.Time) time.Duration {
		if t.Sub(start) >= at {
			return by
		}
		return 0
	}
}

// loadDuring returns queues of q on one side from from to to.
func loadDuring(start time.Time, from, to time.Duration, dir estimator.Direction, q time.Duration) func(t time.Time) (time.Duration, time.Duration) {
	return func(t time.Time) (time.Duration, time.Duration) {
		if s := t.Sub(start); s < from || s >= to {
			return 0, 0
		}
		if dir == estimator.Up {
			return q, 0
		}
		return 0, q
	}
}

func TestClockStepIsNoDelay(t *testing.T) {
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	const (
		stepAtT = 20*time.Second + 5*time.Millisecond // within a probe's flight
		runFor  = 40 * time.Second
		q       = 40 * time.Millisecond
	)
	none := func(time.Time) time.Duration { return 0 }
	noneOf := func(int, time.Time) time.Duration { return 0 }
	type step struct {
		name string
		by   time.Duration
	}
	steps := []step{
		{"2s forward", 2 * time.Second},
		{"2s back", -2 * time.Second},
		{"12h forward", 12 * time.Hour},
		{"12h back", -12 * time.Hour},
		{"11h59m59.5s forward", 12*time.Hour - 500*time.Millisecond},
		{"1 day and 2s back", -24*time.Hour - 2*time.Second},
	}
	type tc struct {
		name   string
		ours   func(time.Time) time.Duration
		theirs func(int, time.Time) time.Duration
		split  func(int, time.Time) bool
		// load is real delay on one side, from loadFrom to loadTo.
		loadDir          estimator.Direction
		loadFrom, loadTo time.Duration
	}
	var tests []tc
	for _, s := range steps {
		tests = append(tests,
			tc{name: "our clock " + s.name, ours: stepAt(start, stepAtT, s.by), theirs: noneOf,
				loadDir: estimator.Down, loadFrom: 30 * time.Second, loadTo: 32 * time.Second},
			tc{name: "every reflector's clock " + s.name, ours: none,
				theirs:  func(_ int, t time.Time) time.Duration { return stepAt(start, stepAtT, s.by)(t) },
				loadDir: estimator.Up, loadFrom: 30 * time.Second, loadTo: 32 * time.Second},
			tc{name: "one reflector's clock " + s.name, ours: none,
				theirs: func(i int, t time.Time) time.Duration {
					if i == 2 {
						return stepAt(start, stepAtT, s.by)(t)
					}
					return 0
				},
				loadDir: estimator.Down, loadFrom: 30 * time.Second, loadTo: 32 * time.Second},
			// A tick between the halves of a probe after the step: the
			// halves are taken alone, and the next probe settles it.
			tc{name: "our clock " + s.name + ", a pair split by a tick", ours: stepAt(start, stepAtT, s.by), theirs: noneOf,
				split: func(i int, t time.Time) bool {
					return i == 0 && t.Sub(start) >= stepAtT && t.Sub(start) < stepAtT+150*time.Millisecond
				},
				loadDir: estimator.Up, loadFrom: 30 * time.Second, loadTo: 32 * time.Second},
			// The step comes while the download is loaded: the load is
			// still reported after it.
			tc{name: "our clock " + s.name + " under load", ours: stepAt(start, stepAtT, s.by), theirs: noneOf,
				loadDir: estimator.Down, loadFrom: 19 * time.Second, loadTo: 23 * time.Second},
		)
	}
	tests = append(tests, tc{name: "no step", ours: none, theirs: noneOf, loadDir: estimator.Down, loadFrom: 30 * time.Second, loadTo: 32 * time.Second})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := &stepWorld{
				start: start, ours: tt.ours, theirs: tt.theirs, split: tt.split,
				queue: loadDuring(start, tt.loadFrom, tt.loadTo, tt.loadDir, q),
				rng:   rand.New(rand.NewPCG(1, 2)),
			}
			got := w.run(t, runFor)
			// Unloaded, a sample or two over the threshold may slip
			// through (a pair split by a tick); bloat is never reported.
			for _, d := range estimator.Directions {
				if got.over[d] > 2 {
					t.Errorf("%v: %d samples over the threshold without load, want at most 2", d, got.over[d])
				}
				for _, at := range got.bloat[d] {
					if d != tt.loadDir || at < tt.loadFrom || at > tt.loadTo+time.Second {
						t.Errorf("%v reported bloated %v after the start, outside the load on %v from %v to %v", d, at, tt.loadDir, tt.loadFrom, tt.loadTo)
						break
					}
				}
			}
			// The real load is reported, after the step too.
			var after int
			for _, at := range got.bloat[tt.loadDir] {
				if at > stepAtT && at >= tt.loadFrom {
					after++
				}
			}
			if after < 10 {
				t.Errorf("real delay of %v on %v from %v to %v: bloat reported at %d ticks after the step, want most of them (bloat at %v)",
					q, tt.loadDir, tt.loadFrom, tt.loadTo, after, got.bloat[tt.loadDir])
			}
			if got.dropped > 6 {
				t.Errorf("%d answers refused as inconsistent, want only those in flight at the step", got.dropped)
			}
		})
	}
}

// A reply whose up + down does not add up to the round trip timed on the
// monotonic clock is refused: a clock stepped while it was out, or garbage.
func TestConsistent(t *testing.T) {
	const ms = time.Millisecond
	tests := []struct {
		name          string
		up, down, rtt time.Duration
		want          bool
	}{
		{"same clock", 10 * ms, 12 * ms, 22 * ms, true},
		{"offset", 2*time.Hour + 10*ms, -2*time.Hour + 12*ms, 22 * ms, true},
		{"offset across the fold", 12*time.Hour - 5*ms, -12*time.Hour + 30*ms, 22 * ms, true},
		{"resolution", 10 * ms, 10 * ms, 22 * ms, true},
		{"a slow reflector", 10 * ms, 7 * ms, 22 * ms, true},
		{"our clock stepped 2s in flight", 10 * ms, 2*time.Second + 12*ms, 22 * ms, false},
		{"our clock stepped back 12h in flight", 10 * ms, -12*time.Hour + 12*ms, 22 * ms, false},
		{"the reflector's clock stepped between receive and transmit", 10 * ms, 12*ms - time.Second, 22 * ms, false},
		{"garbage", -59338 * time.Second, 3 * time.Hour, 22 * ms, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := consistent(tt.up, tt.down, tt.rtt); got != tt.want {
				t.Errorf("consistent(%v, %v, %v) = %v, want %v", tt.up, tt.down, tt.rtt, got, tt.want)
			}
		})
	}
}
