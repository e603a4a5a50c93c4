// Package sim is a deterministic, trace-driven model of one link in both
// directions, for scoring rate-control schemes offline in seconds.
//
// Each direction has greedy TCP senders (CUBIC or Reno windows reacting to
// loss one round trip late), a bloated bottleneck (a FIFO whose capacity
// follows a Mahimahi trace or a schedule, with tail drop at a deep buffer) and
// the router's shaper (flow-fair queues under CoDel, so that probes do not wait
// behind bulk data, as with CAKE). Download crosses the bottleneck first and
// the shaper on the router's ingress second; upload the other way round. Acks
// cross the reverse direction's queues. On download, CAKE's autorate-ingress
// capacity estimator watches the packet trains leaving the bottleneck.
//
// The controller under test is the real one (package controller) with a fake
// clock: its probes are answered with the delays the model's queues give, per
// reflector base delay and jitter, and optional loss; an answer later than
// the daemon's probe deadline is lost, as the daemon counts it. An
// independent probe, which the controller never sees, scores the run every
// 10 ms.
package sim

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"time"

	"github.com/autoshape/autoshape/controller"
	"github.com/autoshape/autoshape/estimator"
	"github.com/autoshape/autoshape/policies"
	"github.com/autoshape/autoshape/probe"
)

// Config describes one simulated link and its load.
type Config struct {
	// Down and Up are the capacities. A nil direction carries no load (and
	// runs at a constant capacity so that probes still cross it).
	Down, Up *Trace
	// Duration of the run; 0 takes the longer trace's default duration.
	Duration time.Duration
	// Seed makes jitter, reflector delays and probe loss repeatable.
	Seed uint64
	// Budget is the latency budget that scores the run and configures the
	// controller; default estimator.DefaultBudget.
	Budget time.Duration
	// Flows is the number of greedy TCP flows per loaded direction, default 4.
	Flows int
	// Reno uses Reno windows instead of CUBIC.
	Reno bool
	// BaseRTT is the round trip time with empty queues, default 40ms.
	BaseRTT time.Duration
	// Buffer is the bottleneck's buffer as time at the trace's mean rate,
	// default 500ms.
	Buffer time.Duration
	// SenderBytesPerMs is the senders' line rate, default 125000 (1 Gbit/s).
	SenderBytesPerMs int64
	// Reflectors answer the controller's probes, default 6; ProbeRate is the
	// total answers per second, default the daemon's (40); ProbeLoss the
	// chance that a probe goes unanswered (besides those whose answer would
	// come later than the daemon's probe deadline); ReflectorSpread the
	// largest extra base delay of a reflector, default 20ms; Jitter the mean
	// of the exponential jitter added each way, default 1ms.
	Reflectors      int
	ProbeRate       float64
	ProbeLoss       float64
	ReflectorSpread time.Duration
	Jitter          time.Duration
	// Echo makes the probes ICMP echo (RTT only) instead of ICMP timestamps
	// (one-way delays at 1 ms resolution).
	Echo bool
	// NoCapacityEstimate hides CAKE's download capacity estimate from the
	// controller (as with the HTB backend).
	NoCapacityEstimate bool
	// Series records per-direction time series at 100 ms resolution in
	// each Result.
	Series bool
	// Bounds override the rate bounds DefaultBounds derives from the trace,
	// per direction (nil: derive).
	Bounds [2]*policies.Bounds
	// Tick is the controller's tick, default controller.DefaultTick.
	Tick time.Duration

	// CapacityEstimate is set from NoCapacityEstimate by Run.
	CapacityEstimate bool
}

func (c Config) withDefaults() Config {
	if c.Budget == 0 {
		c.Budget = estimator.DefaultBudget
	}
	if c.Flows == 0 {
		c.Flows = 4
	}
	if c.BaseRTT == 0 {
		c.BaseRTT = 40 * time.Millisecond
	}
	if c.Buffer == 0 {
		c.Buffer = 500 * time.Millisecond
	}
	if c.SenderBytesPerMs == 0 {
		c.SenderBytesPerMs = 125000
	}
	if c.Reflectors == 0 {
		c.Reflectors = 6
	}
	if c.ProbeRate == 0 {
		c.ProbeRate = probe.DefaultPoolRate
	}
	if c.ReflectorSpread == 0 {
		c.ReflectorSpread = 20 * time.Millisecond
	}
	if c.Jitter == 0 {
		c.Jitter = time.Millisecond
	}
	if c.Tick == 0 {
		c.Tick = controller.DefaultTick
	}
	if c.Duration == 0 {
		for _, t := range []*Trace{c.Down, c.Up} {
			if t != nil && t.DefaultDuration() > c.Duration {
				c.Duration = t.DefaultDuration()
			}
		}
	}
	c.CapacityEstimate = !c.NoCapacityEstimate
	return c
}

