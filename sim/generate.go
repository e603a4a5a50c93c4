package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A Cellular describes a generated cellular-like capacity in one direction,
// in the Mahimahi form of recorded traces: 1500-byte delivery opportunities
// per millisecond. The capacity's envelope is the product of a slow drift, a
// fast fluctuation, fades and outages, scaled so that its mean over Duration
// is Mean; the opportunities are then drawn in bursts around it.
// docs/frontier.md lists the default profiles' values and what they match.
type Cellular struct {
	// Mean is the mean capacity in bit/s, from 64 kbit/s to 10 Gbit/s.
	Mean float64
	// Duration is the trace's period (the simulator loops it), from 1s to
	// MaxPeriod, in whole milliseconds.
	Duration time.Duration
	// DriftSigma is the standard deviation of the log of the slow drift (the
	// user moving, the cell's load), an Ornstein-Uhlenbeck process with
	// correlation time DriftTime. 0 turns it off; at most 3.
	DriftSigma float64
	DriftTime  time.Duration
	// FastSigma and FastTime are the same for the fast fluctuation (fast
	// fading, the scheduler's share), tens of milliseconds.
	FastSigma float64
	FastTime  time.Duration
	// FadesPerMinute is the mean rate of fades, which start as a Poisson
	// process. A fade lasts an exponential time of mean FadeTime and takes
	// away, at its deepest, a share of the capacity drawn uniformly from
	// [FadeDepth/2, FadeDepth] (FadeDepth in [0, 1]); it deepens and
	// recovers as a raised cosine. Overlapping fades multiply.
	FadesPerMinute float64
	FadeDepth      float64
	FadeTime       time.Duration
	// OutagesPerMinute is the mean rate of outages (no capacity at all),
	// which start as a Poisson process. Their durations are log-normal with
	// mean OutageTime and a log standard deviation of 1, so that a few last
	// many times the mean, as recorded ones do.
	OutagesPerMinute float64
	OutageTime       time.Duration
	// Burst is the mean number of delivery opportunities released together
	// (geometric, at least 1): the clumping of LTE's scheduling. The bursts
	// arrive as a Poisson process that follows the envelope; Burst 1 makes
	// single opportunities a Poisson process. Zero means 1; at most 1000.
	Burst float64
}

// Bounds on generated traces' parameters.
const (
	minGeneratedMean = 64e3
	maxGeneratedMean = 10e9
	maxSigma         = 3
	maxPerMinute     = 600
	maxBurst         = 1000
)

// Validate reports the first parameter of c that cannot work, by name.
func (c Cellular) Validate() error {
	bad := func(field, format string, a ...any) error {
		return fmt.Errorf("invalid cellular trace: %s %s", field, fmt.Sprintf(format, a...))
	}
	// Float checks are written as !(valid) so that NaN fails them too.
	switch {
	case !(c.Mean >= minGeneratedMean && c.Mean <= maxGeneratedMean):
		return bad("Mean", "must be between 64 kbit/s and 10 Gbit/s, got %g bit/s", c.Mean)
	case c.Duration < time.Second || c.Duration > MaxPeriod:
		return bad("Duration", "must be between 1s and %v, got %v", MaxPeriod, c.Duration)
	case c.Duration%time.Millisecond != 0:
		return bad("Duration", "must be whole milliseconds, got %v", c.Duration)
	case !(c.DriftSigma >= 0 && c.DriftSigma <= maxSigma):
		return bad("DriftSigma", "must be in [0, %d], got %g", maxSigma, c.DriftSigma)
	case c.DriftSigma > 0 && c.DriftTime < time.Millisecond:
		return bad("DriftTime", "must be at least 1ms with a drift, got %v", c.DriftTime)
	case !(c.FastSigma >= 0 && c.FastSigma <= maxSigma):
		return bad("FastSigma", "must be in [0, %d], got %g", maxSigma, c.FastSigma)
	case c.FastSigma > 0 && c.FastTime < time.Millisecond:
		return bad("FastTime", "must be at least 1ms with a fast fluctuation, got %v", c.FastTime)
	case !(c.FadesPerMinute >= 0 && c.FadesPerMinute <= maxPerMinute):
		return bad("FadesPerMinute", "must be in [0, %d], got %g", maxPerMinute, c.FadesPerMinute)
	case !(c.FadeDepth >= 0 && c.FadeDepth <= 1):
		return bad("FadeDepth", "must be in [0, 1], got %g", c.FadeDepth)
	case c.FadesPerMinute > 0 && c.FadeTime < time.Millisecond:
		return bad("FadeTime", "must be at least 1ms with fades, got %v", c.FadeTime)
	case !(c.OutagesPerMinute >= 0 && c.OutagesPerMinute <= maxPerMinute):
		return bad("OutagesPerMinute", "must be in [0, %d], got %g", maxPerMinute, c.OutagesPerMinute)
	case c.OutagesPerMinute > 0 && c.OutageTime < time.Millisecond:
		return bad("OutageTime", "must be at least 1ms with outages, got %v", c.OutageTime)
	case !(c.Burst == 0 || c.Burst >= 1 && c.Burst <= maxBurst):
		return bad("Burst", "must be 0 (1) or in [1, %d], got %g", maxBurst, c.Burst)
	}
	return nil
}

