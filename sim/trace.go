package sim

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/autoshape/autoshape/actuator"
)

// PacketBytes is the size of one Mahimahi delivery opportunity.
const PacketBytes = 1500

// A Trace is a link's capacity over time, at millisecond resolution: either a
// recorded Mahimahi trace (looped at its end, as mm-link does) or a schedule
// of constant rates (the last one holds forever).
type Trace struct {
	Name string
	// Recorded trace: bytes deliverable in each millisecond of one period, and
	// their running sum (cum[i] = bytes in [0, i)).
	bytes []int32
	cum   []int64
	// Schedule: rates in bit/s from each step's start.
	steps []Step
}

// A Step is one constant-rate stretch of a schedule.
type Step struct {
	At   time.Duration
	Rate float64 // bit/s
}

// LoadTrace reads a Mahimahi trace file, or parses s as a schedule when it is
// not the name of a file and looks like one ("20mbit",
// "40mbit@0s,10mbit@30s").
func LoadTrace(s string) (*Trace, error) {
	f, err := os.Open(s)
	if err == nil {
		defer f.Close()
		return ParseMahimahi(s, f)
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("trace %q: %w", s, err)
	}
	t, perr := ParseSchedule(s)
	if perr != nil {
		return nil, fmt.Errorf("%q is neither a trace file (%v) nor a schedule (%v)", s, err, perr)
	}
	return t, nil
}

// ParseMahimahi reads a trace in Mahimahi format: one line per 1500-byte
// delivery opportunity, holding the millisecond at which it occurs, in
// non-decreasing order. The period is the last timestamp.
func ParseMahimahi(name string, r io.Reader) (*Trace, error) {
	var stamps []int64
	sc := bufio.NewScanner(r)
	line := 0
	var last int64
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
		if v > 24*3600*1000 {
			return nil, fmt.Errorf("trace %s: line %d: timestamp %d is longer than a day", name, line, v)
		}
		last = v
		stamps = append(stamps, v)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("trace %s: %w", name, err)
	}
	if len(stamps) == 0 {
		return nil, fmt.Errorf("trace %s: no delivery opportunities", name)
	}
	if last == 0 {
		return nil, fmt.Errorf("trace %s: all opportunities at 0 ms: the trace has no duration", name)
	}
	period := last
	b := make([]int32, period)
	for _, v := range stamps {
		b[v%period] += PacketBytes
	}
	cum := make([]int64, period+1)
	for i, x := range b {
		cum[i+1] = cum[i] + int64(x)
	}
	return &Trace{Name: name, bytes: b, cum: cum}, nil
}

// ParseSchedule parses "20mbit" (constant) or steps such as
// "40mbit@0s,10mbit@30s,40mbit@60s". Steps start at 0s, increase in time, and
// the last rate must be positive.
func ParseSchedule(s string) (*Trace, error) {
	parts := strings.Split(s, ",")
	var steps []Step
	for i, p := range parts {
		p = strings.TrimSpace(p)
		rateStr, atStr, hasAt := strings.Cut(p, "@")
		rate, err := actuator.ParseRate(rateStr)
		if err != nil {
			return nil, fmt.Errorf("schedule step %d (%q): %w", i+1, p, err)
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
		}
		steps = append(steps, Step{At: at, Rate: rate})
	}
	if steps[len(steps)-1].Rate <= 0 {
		return nil, fmt.Errorf("schedule %q: the last rate must be positive", s)
	}
	return &Trace{Name: s, steps: steps}, nil
}

// IsSchedule reports whether t is a schedule rather than a recorded trace.
func (t *Trace) IsSchedule() bool { return t.steps != nil }

// Steps returns a schedule's steps (nil for a recorded trace).
func (t *Trace) Steps() []Step { return t.steps }

// Period returns a recorded trace's loop length (0 for a schedule).
func (t *Trace) Period() time.Duration { return time.Duration(len(t.bytes)) * time.Millisecond }

// Cum returns the bytes the link can deliver in [0, ms).
func (t *Trace) Cum(ms int64) int64 {
	if t.steps != nil {
		return int64(t.bits(ms) / 8)
	}
	p := int64(len(t.bytes))
	return ms/p*t.cum[p] + t.cum[ms%p]
}

// bits returns a schedule's deliverable bits in [0, ms).
func (t *Trace) bits(ms int64) float64 {
	total := 0.0
	for i, s := range t.steps {
		start := s.At.Milliseconds()
		if ms <= start {
			break
		}
		end := ms
		if i+1 < len(t.steps) {
			if n := t.steps[i+1].At.Milliseconds(); n < end {
				end = n
			}
		}
		total += s.Rate * float64(end-start) / 1000
	}
	return total
}

// At returns the bytes deliverable in millisecond ms.
func (t *Trace) At(ms int64) int64 {
	if t.steps != nil {
		return t.Cum(ms+1) - t.Cum(ms)
	}
	return int64(t.bytes[ms%int64(len(t.bytes))])
}

// Bytes returns the bytes deliverable in [ms, ms+n).
func (t *Trace) Bytes(ms, n int64) int64 {
	if t.steps != nil {
		return t.Cum(ms+n) - t.Cum(ms)
	}
	p := int64(len(t.bytes))
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
		p := int64(len(t.bytes))
		i := ms % p
		left := q
		for k := int64(0); k < 64; k++ {
			b := int64(t.bytes[i])
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