// Validate reports the first problem with c.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Down == nil && c.Up == nil:
		return fmt.Errorf("no trace for either direction")
	case c.Duration < time.Second:
		return fmt.Errorf("duration %v is shorter than 1s", c.Duration)
	case c.Duration > 48*time.Hour:
		return fmt.Errorf("duration %v is longer than 48h", c.Duration)
	case c.Budget < 0:
		return fmt.Errorf("budget %v is negative", c.Budget)
	case c.Flows < 1 || c.Flows > 64:
		return fmt.Errorf("flows %d must be between 1 and 64", c.Flows)
	case c.BaseRTT < 0 || c.BaseRTT > 2*time.Second:
		return fmt.Errorf("base RTT %v must be between 0 and 2s", c.BaseRTT)
	case c.Buffer <= 0:
		return fmt.Errorf("buffer %v must be positive", c.Buffer)
	case c.Reflectors < 1:
		return fmt.Errorf("reflectors %d must be at least 1", c.Reflectors)
	case c.ProbeRate <= 0 || c.ProbeRate > 1000:
		return fmt.Errorf("probe rate %g must be in (0, 1000] per second", c.ProbeRate)
	case c.ProbeLoss < 0 || c.ProbeLoss > 1:
		return fmt.Errorf("probe loss %g must be in [0, 1]", c.ProbeLoss)
	case c.Tick < time.Millisecond:
		return fmt.Errorf("tick %v is shorter than 1ms", c.Tick)
	}
	for _, d := range estimator.Directions {
		if b := c.Bounds[d]; b != nil {
			if err := controller.ValidateBounds(*b); err != nil {
				return fmt.Errorf("%s bounds: %w", d, err)
			}
		}
	}
	return nil
}

// A Scheme is one way of setting the shaper, scored side by side with others.
type Scheme struct {
	Name string
	// Policy builds the controller's policy for one direction; nil runs no
	// controller.
	Policy func(d estimator.Direction, b policies.Bounds, mean float64) (policies.Policy, error)
	// Oracle, when set, runs no controller: the simulator sets the shaper
	// from its own knowledge of the link.
	Oracle *Oracle
	// AutorateIngress runs no controller: CAKE's autorate-ingress alone.
	// The download shaper starts at the base rate and, as sch_cake.c does,
	// sets itself to 15/16 of its capacity estimate whenever a packet train
	// ends; the upload stays at its base rate.
	AutorateIngress bool
	// Controller tunes the controller; its Directions are filled in by Run.
	Controller controller.Config
	// Estimator tunes the estimator; Budget is taken from the run when zero.
	Estimator estimator.Config
}

// An Oracle sets the shaper every 10 ms from the link's true capacity: a
// Fraction of the capacity over Window, less the bottleneck's queue over
// Drain when Drain > 0, never under a tenth of the mean (as a user's
// minimum). With Lag 0 it sees the coming Window: what foresight could do.
// With Lag > 0 it sees the Window that ended Lag ago and the queue as it
// stood then: perfect knowledge, late, as a controller measuring the link
// has it at best.
type Oracle struct {
	Fraction           float64
	Window, Lag, Drain time.Duration
}

// rate is the oracle's shaper rate at now (ms) on trace tr, with the
// bottleneck's queue in bytes at each past score (every scoreEvery ms, the
// latest last).
func (o *Oracle) rate(tr *Trace, now int64, queue []int64, mean float64) float64 {
	win := max(o.Window.Milliseconds(), 1)
	from := now
	if lag := o.Lag.Milliseconds(); lag > 0 {
		from = max(now-lag-win, 0)
	}
	r := o.Fraction * tr.RateAt(from, win)
	if o.Drain > 0 && len(queue) > 0 {
		q := queue[max(len(queue)-1-int(o.Lag.Milliseconds()/scoreEvery), 0)]
		r -= float64(q) * 8 / o.Drain.Seconds()
	}
	return math.Max(r, 0.1*mean)
}

// Delay holds percentiles of added delay in milliseconds.
type Delay struct {
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
	P99 float64 `json:"p99"`
}

// A Delivery checks an emulated line against its own rate: a line that
// holds a queue sends at its rate, and one that sends less (a kernel short
// of CPU to forward it) puts a queue in front of every scheme that is no
// scheme's doing.
type Delivery struct {
	// QueuedS is the time, in seconds, in which the line held a queue from
	// one look to the next.
	QueuedS float64 `json:"queued_s"`
	// Share is what it sent in that time over what its rate allowed.
	Share float64 `json:"share"`
	// ShortS is the part of QueuedS in looks that sent under ShortShare
	// of the rate.
	ShortS float64 `json:"short_s"`
}

// ShortShare is the share of its rate under which a line that held a queue
// through a look counts as short in it.
const ShortShare = 0.9