// Random streams of a generated trace, one per part, so that changing one
// part's parameters leaves the others' draws as they were.
const (
	streamDrift uint64 = iota + 1
	streamFast
	streamFades
	streamOutages
	streamDelivery
)

// Generate returns the trace c describes, named name; the same seed gives
// the same trace.
func (c Cellular) Generate(name string, seed uint64) (*Trace, error) {
	return c.generate(name, seed, 0)
}

// generate draws c's trace from the streams salted with salt (a profile's
// two directions use different salts).
func (c Cellular) generate(name string, seed, salt uint64) (*Trace, error) {
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	rng := func(stream uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, salt<<8|stream)) }
	n := int(c.Duration.Milliseconds())
	env := make([]float64, n)
	for i := range env {
		env[i] = 1
	}
	ou(env, rng(streamDrift), c.DriftSigma, c.DriftTime)
	ou(env, rng(streamFast), c.FastSigma, c.FastTime)
	if c.FadesPerMinute > 0 {
		r := rng(streamFades)
		for at := r.ExpFloat64() * 60e3 / c.FadesPerMinute; at < float64(n); at += r.ExpFloat64() * 60e3 / c.FadesPerMinute {
			depth := c.FadeDepth * (0.5 + 0.5*r.Float64())
			length := math.Max(r.ExpFloat64()*ms(c.FadeTime), 1)
			for i := int(at); i < min(int(at+length)+1, n); i++ {
				s := math.Sin(math.Pi * (float64(i) - at) / length)
				env[i] *= 1 - depth*s*s
			}
		}
	}
	if c.OutagesPerMinute > 0 {
		r := rng(streamOutages)
		for at := r.ExpFloat64() * 60e3 / c.OutagesPerMinute; at < float64(n); at += r.ExpFloat64() * 60e3 / c.OutagesPerMinute {
			// Log-normal with log sd 1 and the asked mean.
			length := ms(c.OutageTime) * math.Exp(r.NormFloat64()-0.5)
			for i := int(at); i < min(int(at+math.Max(length, 1)), n); i++ {
				env[i] = 0
			}
		}
	}
	sum := 0.0
	for _, v := range env {
		sum += v
	}
	if sum == 0 {
		return nil, fmt.Errorf("%s: the outages leave no capacity at all", name)
	}
	burst := math.Max(c.Burst, 1)
	// Bursts per millisecond where the envelope is 1.
	scale := c.Mean / 8 / PacketBytes / 1000 / burst * float64(n) / sum
	r := rng(streamDelivery)
	cum := make([]int64, n+1)
	// An inhomogeneous Poisson process by its time change: a burst lands
	// where the envelope's running integral passes the next exponential
	// draw.
	next := r.ExpFloat64()
	for i, v := range env {
		var pkts int64
		for next -= v * scale; next <= 0; next += r.ExpFloat64() {
			pkts += geometric(r, burst)
		}
		cum[i+1] = cum[i] + min(pkts, maxOpportunitiesPerMs)*PacketBytes
	}
	if cum[n] == 0 {
		return nil, fmt.Errorf("%s: no delivery opportunity in %v", name, c.Duration)
	}
	return &Trace{Name: name, cum: cum}, nil
}

// ou multiplies env by exp(x) for an Ornstein-Uhlenbeck process x of
// standard deviation sigma and correlation time tau, sampled every ms.
func ou(env []float64, r *rand.Rand, sigma float64, tau time.Duration) {
	if sigma == 0 {
		return
	}
	a := math.Exp(-1 / ms(tau))
	b := sigma * math.Sqrt(1-a*a)
	x := sigma * r.NormFloat64()
	for i := range env {
		env[i] *= math.Exp(x)
		x = a*x + b*r.NormFloat64()
	}
}

