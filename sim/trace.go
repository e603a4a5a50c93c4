package sim

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/autoshape/autoshape/controller"
)

// PacketBytes is the size of one Mahimahi delivery opportunity.
const PacketBytes = 1500

// Bounds on the traces taken, so that any input, even an endless stream, is
// read in bounded memory and every figure derived from it (bytes
// delivered over the simulator's longest run, 48 h) fits an int64.
const (
	// MaxPeriod is the longest recorded trace: an hour. A trace is held as
	// one int64 per millisecond (29 MB for an hour); the published Mahimahi
	// traces run for 2 to 18 minutes, and the simulator loops a trace.
	MaxPeriod = time.Hour
	// MaxScheduleTime is the latest start of a schedule's step: a day, so
	// that the default run (the last step plus 30 s) stays within the
	// simulator's 48 h.
	MaxScheduleTime = 24 * time.Hour
	// MinScheduleRate is the least rate of a schedule's step other than 0
	// (an outage): 1 kbit/s, a full-size packet every 12 s. Under it the
	// link delivers nothing in any run the simulator makes.
	MinScheduleRate = 1000
	// maxOpportunitiesPerMs is the most delivery opportunities one
	// millisecond may hold: controller.MaxRate (10 Tbit/s).
	maxOpportunitiesPerMs = int64(controller.MaxRate) / 8 / 1000 / PacketBytes
)

// A Trace is a link's capacity over time, at millisecond resolution: either a
// recorded Mahimahi trace (looped at its end, as mm-link does) or a schedule
// of constant rates (the last one holds forever).
type Trace struct {
	Name string
	// Recorded trace: the bytes deliverable in [0, i) of one period for
	// each i from 0 to the period (so cum[i+1]-cum[i] is millisecond i's).
	cum []int64
	// Schedule: rates in bit/s from each step's start, and the bits
	// delivered before each step's start.
	steps  []Step
	before []float64
}

// A Step is one constant-rate stretch of a schedule.
type Step struct {
	At   time.Duration
	Rate float64 // bit/s
}

// LoadTrace reads a Mahimahi trace file, or, when s is not the name of a
// file, draws a generated profile's trace when s names one
// ("gen:poisson.up#1", see ParseGenerated) or parses s as a schedule
// ("20mbit", "40mbit@0s,10mbit@30s").
func LoadTrace(s string) (*Trace, error) {
	f, err := os.Open(s)
	if err == nil {
		defer f.Close()
		return ParseMahimahi(s, f)
	}
	// A name longer than a file's may be (a schedule of many steps) names
	// no file either.
	if !errors.Is(err, os.ErrNotExist) && !errors.Is(err, syscall.ENAMETOOLONG) {
		return nil, fmt.Errorf("trace %q: %w", s, err)
	}
	if strings.HasPrefix(s, generatedPrefix) {
		return ParseGenerated(s)
	}
	t, perr := ParseSchedule(s)
	if perr != nil {
		return nil, fmt.Errorf("%q is neither a trace file (%v) nor a schedule (%v)", s, err, perr)
	}
	return t, nil
}

// ParseMahimahi reads a trace in Mahimahi format: one line per 1500-byte
// delivery opportunity, holding the millisecond at which it occurs, in
// non-decreasing order. The period is the last timestamp, at most
// MaxPeriod; one millisecond holds at most 10 Tbit/s worth of
// opportunities. The lines are not kept: memory grows with the period
// only.
func ParseMahimahi(name string, r io.Reader) (*Trace, error) {
	maxMs := MaxPeriod.Milliseconds()
	// cum[i] is the bytes in [0, i) for i up to the latest timestamp;
	// the last entry is still growing.
	cum := []int64{0, 0}
	sc := bufio.NewScanner(r)
	line := 0
	var last, inLast int64 // the latest timestamp and its opportunities
	n := 0
	for sc.Scan() {
		line++
		txt := strings.TrimSpace(sc.Text())
		if txt == "" || strings.HasPrefix(txt, "#") {
			continue
		}
		v, err := strconv.ParseInt(txt, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("trace %s: line %d: %q is not a whole number of milliseconds", name, line, txt)
		}
		if v < 0 {
			return nil, fmt.Errorf("trace %s: line %d: negative timestamp %d", name, line, v)
		}
		if v < last {
			return nil, fmt.Errorf("trace %s: line %d: timestamp %d is before the previous one (%d)", name, line, v, last)
		}
		if v > maxMs {
			return nil, fmt.Errorf("trace %s: line %d: timestamp %d ms is beyond %d ms (%v), the longest trace taken", name, line, v, maxMs, MaxPeriod)
		}
		if need := int(v) + 2 - len(cum); need > 0 {
			top := cum[len(cum)-1]
			cum = slices.Grow(cum, need)
			for range need {
				cum = append(cum, top)
			}
			last, inLast = v, 0
		}
		if inLast++; inLast > maxOpportunitiesPerMs {
			return nil, fmt.Errorf("trace %s: line %d: more than %d opportunities in millisecond %d: above 10 Tbit/s", name, line, maxOpportunitiesPerMs, v)
		}
		cum[v+1] += PacketBytes
		n++
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("trace %s: %w", name, err)
	}
	if n == 0 {
		return nil, fmt.Errorf("trace %s: no delivery opportunities", name)
	}
	if last == 0 {
		return nil, fmt.Errorf("trace %s: all opportunities at 0 ms: the trace has no duration", name)
	}
	// The opportunities at the last timestamp fall on millisecond 0 of the
	// next period.
	period := last
	atEnd := cum[period+1] - cum[period]
	cum = cum[:period+1]
	for i := int64(1); i <= period; i++ {
		cum[i] += atEnd
	}
	if cum[1] > maxOpportunitiesPerMs*PacketBytes {
		return nil, fmt.Errorf("trace %s: more than %d opportunities in millisecond 0 with those at %d ms, which fall on it: above 10 Tbit/s", name, maxOpportunitiesPerMs, period)
	}
	return &Trace{Name: name, cum: cum}, nil
}