// A Result scores one scheme in one direction.
type Result struct {
	Scheme       string  `json:"scheme"`
	Direction    string  `json:"direction"`
	CapacityMbps float64 `json:"capacity_mbps"`
	GoodputMbps  float64 `json:"goodput_mbps"`
	Utilization  float64 `json:"utilization"`
	// Delay is the added one-way delay the independent probe saw while the
	// direction was loaded: its wait minus an empty queue's wait.
	Delay      Delay   `json:"delay_ms"`
	OverBudget float64 `json:"over_budget_fraction"`
	// ReactionS is, for schedules with a capacity drop, the longest time from a
	// drop until the added delay is back under the budget and stays there for
	// 2 s; Reactions lists each drop's.
	ReactionS *float64  `json:"reaction_s,omitempty"`
	Reactions []float64 `json:"reactions_s,omitempty"`
	// WorstDelayMs is the largest added delay after each drop.
	WorstDelayMs []float64 `json:"worst_delay_ms,omitempty"`
	// RecoveryS is, for schedules whose capacity rises by RiseFactor or
	// more, the longest time from a rise until the goodput, averaged over
	// RecoveryWindow, first reaches RecoveryShare of the new capacity: the
	// end of the first such window (of whole 100 ms intervals after the
	// rise), or the next change of the schedule (or the run's end) when none
	// does. Recoveries lists each rise's; RiseWorstDelayMs the largest added
	// delay from each rise until the next change.
	RecoveryS        *float64  `json:"recovery_s,omitempty"`
	Recoveries       []float64 `json:"recoveries_s,omitempty"`
	RiseWorstDelayMs []float64 `json:"rise_worst_delay_ms,omitempty"`
	// SteadyDelay is the added delay outside the reaction windows (from each
	// drop until its reaction ends), when there are drops.
	SteadyDelay *Delay `json:"steady_delay_ms,omitempty"`
	// MeanRateMbps is the shaper's mean rate (0 when unshaped).
	MeanRateMbps float64 `json:"mean_rate_mbps"`
	RateChanges  int     `json:"rate_changes"`
	Drops        int64   `json:"drops_bytes"`
	// Bottleneck is, in the lab, what the emulated line delivered while it
	// held a queue; nil in the simulator, whose line always delivers its
	// capacity.
	Bottleneck *Delivery `json:"bottleneck,omitempty"`
	// Series is there when Config.Series asked for it.
	Series *Series `json:"series,omitempty"`
}

// A Series is one direction's run at 100 ms resolution: the time at the end
// of each interval, the link's capacity over it, the shaper's rate at its
// end (0 when unshaped), the goodput delivered in it, the independent
// probe's mean added delay over it, and on download CAKE's capacity
// estimate at its end.
type Series struct {
	T                []float64 `json:"t_s"`
	Capacity         []float64 `json:"capacity_mbps"`
	Rate             []float64 `json:"rate_mbps"`
	Goodput          []float64 `json:"goodput_mbps"`
	Delay            []float64 `json:"delay_ms"`
	CapacityEstimate []float64 `json:"capacity_estimate_mbps,omitempty"`
}

// DelayIn is the percentiles of the series' delay over the intervals that
// end after from and by to (seconds from the start): how a phase of a run
// went, such as the steady minutes after a recovery, where the run's own
// percentiles mix every phase. The points are 100 ms means, so a tooth
// shorter than that shows lower than the independent probe saw it. False
// when no interval falls in the window.
func (s *Series) DelayIn(from, to float64) (Delay, bool) {
	var v []float32
	for i, t := range s.T {
		if inWindow(t, from, to) && i < len(s.Delay) {
			v = append(v, float32(s.Delay[i]))
		}
	}
	d, _ := delayStats(v, math.Inf(1))
	return d, len(v) > 0
}

// UtilisationIn is the goodput over the intervals that end after from and
// by to (seconds from the start), as a share of the capacity over them: a
// phase's utilisation, such as the steady minutes after a recovery, whose
// level a recovery to a share of the capacity is measured against. False
// when no interval with capacity falls in the window.
func (s *Series) UtilisationIn(from, to float64) (float64, bool) {
	var good, capacity float64
	for i, t := range s.T {
		if inWindow(t, from, to) && i < len(s.Goodput) && i < len(s.Capacity) {
			good += s.Goodput[i]
			capacity += s.Capacity[i]
		}
	}
	if capacity <= 0 {
		return 0, false
	}
	return good / capacity, true
}

// inWindow reports whether the series' interval ending at t (seconds from
// the start) falls in the window from-to: it ends after from and by to.
func inWindow(t, from, to float64) bool { return t > from && t <= to }

// seriesEvery is the series' resolution, ms.
const seriesEvery = 100

// Model is one run in progress. Use Run.
type Model struct {
	cfg   Config
	paths [2]*path
	rng   *rand.Rand
}

// scoreEvery is the independent probe's interval, ms.
const scoreEvery = 10

// runStart is the controller's time at a run's first millisecond.
var runStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// at is the controller's time t ms into a run.
func at(t float64) time.Time { return runStart.Add(time.Duration(t * float64(time.Millisecond))) }