// geometric draws from the geometric distribution on 1, 2, … with the given
// mean (at least 1).
func geometric(r *rand.Rand, mean float64) int64 {
	if mean <= 1 {
		return 1
	}
	return 1 + int64(math.Floor(math.Log(1-r.Float64())/math.Log(1-1/mean)))
}

// A Profile is a named generated link: a Cellular per direction.
type Profile struct {
	Name     string
	Down, Up Cellular
	// LTE marks the profiles modelled on LTE links.
	LTE bool
}

// Traces returns p's two directions for seed, named
// "gen:NAME.down#SEED" and "gen:NAME.up#SEED" (which ParseGenerated, and
// so LoadTrace, take back). The directions draw from different streams:
// their fades and outages are independent.
func (p Profile) Traces(seed uint64) (down, up *Trace, err error) {
	if down, err = p.trace("down", seed); err != nil {
		return nil, nil, err
	}
	if up, err = p.trace("up", seed); err != nil {
		return nil, nil, err
	}
	return down, up, nil
}

// trace returns p's direction dir ("down" or "up") for seed.
func (p Profile) trace(dir string, seed uint64) (*Trace, error) {
	name := fmt.Sprintf("%s%s.%s#%d", generatedPrefix, p.Name, dir, seed)
	switch dir {
	case "down":
		return p.Down.generate(name, seed, 1)
	case "up":
		return p.Up.generate(name, seed, 2)
	}
	return nil, fmt.Errorf("direction %q is neither down nor up", dir)
}

// generatedPrefix starts the name of a generated trace.
const generatedPrefix = "gen:"

// ParseGenerated returns the trace that a generated trace's name names:
// "gen:NAME.DIR#SEED", one direction (down or up) of the profile NAME of
// Profiles drawn from SEED, the trace that frontier runs for that seed. So
// the simulator and the lab can replay a generated trace by name.
func ParseGenerated(s string) (*Trace, error) {
	spec, ok := strings.CutPrefix(s, generatedPrefix)
	name, rest, ok2 := strings.Cut(spec, ".")
	dir, seedText, ok3 := strings.Cut(rest, "#")
	if !ok || !ok2 || !ok3 {
		return nil, fmt.Errorf("generated trace %q: want %sNAME.DIR#SEED, as %spoisson.up#1", s, generatedPrefix, generatedPrefix)
	}
	profiles := Profiles()
	i := slices.IndexFunc(profiles, func(p Profile) bool { return p.Name == name })
	if i < 0 {
		var names []string
		for _, p := range profiles {
			names = append(names, p.Name)
		}
		return nil, fmt.Errorf("generated trace %q: no profile %q (profiles: %s)", s, name, strings.Join(names, ", "))
	}
	seed, err := strconv.ParseUint(seedText, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("generated trace %q: seed %q is not a whole number", s, seedText)
	}
	t, err := profiles[i].trace(dir, seed)
	if err != nil {
		return nil, fmt.Errorf("generated trace %q: %w", s, err)
	}
	return t, nil
}