// ParseSchedule parses "20mbit" (constant) or steps such as
// "40mbit@0s,10mbit@30s,40mbit@60s". Steps start at 0s, increase in time up
// to MaxScheduleTime, and the last rate must be positive; rates are 0 or
// from MinScheduleRate to controller.MaxRate.
func ParseSchedule(s string) (*Trace, error) {
	parts := strings.Split(s, ",")
	var steps []Step
	for i, p := range parts {
		p = strings.TrimSpace(p)
		rateStr, atStr, hasAt := strings.Cut(p, "@")
		rate, err := controller.ParseRate(rateStr)
		if err != nil {
			return nil, fmt.Errorf("schedule step %d (%q): %w", i+1, p, err)
		}
		if rate > 0 && rate < MinScheduleRate {
			return nil, fmt.Errorf("schedule step %d (%q): rate %g bit/s is under 1kbit, the least a step may have (0 is an outage)", i+1, p, rate)
		}
		var at time.Duration
		if hasAt {
			at, err = time.ParseDuration(strings.TrimSpace(atStr))
			if err != nil {
				return nil, fmt.Errorf("schedule step %d (%q): invalid time %q: want a duration such as 30s", i+1, p, atStr)
			}
		} else if len(parts) > 1 {
			return nil, fmt.Errorf("schedule step %d (%q): missing @TIME", i+1, p)
		}
		switch {
		case i == 0 && at != 0:
			return nil, fmt.Errorf("schedule step 1 (%q): the first step must start at 0s", p)
		case i > 0 && at <= steps[i-1].At:
			return nil, fmt.Errorf("schedule step %d (%q): time %v is not after the previous step's %v", i+1, p, at, steps[i-1].At)
		case at > MaxScheduleTime:
			return nil, fmt.Errorf("schedule step %d (%q): time %v is beyond %v, the latest step taken", i+1, p, at, MaxScheduleTime)
		}
		steps = append(steps, Step{At: at, Rate: rate})
	}
	if steps[len(steps)-1].Rate <= 0 {
		return nil, fmt.Errorf("schedule %q: the last rate must be positive", s)
	}
	before := make([]float64, len(steps))
	for i := 1; i < len(steps); i++ {
		p := steps[i-1]
		before[i] = before[i-1] + p.Rate*float64(steps[i].At.Milliseconds()-p.At.Milliseconds())/1000
	}
	return &Trace{Name: s, steps: steps, before: before}, nil
}

// IsSchedule reports whether t is a schedule rather than a recorded trace.
func (t *Trace) IsSchedule() bool { return t.steps != nil }

// Steps returns a schedule's steps (nil for a recorded trace).
func (t *Trace) Steps() []Step { return t.steps }

// Period returns a recorded trace's loop length (0 for a schedule).
func (t *Trace) Period() time.Duration { return time.Duration(t.period()) * time.Millisecond }

// period is a recorded trace's loop length in ms.
func (t *Trace) period() int64 {
	if t.cum == nil {
		return 0
	}
	return int64(len(t.cum) - 1)
}

// Cum returns the bytes the link can deliver in [0, ms); 0 for ms <= 0.
func (t *Trace) Cum(ms int64) int64 {
	if ms <= 0 {
		return 0
	}
	if t.steps != nil {
		return int64(t.bits(ms) / 8)
	}
	p := t.period()
	return ms/p*t.cum[p] + t.cum[ms%p]
}