// Run simulates cfg under scheme and returns one Result per loaded direction.
func Run(cfg Config, scheme Scheme) ([]Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r, err := newReplay(cfg.withDefaults(), scheme)
	if err != nil {
		return nil, err
	}
	for now := int64(0); now < r.cfg.Duration.Milliseconds(); now += stepMs {
		if err := r.step(now); err != nil {
			return nil, err
		}
	}
	return r.results(), nil
}

// A replay is one Run in progress: the link model, the scheme's controller
// (nil when the scheme has none), the probes in flight and the scores so far.
type replay struct {
	cfg    Config
	scheme Scheme
	m      *Model
	traces [2]*Trace  // nil for an unloaded direction
	means  [2]float64 // each direction's mean capacity, bit/s
	ctrl   *controller.Controller

	// The controller's probes: the reflectors, the interval and the next
	// send (ms), and the answers not yet arrived, in arrival order.
	refl       []reflector
	probeEvery float64
	nextProbe  float64
	probeIdx   int
	pending    []pendingSample

	scores        [2][]float32 // the independent probe's added delays, ms
	goodput       [2][]float64 // Mbit/s delivered in each seriesEvery
	series        [2]*Series
	lastDelivered [2]int64
	rateSum       [2]float64
	rateN         [2]int
	changes       [2]int
	queues        [2][]int64 // the oracle's view of the bottleneck's queue
	trains        int        // packet trains CAKE's estimator has closed
}

// newReplay wires a run: the link, the scheme's controller or CAKE's
// autorate-ingress, the reflectors and the score buffers.
func newReplay(cfg Config, scheme Scheme) (*replay, error) {
	r := &replay{cfg: cfg, scheme: scheme, traces: [2]*Trace{cfg.Down, cfg.Up}}
	r.m, r.means = newModel(cfg, r.traces)
	if scheme.Policy != nil {
		if err := r.wireController(); err != nil {
			return nil, err
		}
	}
	if scheme.AutorateIngress {
		for _, d := range estimator.Directions {
			if r.traces[d] != nil {
				r.m.paths[d].startAutorate(r.bounds(d).Base)
			}
		}
	}
	r.refl = r.m.reflectors()
	r.probeEvery = 1000 / cfg.ProbeRate
	for _, d := range estimator.Directions {
		if r.traces[d] == nil {
			continue
		}
		r.scores[d] = make([]float32, 0, cfg.Duration.Milliseconds()/scoreEvery+1)
		if cfg.Series {
			r.series[d] = &Series{}
		}
	}
	return r, nil
}

// newModel builds the link's paths and returns them with each direction's
// mean capacity. A direction without a trace carries no senders and runs at
// a constant capacity, so that probes still cross it.
func newModel(cfg Config, traces [2]*Trace) (*Model, [2]float64) {
	m := &Model{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 0x5eed))}
	var means [2]float64
	for _, d := range estimator.Directions {
		if traces[d] != nil {
			means[d] = traces[d].MeanRate(cfg.Duration)
		}
	}
	for _, d := range estimator.Directions {
		tr := traces[d]
		flows := cfg.Flows
		if tr == nil {
			r := math.Max(10e6, means[d.Other()])
			tr = &Trace{Name: "unloaded", steps: []Step{{Rate: r}}}
			means[d] = r
			flows = 0
		}
		limit := int64(means[d] / 8 * cfg.Buffer.Seconds())
		mc := m.cfg
		mc.Flows = flows
		p := newPath(&Model{cfg: mc}, d, tr, max(limit, 4*PacketBytes))
		p.m = m
		m.paths[d] = p
	}
	for _, d := range estimator.Directions {
		if traces[d] == nil {
			m.paths[d].flows = nil
			m.paths[d].fq = nil
		}
	}
	return m, means
}

// wireController builds the scheme's controller over a simShaper per loaded
// direction, each starting at its base rate with autorate-ingress on.
func (r *replay) wireController() error {
	ec := r.scheme.Estimator
	if ec.Budget == 0 {
		ec.Budget = r.cfg.Budget
	}
	est, err := estimator.New(ec)
	if err != nil {
		return err
	}
	cc := r.scheme.Controller
	cc.Tick = r.cfg.Tick
	var shs [2]controller.Shaper
	var pols [2]policies.Policy
	for _, d := range estimator.Directions {
		if r.traces[d] == nil {
			continue
		}
		b := r.bounds(d)
		cc.Directions[d].Bounds = b
		if pols[d], err = r.scheme.Policy(d, b, r.means[d]); err != nil {
			return err
		}
		shs[d] = &simShaper{p: r.m.paths[d]}
		r.m.paths[d].startAutorate(b.Base)
	}
	r.ctrl, err = controller.New(cc, est, shs, pols, &probeSwitch{})
	return err
}

// bounds are d's rate bounds: the run's own, or DefaultBounds of its trace.
func (r *replay) bounds(d estimator.Direction) policies.Bounds {
	if b := r.cfg.Bounds[d]; b != nil {
		return *b
	}
	return DefaultBounds(r.traces[d], r.cfg.Duration)
}