// Profiles returns the default generated set. Their statistics are set near
// those of the recorded traces in ../shared/traces (docs/frontier.md puts
// them side by side):
//   - lte-urban: LTE while moving in a city (as T-Mobile and Verizon
//     LTE-short), moderate drift, few outages;
//   - lte-drive: LTE while driving (as AT&T 2016), deep fast variation and
//     frequent short outages;
//   - lte-fades: a fast LTE link with slow deep fades, the case where a
//     larger budget should buy throughput;
//   - 3g-outages: a slow 3G link with long outages (as Verizon EVDO);
//   - poisson: a constant rate delivered as a Poisson process, no fades.
func Profiles() []Profile {
	const (
		s = time.Second
		m = time.Millisecond
	)
	return []Profile{
		{Name: "lte-urban", LTE: true,
			Down: Cellular{Mean: 12e6, Duration: 120 * s, DriftSigma: 0.55, DriftTime: 8 * s, FastSigma: 0.6, FastTime: 40 * m,
				FadesPerMinute: 4, FadeDepth: 0.8, FadeTime: 1500 * m, OutagesPerMinute: 5, OutageTime: 300 * m, Burst: 3},
			Up: Cellular{Mean: 6e6, Duration: 120 * s, DriftSigma: 0.5, DriftTime: 8 * s, FastSigma: 0.5, FastTime: 40 * m,
				FadesPerMinute: 4, FadeDepth: 0.8, FadeTime: 1500 * m, OutagesPerMinute: 3, OutageTime: 300 * m, Burst: 1.5}},
		{Name: "lte-drive", LTE: true,
			Down: Cellular{Mean: 4.5e6, Duration: 120 * s, DriftSigma: 0.75, DriftTime: 5 * s, FastSigma: 0.8, FastTime: 60 * m,
				FadesPerMinute: 8, FadeDepth: 0.9, FadeTime: time.Second, OutagesPerMinute: 18, OutageTime: 300 * m, Burst: 1.5},
			Up: Cellular{Mean: 2e6, Duration: 120 * s, DriftSigma: 0.7, DriftTime: 5 * s, FastSigma: 0.9, FastTime: 60 * m,
				FadesPerMinute: 8, FadeDepth: 0.9, FadeTime: time.Second, OutagesPerMinute: 20, OutageTime: 350 * m, Burst: 1.4}},
		{Name: "lte-fades", LTE: true,
			Down: Cellular{Mean: 20e6, Duration: 120 * s, DriftSigma: 0.2, DriftTime: 20 * s, FastSigma: 0.3, FastTime: 30 * m,
				FadesPerMinute: 10, FadeDepth: 0.95, FadeTime: 3 * s, OutagesPerMinute: 1, OutageTime: 300 * m, Burst: 4},
			Up: Cellular{Mean: 8e6, Duration: 120 * s, DriftSigma: 0.2, DriftTime: 20 * s, FastSigma: 0.3, FastTime: 30 * m,
				FadesPerMinute: 10, FadeDepth: 0.95, FadeTime: 3 * s, OutagesPerMinute: 1, OutageTime: 300 * m, Burst: 2}},
		{Name: "3g-outages",
			Down: Cellular{Mean: 0.5e6, Duration: 300 * s, DriftSigma: 0.65, DriftTime: 10 * s, FastSigma: 0.6, FastTime: 100 * m,
				FadesPerMinute: 4, FadeDepth: 0.8, FadeTime: 2 * s, OutagesPerMinute: 20, OutageTime: 500 * m, Burst: 1.4},
			Up: Cellular{Mean: 0.85e6, Duration: 300 * s, DriftSigma: 0.2, DriftTime: 10 * s, FastSigma: 0.3, FastTime: 100 * m,
				FadesPerMinute: 2, FadeDepth: 0.6, FadeTime: 2 * s, OutagesPerMinute: 12, OutageTime: 500 * m, Burst: 1.2}},
		{Name: "poisson",
			Down: Cellular{Mean: 10e6, Duration: 120 * s},
			Up:   Cellular{Mean: 3e6, Duration: 120 * s}},
	}
}

// TraceStats are the figures that docs/frontier.md compares between
// recorded and generated traces, over one period of a recorded trace.
type TraceStats struct {
	// MeanMbps is the mean capacity.
	MeanMbps float64 `json:"mean_mbps"`
	// CV1s is the coefficient of variation of the capacity over whole
	// seconds.
	CV1s float64 `json:"cv_1s"`
	// OutageShare is the share of whole 100 ms windows with no capacity.
	OutageShare float64 `json:"outage_share"`
}

// MeasureTrace returns t's statistics over one period; a schedule is
// measured over its default duration.
func MeasureTrace(t *Trace) TraceStats {
	n := t.period()
	if n == 0 {
		n = t.DefaultDuration().Milliseconds()
	}
	var st TraceStats
	st.MeanMbps = float64(t.Cum(n)) * 8 / float64(n) / 1e3
	var sum, sq float64
	secs := n / 1000
	for i := range secs {
		v := float64(t.Bytes(i*1000, 1000))
		sum += v
		sq += v * v
	}
	if secs > 0 && sum > 0 {
		mean := sum / float64(secs)
		st.CV1s = math.Sqrt(math.Max(sq/float64(secs)-mean*mean, 0)) / mean
	}
	windows, empty := n/100, 0
	for i := range windows {
		if t.Bytes(i*100, 100) == 0 {
			empty++
		}
	}
	if windows > 0 {
		st.OutageShare = float64(empty) / float64(windows)
	}
	return st
}