// bits returns a schedule's deliverable bits in [0, ms).
func (t *Trace) bits(ms int64) float64 {
	// The last step that starts before ms.
	i := sort.Search(len(t.steps), func(i int) bool { return t.steps[i].At.Milliseconds() >= ms }) - 1
	if i < 0 {
		return 0
	}
	s := t.steps[i]
	prior := 0.0
	if len(t.before) == len(t.steps) {
		prior = t.before[i]
	} else {
		// A schedule made in this package without ParseSchedule.
		for j := range i {
			prior += t.steps[j].Rate * float64(t.steps[j+1].At.Milliseconds()-t.steps[j].At.Milliseconds()) / 1000
		}
	}
	return prior + s.Rate*float64(ms-s.At.Milliseconds())/1000
}

// At returns the bytes deliverable in millisecond ms.
func (t *Trace) At(ms int64) int64 {
	if t.steps != nil {
		return t.Cum(ms+1) - t.Cum(ms)
	}
	i := ms % t.period()
	return t.cum[i+1] - t.cum[i]
}

// Bytes returns the bytes deliverable in [ms, ms+n).
func (t *Trace) Bytes(ms, n int64) int64 {
	if t.steps != nil {
		return t.Cum(ms+n) - t.Cum(ms)
	}
	p := t.period()
	i := ms % p
	if i+n <= p {
		return t.cum[i+n] - t.cum[i]
	}
	return t.Cum(ms+n) - t.Cum(ms)
}

// RateAt returns the capacity in bit/s averaged over [ms, ms+window).
func (t *Trace) RateAt(ms, window int64) float64 {
	return float64(t.Cum(ms+window)-t.Cum(ms)) * 8 * 1000 / float64(window)
}

// maxWait bounds the search for a delivery time: a link that delivers nothing
// for this long counts as delivering at its end.
const maxWait = 60_000

// Drain returns the time, in milliseconds after the start of millisecond ms,
// at which the link has delivered q more bytes (q > 0), interpolating within
// the millisecond that completes them.
func (t *Trace) Drain(ms int64, q int64) float64 {
	if t.steps == nil {
		// Most waits are short: walk the trace for up to 64 ms before
		// searching.
		p := t.period()
		i := ms % p
		left := q
		for k := int64(0); k < 64; k++ {
			b := t.cum[i+1] - t.cum[i]
			if b >= left {
				return float64(k) + float64(left)/float64(b)
			}
			left -= b
			if i++; i == p {
				i = 0
			}
		}
	}
	base := t.Cum(ms)
	target := base + q
	// Exponential then binary search for the first m with Cum(m+1) >= target.
	lo, hi := ms, ms+1
	for t.Cum(hi) < target {
		lo = hi
		hi = ms + 2*(hi-ms)
		if hi-ms > maxWait {
			if t.Cum(ms+maxWait) < target {
				return maxWait
			}
			hi = ms + maxWait
			break
		}
	}
	// invariant: Cum(lo) < target <= Cum(hi)
	n := sort.Search(int(hi-lo), func(i int) bool { return t.Cum(lo+int64(i)+1) >= target })
	m := lo + int64(n)
	at := t.At(m)
	frac := 1.0
	if at > 0 {
		frac = float64(target-t.Cum(m)) / float64(at)
	}
	return float64(m-ms) + math.Min(frac, 1)
}

// MeanRate returns the mean capacity over [0, d) in bit/s.
func (t *Trace) MeanRate(d time.Duration) float64 {
	ms := d.Milliseconds()
	if ms <= 0 {
		return 0
	}
	return float64(t.Cum(ms)) * 8 * 1000 / float64(ms)
}

// PeakRate returns the highest capacity over any whole second in [0, d), in
// bit/s.
func (t *Trace) PeakRate(d time.Duration) float64 {
	peak := 0.0
	for ms := int64(0); ms+1000 <= d.Milliseconds() || ms == 0; ms += 100 {
		if r := t.RateAt(ms, 1000); r > peak {
			peak = r
		}
		if ms+1000 > d.Milliseconds() {
			break
		}
	}
	return peak
}

// DefaultDuration is a recorded trace's period, or for a schedule its last
// step plus 30 seconds (60 seconds for a constant rate).
func (t *Trace) DefaultDuration() time.Duration {
	if t.steps == nil {
		return t.Period()
	}
	if len(t.steps) == 1 {
		return 60 * time.Second
	}
	return t.steps[len(t.steps)-1].At + 30*time.Second
}

// RiseFactor is the least factor by which a schedule's rate must grow for
// Rises to count the step.
const RiseFactor = 1.5

// Rises returns the instants at which a schedule's rate grows by RiseFactor
// or more.
func (t *Trace) Rises() []time.Duration {
	var out []time.Duration
	for i := 1; i < len(t.steps); i++ {
		if t.steps[i].Rate >= RiseFactor*t.steps[i-1].Rate {
			out = append(out, t.steps[i].At)
		}
	}
	return out
}

// Drops returns the instants at which a schedule's rate falls.
func (t *Trace) Drops() []time.Duration {
	var out []time.Duration
	for i := 1; i < len(t.steps); i++ {
		if t.steps[i].Rate < t.steps[i-1].Rate {
			out = append(out, t.steps[i].At)
		}
	}
	return out
}