// startAutorate sets p's shaper to base with CAKE's autorate-ingress on and
// its estimate starting from base.
func (p *path) startAutorate(base float64) {
	p.setRate(base)
	p.cake.peak = base / 8
	p.autorate = true
}

// step advances the run by one model step at now (ms): the oracle, both
// paths, autorate-ingress, the controller's probes and tick, and the score.
func (r *replay) step(now int64) error {
	scoring := now%scoreEvery < stepMs
	if scoring {
		for _, p := range r.m.paths {
			p.wait, p.empty = p.fifoWait(now)
		}
		if r.scheme.Oracle != nil {
			r.followOracle(now)
		}
	}
	down, up := r.m.paths[estimator.Down], r.m.paths[estimator.Up]
	down.step(now, up.wait+up.sparseWait())
	up.step(now, down.wait+down.sparseWait()+down.empty)
	if down.autorate && r.traces[estimator.Down] != nil && down.cake.trains != r.trains {
		// CAKE's autorate-ingress owns the rate: alone, or handed to it by
		// the controller (see simShaper.Yield).
		r.trains = down.cake.trains
		down.setRate(down.cake.bps() * 15 / 16)
	}
	if r.ctrl != nil {
		r.sendProbe(now)
		r.deliver(now)
		if now%r.cfg.Tick.Milliseconds() < stepMs {
			decs, err := r.ctrl.Tick(context.Background(), at(float64(now)))
			if err != nil {
				return err
			}
			for _, dec := range decs {
				r.changes[dec.Direction]++
			}
		}
	}
	if scoring {
		r.score(now)
	}
	return nil
}

// followOracle keeps the bottleneck's queue as far back as the oracle's lag
// and sets each loaded direction's shaper to the oracle's rate.
func (r *replay) followOracle(now int64) {
	o := r.scheme.Oracle
	keep := int(o.Lag.Milliseconds()/scoreEvery) + 1
	for _, d := range estimator.Directions {
		if r.traces[d] == nil {
			continue
		}
		r.queues[d] = append(r.queues[d], r.m.paths[d].bqBytes)
		if len(r.queues[d]) > 2*keep {
			r.queues[d] = append(r.queues[d][:0], r.queues[d][len(r.queues[d])-keep:]...)
		}
		r.m.paths[d].setRate(o.rate(r.traces[d], now, r.queues[d], r.means[d]))
	}
}

// probeDeadline is how long, in ms, an answer may take before the daemon's
// probe pool counts its probe as lost (its default Deadline): a later answer
// never reaches the estimator.
const probeDeadline = float64(probe.DefaultPoolDeadline / time.Millisecond)

// sendProbe sends the controller's next probe when one is due and the
// controller is not idle, and queues its answers with the delays the
// model's queues, the reflector and jitter give, unless the probe is lost.
func (r *replay) sendProbe(now int64) {
	if r.ctrl.State() == controller.Idle {
		r.nextProbe = float64(now) + r.probeEvery
		return
	}
	if float64(now) < r.nextProbe {
		return
	}
	rf := r.refl[r.probeIdx%len(r.refl)]
	r.probeIdx++
	r.nextProbe += r.probeEvery
	if !(r.m.rng.Float64() >= r.cfg.ProbeLoss) {
		return
	}
	down, up := r.m.paths[estimator.Down], r.m.paths[estimator.Up]
	half := float64(r.cfg.BaseRTT.Milliseconds()) / 2
	upD := half + rf.extra/2 + up.sparseWait() + up.wait + up.empty + r.m.jitter()
	downD := half + rf.extra/2 + down.wait + down.empty + down.sparseWait() + r.m.jitter()
	rtt := upD + downD
	if rtt > probeDeadline {
		return // the daemon's probe pool counts it lost (PoolConfig.Deadline)
	}
	sent := float64(now)
	arrive := sent + rtt
	if r.cfg.Echo {
		r.pending = insertSample(r.pending, pendingSample{arrive, estimator.Sample{Reflector: rf.name, Kind: estimator.RTT, Sent: at(sent), Delay: msDur(rtt)}})
		return
	}
	// ICMP timestamps: whole milliseconds of two clocks.
	tx := math.Floor(sent + upD + rf.offset)
	r.pending = insertSample(r.pending, pendingSample{arrive, estimator.Sample{Reflector: rf.name, Kind: estimator.OWDUp, Sent: at(sent), Delay: msDur(tx - sent)}})
	r.pending = insertSample(r.pending, pendingSample{arrive, estimator.Sample{Reflector: rf.name, Kind: estimator.OWDDown, Sent: at(sent), Delay: msDur(math.Floor(arrive) - tx)}})
}

// deliver hands the controller the answers that have arrived by now.
func (r *replay) deliver(now int64) {
	n := 0
	for n < len(r.pending) && r.pending[n].arrive <= float64(now) {
		r.ctrl.AddSample(r.pending[n].s)
		n++
	}
	r.pending = append(r.pending[:0], r.pending[n:]...)
}

// score records each loaded direction's added delay as the independent
// probe sees it and its shaper's rate, and its series point when one ends.
func (r *replay) score(now int64) {
	for _, d := range estimator.Directions {
		if r.traces[d] == nil {
			continue
		}
		p := r.m.paths[d]
		r.scores[d] = append(r.scores[d], float32(p.wait+p.sparseWait()))
		if p.rate > 0 {
			r.rateSum[d] += p.rate
			r.rateN[d]++
		}
		if now%seriesEvery < stepMs && now >= seriesEvery {
			good := float64(p.delivered-r.lastDelivered[d]) * 8 / seriesEvery / 1e3
			r.goodput[d] = append(r.goodput[d], good)
			if r.series[d] != nil {
				r.addSeries(d, now, good)
			}
			r.lastDelivered[d] = p.delivered
		}
	}
}

// addSeries appends d's point for the seriesEvery that ends at now, in which
// good Mbit/s got through.
func (r *replay) addSeries(d estimator.Direction, now int64, good float64) {
	sr, p := r.series[d], r.m.paths[d]
	end := now - now%seriesEvery
	n := int(seriesEvery / scoreEvery)
	recent := r.scores[d][max(len(r.scores[d])-n, 0):]
	sum := 0.0
	for _, v := range recent {
		sum += float64(v)
	}
	sr.T = append(sr.T, float64(end)/1000)
	sr.Capacity = append(sr.Capacity, round3(r.traces[d].RateAt(end-seriesEvery, seriesEvery)/1e6))
	sr.Rate = append(sr.Rate, round3(p.rate/1e6))
	sr.Goodput = append(sr.Goodput, round3(good))
	sr.Delay = append(sr.Delay, round3(sum/float64(max(len(recent), 1))))
	if d == estimator.Down && r.cfg.CapacityEstimate && p.rate > 0 {
		sr.CapacityEstimate = append(sr.CapacityEstimate, round3(p.cake.bps()/1e6))
	}
}

// results scores each loaded direction of the finished run.
func (r *replay) results() []Result {
	cfg, scheme := r.cfg, r.scheme
	var out []Result
	for _, d := range estimator.Directions {
		if r.traces[d] == nil {
			continue
		}
		p := r.m.paths[d]
		capBits := float64(r.traces[d].Cum(cfg.Duration.Milliseconds())) * 8
		res := Result{
			Scheme:       scheme.Name,
			Direction:    d.String(),
			CapacityMbps: capBits / cfg.Duration.Seconds() / 1e6,
			GoodputMbps:  float64(p.delivered) * 8 / cfg.Duration.Seconds() / 1e6,
			RateChanges:  r.changes[d],
			Drops:        p.drops,
		}
		if capBits > 0 {
			res.Utilization = float64(p.delivered) * 8 / capBits
		}
		if r.rateN[d] > 0 {
			res.MeanRateMbps = r.rateSum[d] / float64(r.rateN[d]) / 1e6
		}
		res.Series = r.series[d]
		shaped := scheme.Policy != nil || scheme.Oracle != nil || scheme.AutorateIngress
		ScoreDelays(&res, r.scores[d], scoreEvery*time.Millisecond, r.traces[d], cfg.Budget, cfg.Duration, shaped)
		ScoreRecoveries(&res, r.goodput[d], seriesEvery*time.Millisecond, r.traces[d], cfg.Duration, shaped)
		out = append(out, roundResult(res))
	}
	return out
}

// DefaultBounds derives a direction's bounds from its trace, as a user who
// knows the line would set them: max a little above the best second's
// capacity, base at the mean, min at a tenth of the mean.
func DefaultBounds(t *Trace, d time.Duration) policies.Bounds {
	mean := t.MeanRate(d)
	peak := t.PeakRate(d)
	b := policies.Bounds{Min: math.Max(0.1*mean, 64e3), Base: mean, Max: math.Max(1.1*peak, mean)}
	b.Max = math.Max(b.Max, b.Min)
	b.Base = math.Min(math.Max(b.Base, b.Min), b.Max)
	return b
}

type reflector struct {
	name   string
	extra  float64 // ms of extra base RTT
	offset float64 // ms of clock offset
}

func (m *Model) reflectors() []reflector {
	out := make([]reflector, m.cfg.Reflectors)
	for i := range out {
		out[i] = reflector{
			name:   fmt.Sprintf("reflector-%d", i+1),
			extra:  m.rng.Float64() * ms(m.cfg.ReflectorSpread),
			offset: (m.rng.Float64() - 0.5) * 2000,
		}
	}
	return out
}

func (m *Model) jitter() float64 { return m.rng.ExpFloat64() * ms(m.cfg.Jitter) }

type pendingSample struct {
	arrive float64
	s      estimator.Sample
}

// insertSample adds p to a slice kept in arrival order (samples mostly arrive
// in order, so this rarely moves anything).
func insertSample(list []pendingSample, p pendingSample) []pendingSample {
	i := len(list)
	for i > 0 && list[i-1].arrive > p.arrive {
		i--
	}
	return slices.Insert(list, i, p)
}

// simShaper is the controller's view of a path's shaper.
type simShaper struct{ p *path }

var _ controller.Shaper = (*simShaper)(nil)

func (s *simShaper) SetRate(_ context.Context, bps uint64) (controller.Change, error) {
	// As the actuator's: a rate CAKE sets itself is written over, even
	// where it equals bps.
	ch := controller.Change{Iface: s.p.dir.String(), Kind: "sim", Wrote: uint64(s.p.rate) != bps || s.p.autorate}
	if ch.Wrote && s.p.autorate {
		// The actuator's write takes the rate over from CAKE's
		// autorate-ingress, which stops estimating.
		s.p.autorate = false
		s.p.cake.stop()
	}
	s.p.setRate(float64(bps))
	return ch, nil
}

// Yield hands the rate to CAKE's autorate-ingress, which resumes
// estimating from the value it kept (see controller.Yielder).
func (s *simShaper) Yield(_ context.Context, bps uint64) (controller.Change, error) {
	s.p.setRate(float64(bps))
	s.p.autorate = true
	return controller.Change{Iface: s.p.dir.String(), Kind: "sim", Wrote: true}, nil
}

func (s *simShaper) Stats(context.Context) (controller.ShaperStats, error) {
	// The model moves whole packets of PacketBytes through the shaper.
	st := controller.ShaperStats{Bytes: s.p.shaped, Packets: s.p.shaped / PacketBytes,
		Drops: uint64(s.p.sqDrops) / PacketBytes, Backlog: uint64(s.p.sqBytes), Rate: uint64(s.p.rate)}
	if s.p.dir == estimator.Down && s.p.m.cfg.CapacityEstimate {
		st.CapacityEstimate = uint64(s.p.cake.bps())
		st.AutorateIngress = s.p.autorate
	}
	return st, nil
}

// probeSwitch records the controller's idle requests; the loop reads the
// controller's state directly.
type probeSwitch struct{ idle bool }

func (p *probeSwitch) SetIdle(idle bool) { p.idle = idle }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func msDur(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

// ScoreDelays fills r's delay percentiles and over-budget fraction from an
// independent probe's added delays in ms, one per every (NaN for a lost
// probe: left out of the percentiles, over the budget in a reaction), and, when
// reactions is set and the capacity is a schedule, the reaction to each of
// its drops before dur (see Result.ReactionS). The simulator and the lab
// score alike through it.
func ScoreDelays(r *Result, delays []float32, every time.Duration, capacity *Trace, budget, dur time.Duration, reactions bool) {
	r.Delay, r.OverBudget = delayStats(delays, ms(budget))
	if !reactions || capacity == nil || !capacity.IsSchedule() {
		return
	}
	for _, drop := range capacity.Drops() {
		if drop >= dur {
			continue
		}
		react, worst := reaction(delays, every, drop, nextChange(capacity, drop, dur), ms(budget))
		r.Reactions = append(r.Reactions, round3(react))
		r.WorstDelayMs = append(r.WorstDelayMs, round3(worst))
	}
	for _, rise := range capacity.Rises() {
		if rise >= dur {
			continue
		}
		_, worst := reaction(delays, every, rise, nextChange(capacity, rise, dur), ms(budget))
		r.RiseWorstDelayMs = append(r.RiseWorstDelayMs, round3(worst))
	}
	if len(r.Reactions) > 0 {
		worst := slices.Max(r.Reactions)
		r.ReactionS = &worst
		steady := slices.Clone(delays)
		for i, drop := range capacity.Drops() {
			if i >= len(r.Reactions) {
				break
			}
			from := int(drop / every)
			to := min(from+int(math.Ceil(r.Reactions[i]*float64(time.Second)/float64(every))), len(steady))
			for j := from; j < to; j++ {
				steady[j] = float32(math.NaN())
			}
		}
		d, _ := delayStats(steady, ms(budget))
		r.SteadyDelay = &Delay{round3(d.P50), round3(d.P95), round3(d.P99)}
	}
}

// RecoveryWindow is the span over which ScoreRecoveries averages the
// goodput; RecoveryShare the share of the new capacity it must reach.
const (
	RecoveryWindow = 500 * time.Millisecond
	RecoveryShare  = 0.9
)

// ScoreRecoveries fills r's recoveries (see Result.RecoveryS) from the
// goodput in Mbit/s delivered in each interval of every (the first from 0),
// when recoveries is set and the capacity is a schedule with rises before
// dur. The simulator and the lab score alike through it.
func ScoreRecoveries(r *Result, goodput []float64, every time.Duration, capacity *Trace, dur time.Duration, recoveries bool) {
	if !recoveries || capacity == nil || !capacity.IsSchedule() || every <= 0 {
		return
	}
	for _, rise := range capacity.Rises() {
		if rise >= dur {
			continue
		}
		end := nextChange(capacity, rise, dur)
		target := RecoveryShare * capacity.RateAt(rise.Milliseconds(), 1) / 1e6
		r.Recoveries = append(r.Recoveries, round3(recovery(goodput, every, rise, end, target).Seconds()))
	}
	if len(r.Recoveries) > 0 {
		worst := slices.Max(r.Recoveries)
		r.RecoveryS = &worst
	}
}

// recovery is the time from rise until the end of the first RecoveryWindow
// of whole intervals in [rise, end) whose mean goodput reaches target, or
// until end when none does.
func recovery(goodput []float64, every, rise, end time.Duration, target float64) time.Duration {
	n := max(int(RecoveryWindow/every), 1)
	from := int((rise + every - 1) / every) // the first whole interval
	to := min(int(end/every), len(goodput))
	sum := 0.0
	for i := from; i < to; i++ {
		sum += goodput[i]
		if i-from >= n {
			sum -= goodput[i-n]
		}
		if i-from+1 >= n && sum/float64(n) >= target-1e-9 {
			return time.Duration(i+1)*every - rise
		}
	}
	return end - rise
}

func delayStats(s []float32, budget float64) (Delay, float64) {
	sorted := sortDelays(s)
	if len(sorted) == 0 {
		return Delay{}, 0
	}
	q := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(sorted)))) - 1
		return float64(sorted[max(i, 0)])
	}
	over := len(sorted) - sort.Search(len(sorted), func(i int) bool { return float64(sorted[i]) > budget })
	return Delay{P50: q(0.50), P95: q(0.95), P99: q(0.99)}, float64(over) / float64(len(sorted))
}

// sortDelays returns the delays of s in ascending order, lost probes (NaN)
// left out. An hour's score holds 360 000 of them per direction: an LSD
// radix sort on the floats' bit patterns, made to order as the floats do
// (sign bit flipped for positives, every bit for negatives), takes four
// linear passes where a comparison sort took a twentieth of the replay.
func sortDelays(s []float32) []float32 {
	keys := make([]uint32, 0, len(s))
	for _, v := range s {
		if v != v {
			continue
		}
		b := math.Float32bits(v)
		if b&(1<<31) != 0 {
			b = ^b
		} else {
			b |= 1 << 31
		}
		keys = append(keys, b)
	}
	tmp := make([]uint32, len(keys))
	for shift := 0; shift < 32; shift += 8 {
		var count [257]int
		for _, k := range keys {
			count[(k>>shift)&0xff+1]++
		}
		for i := 1; i < len(count); i++ {
			count[i] += count[i-1]
		}
		for _, k := range keys {
			d := (k >> shift) & 0xff
			tmp[count[d]] = k
			count[d]++
		}
		keys, tmp = tmp, keys
	}
	out := make([]float32, len(keys))
	for i, b := range keys {
		if b&(1<<31) != 0 {
			b &^= 1 << 31
		} else {
			b = ^b
		}
		out[i] = math.Float32frombits(b)
	}
	return out
}

// reaction measures, for a drop at drop, how long until the added delay is
// under budget and stays there for 2 s, and the worst delay before end.
func reaction(s []float32, every, drop, end time.Duration, budget float64) (react, worst float64) {
	step := every.Milliseconds()
	from := int(drop.Milliseconds() / step)
	to := min(int(end.Milliseconds()/step), len(s))
	hold := int(2000 / step)
	okFrom := -1
	for i := from; i < to; i++ {
		lost := s[i] != s[i] // NaN: no answer, so not under the budget
		if !lost {
			worst = math.Max(worst, float64(s[i]))
		}
		if lost || float64(s[i]) > budget {
			okFrom = -1
			continue
		}
		if okFrom < 0 {
			okFrom = i
		}
		if i-okFrom+1 >= hold && react == 0 && okFrom >= 0 {
			react = float64(int64(okFrom-from)*step) / 1000
			if okFrom == from {
				react = 0
			}
			okFrom = -2 // found; keep scanning for the worst delay only
		}
		if okFrom == -2 {
			okFrom = -3
		}
	}
	if okFrom != -3 && react == 0 && !(to-from >= hold && allUnder(s[from:min(from+hold, to)], budget)) {
		react = float64(int64(to-from)*step) / 1000
	}
	return react, worst
}

func allUnder(s []float32, budget float64) bool {
	for _, v := range s {
		if v != v || float64(v) > budget {
			return false
		}
	}
	return true
}

func nextChange(t *Trace, after, end time.Duration) time.Duration {
	for _, s := range t.steps {
		if s.At > after {
			return s.At
		}
	}
	return end
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

func roundResult(r Result) Result {
	r.CapacityMbps = round3(r.CapacityMbps)
	r.GoodputMbps = round3(r.GoodputMbps)
	r.Utilization = round3(r.Utilization)
	r.MeanRateMbps = round3(r.MeanRateMbps)
	r.OverBudget = round3(r.OverBudget)
	r.Delay = Delay{round3(r.Delay.P50), round3(r.Delay.P95), round3(r.Delay.P99)}
	return r
}
