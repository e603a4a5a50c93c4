package daemon

import (
	"bytes"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"

	"github.com/VictoriaMetrics/metrics"

	"github.com/autoshape/autoshape/controller"
	"github.com/autoshape/autoshape/estimator"
	"github.com/autoshape/autoshape/policies"
	"github.com/autoshape/autoshape/probe"
)

// Metric names. Rates are in bit/s, delays in seconds.
const (
	metricsNamespace = "autoshape"

	metricShaperRate        = metricsNamespace + "_shaper_rate_bits"
	metricAchievedRate      = metricsNamespace + "_achieved_rate_bits"
	metricCapacityEstimate  = metricsNamespace + "_capacity_estimate_bits"
	metricDelayDelta        = metricsNamespace + "_delay_delta_seconds"
	metricBloatEvents       = metricsNamespace + "_bloat_events_total"
	metricRateChanges       = metricsNamespace + "_rate_changes_total"
	metricState             = metricsNamespace + "_state"
	metricReflectorBaseline = metricsNamespace + "_reflector_baseline_seconds"
	metricReflectorAnswered = metricsNamespace + "_reflector_answered_total"
	metricReflectorLost     = metricsNamespace + "_reflector_lost_total"
	metricBuildInfo         = metricsNamespace + "_build_info"
)

// Label names.
const (
	labelLink      = "link"
	labelDir       = "dir"
	labelReason    = "reason"
	labelState     = "state"
	labelReflector = "reflector"
	labelVersion   = "version"
	labelGoVersion = "goversion"
)

// The delay histogram's buckets: 0.5ms doubling up to 2.048s.
const (
	delayBucketStart  = 0.0005
	delayBucketFactor = 2
	delayBucketCount  = 13
)

// rateChangeReasons lists the reasons whose rate-change series AddLink
// creates. A Decision with any other reason is still counted; its series
// appears with its first change.
func rateChangeReasons() []policies.Reason {
	return []policies.Reason{
		policies.ReasonHold, policies.ReasonBloat, policies.ReasonProbe,
		policies.ReasonEase, policies.ReasonDrop, policies.ReasonDropUndone, policies.ReasonDecay,
		policies.ReasonFixed, policies.ReasonIdle, policies.ReasonStall,
		policies.ReasonFallback, policies.ReasonBlind, policies.ReasonBounds, policies.ReasonStart,
		policies.ReasonShutdown, policies.ReasonYield,
	}
}

// controllerStates lists the states of the state gauge.
func controllerStates() []controller.State {
	return []controller.State{controller.Active, controller.Idle, controller.Stall}
}

// A family is one metric: its series, written in Prometheus' text format
// under the metric's HELP and TYPE lines.
type family struct {
	name, typ, help string
	set             *metrics.Set
}

// series names one of f's series by its labels, given as name, value
// pairs in the order of the names, so that a series has one spelling.
func (f *family) series(labels ...string) string {
	var b strings.Builder
	b.WriteString(f.name)
	b.WriteByte('{')
	for i := 0; i+1 < len(labels); i += 2 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(labels[i])
		b.WriteString(`="`)
		labelEscaper.WriteString(&b, labels[i+1])
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

// labelEscaper escapes a label value for the text format.
var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

func (f *family) gauge(labels ...string) *metrics.Gauge {
	return f.set.GetOrCreateGauge(f.series(labels...), nil)
}

func (f *family) counter(labels ...string) *metrics.Counter {
	return f.set.GetOrCreateCounter(f.series(labels...))
}

// write writes f's series under its HELP and TYPE lines, or nothing when
// it has none.
func (f *family) write(w io.Writer, buf *bytes.Buffer) {
	buf.Reset()
	f.set.WritePrometheus(buf)
	if buf.Len() == 0 {
		return
	}
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", f.name, f.help, f.name, f.typ)
	w.Write(buf.Bytes())
}

// Metrics are the daemon's Prometheus metrics. Its methods are safe for
// concurrent use (one controller per link may feed it), and a nil *Metrics
// is valid: every method is then a no-op.
type Metrics struct {
	shaperRate       *family // gauge: dir, link
	achievedRate     *family // gauge: dir, link
	capacityEstimate *family // gauge: dir, link
	delayDelta       *family // histogram: dir, link
	bloatEvents      *family // counter: dir, link
	rateChanges      *family // counter: dir, link, reason
	state            *family // gauge: link, state

	reflectorBaseline *family // gauge: link, reflector
	reflectorAnswered *family // counter: link, reflector
	reflectorLost     *family // counter: link, reflector

	buildInfo *family // gauge: goversion, version

	families []*family // in the order of their names

	mu sync.Mutex
	// links holds each link's series that are updated every tick.
	links map[string]*linkSeries
	// reflectors holds each link's last snapshot of its reflectors'
	// counters, by reflector label.
	reflectors map[string]map[string]reflectorCounts
}

// linkSeries are one link's series that every tick updates, looked up once.
type linkSeries struct {
	dirs  [len(estimator.Directions)]dirSeries // by estimator.Direction
	state []*metrics.Gauge                     // by controllerStates()
}

// dirSeries are one direction's series of a link.
type dirSeries struct {
	shaperRate, achievedRate, capacityEstimate *metrics.Gauge
	delayDelta                                 *metrics.PrometheusHistogram
	bloatEvents                                *metrics.Counter
	// bloated is whether the last observation was bloated: a bloat event
	// is the step from false to true.
	bloated bool
}

// reflectorCounts are a reflector's probe counters at the last snapshot.
type reflectorCounts struct {
	answered, lost uint64
}

// NewMetrics makes the daemon's metrics, with the build info naming
// version.
func NewMetrics(version string) *Metrics {
	fam := func(name, typ, help string) *family {
		return &family{name: name, typ: typ, help: help, set: metrics.NewSet()}
	}
	m := &Metrics{
		shaperRate:       fam(metricShaperRate, "gauge", "The rate the shaper is set to, in bit/s."),
		achievedRate:     fam(metricAchievedRate, "gauge", "The rate through the shaper over the last counter interval, in bit/s."),
		capacityEstimate: fam(metricCapacityEstimate, "gauge", "CAKE's own capacity estimate, in bit/s; 0 when the shaper has none."),
		delayDelta: fam(metricDelayDelta, "histogram",
			"The delay added over the baseline, combined across reflectors, observed every tick that has a fresh sample, in seconds."),
		bloatEvents:       fam(metricBloatEvents, "counter", "Times bloat was detected after a tick without it."),
		rateChanges:       fam(metricRateChanges, "counter", "Rate changes written to the shaper, by reason."),
		state:             fam(metricState, "gauge", "The controller's state for the link: 1 for the current state, 0 for the others."),
		reflectorBaseline: fam(metricReflectorBaseline, "gauge", "An active reflector's baseline round trip, in seconds; 0 before its first answer."),
		reflectorAnswered: fam(metricReflectorAnswered, "counter", "Probes an active reflector answered."),
		reflectorLost:     fam(metricReflectorLost, "counter", "Probes to an active reflector that were lost."),
		buildInfo:         fam(metricBuildInfo, "gauge", "Always 1; its labels name the version of autoshape and of Go it was built with."),
		links:             make(map[string]*linkSeries),
		reflectors:        make(map[string]map[string]reflectorCounts),
	}
	m.families = []*family{
		m.achievedRate, m.bloatEvents, m.buildInfo, m.capacityEstimate, m.delayDelta, m.rateChanges,
		m.reflectorAnswered, m.reflectorBaseline, m.reflectorLost, m.shaperRate, m.state,
	}
	m.buildInfo.gauge(labelGoVersion, runtime.Version(), labelVersion, version).Set(1)
	return m
}

// WritePrometheus writes every series in Prometheus' text format.
func (m *Metrics) WritePrometheus(w io.Writer) {
	if m == nil {
		return
	}
	var buf bytes.Buffer
	for _, f := range m.families {
		f.write(w, &buf)
	}
}

// AddLink creates link's series for both directions, every known reason and
// every state, at 0, so that they are there before the first event. Calling
// it again for the same link changes nothing.
func (m *Metrics) AddLink(link string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.link(link)
	m.mu.Unlock()
	for _, d := range estimator.Directions {
		for _, r := range rateChangeReasons() {
			m.rateChanges.counter(labelDir, d.String(), labelLink, link, labelReason, string(r))
		}
	}
}

// link returns link's per-tick series, creating them on first use. m.mu
// must be held.
func (m *Metrics) link(link string) *linkSeries {
	if ls, ok := m.links[link]; ok {
		return ls
	}
	ls := &linkSeries{}
	for _, d := range estimator.Directions {
		labels := []string{labelDir, d.String(), labelLink, link}
		ls.dirs[d] = dirSeries{
			shaperRate:       m.shaperRate.gauge(labels...),
			achievedRate:     m.achievedRate.gauge(labels...),
			capacityEstimate: m.capacityEstimate.gauge(labels...),
			delayDelta: m.delayDelta.set.GetOrCreatePrometheusHistogramExt(m.delayDelta.series(labels...),
				metrics.ExponentialBuckets(delayBucketStart, delayBucketFactor, delayBucketCount)),
			bloatEvents: m.bloatEvents.counter(labels...),
		}
	}
	for _, s := range controllerStates() {
		ls.state = append(ls.state, m.state.gauge(labelLink, link, labelState, s.String()))
	}
	m.links[link] = ls
	return ls
}

// Observe records one tick's observation of one direction of link, whose
// shaper is set to rate (bit/s). The delay is observed only when some
// reflector had a fresh sample (the estimator's Delta is 0 without one, which
// is no measurement), and a delay below the baseline counts as none. A bloat
// event is counted when bloat is detected after a tick without it, so a run
// of bloated ticks counts once.
func (m *Metrics) Observe(link string, obs estimator.Observation, rate float64) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s := &m.link(link).dirs[obs.Direction]
	s.shaperRate.Set(rate)
	s.achievedRate.Set(obs.Achieved)
	s.capacityEstimate.Set(obs.CapacityEstimate)
	if obs.Reflectors > 0 {
		s.delayDelta.Update(max(obs.Delta, 0).Seconds())
	}
	if obs.Bloat && !s.bloated {
		s.bloatEvents.Inc()
	}
	s.bloated = obs.Bloat
}

// Decision counts one rate change by its link, direction and reason.
func (m *Metrics) Decision(d controller.Decision) {
	if m == nil {
		return
	}
	m.rateChanges.counter(labelDir, d.Direction.String(), labelLink, d.Link, labelReason, string(d.Reason)).Inc()
}

// SetState sets link's state gauge to 1 for s and 0 for the other states.
func (m *Metrics) SetState(link string, s controller.State) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, st := range controllerStates() {
		v := 0.0
		if st == s {
			v = 1
		}
		m.link(link).state[i].Set(v)
	}
}

// Reflectors records a snapshot of link's reflector pool (from Pool.Stats):
// each active reflector's baseline, and what its answered and lost counters
// grew by since the previous snapshot. A reflector that left the active set
// since the previous snapshot has its series deleted. The pool restarts a
// reflector's counters when it rejoins the active set, so a counter below
// the previous snapshot counts in full.
func (m *Metrics) Reflectors(link string, stats probe.PoolStats) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	prev := m.reflectors[link]
	next := make(map[string]reflectorCounts, len(stats.Reflectors))
	for _, r := range stats.Reflectors {
		name := r.Addr.String()
		last := prev[name]
		m.reflectorBaseline.gauge(labelLink, link, labelReflector, name).Set(r.Baseline.Seconds())
		m.reflectorAnswered.counter(labelLink, link, labelReflector, name).AddInt64(int64(counterDelta(last.answered, r.Answered)))
		m.reflectorLost.counter(labelLink, link, labelReflector, name).AddInt64(int64(counterDelta(last.lost, r.Lost)))
		next[name] = reflectorCounts{answered: r.Answered, lost: r.Lost}
	}
	for name := range prev {
		if _, ok := next[name]; ok {
			continue
		}
		for _, f := range []*family{m.reflectorBaseline, m.reflectorAnswered, m.reflectorLost} {
			f.set.UnregisterMetric(f.series(labelLink, link, labelReflector, name))
		}
	}
	m.reflectors[link] = next
}

// counterDelta returns how much a counter grew from last to now; a counter
// below last was restarted, and all of now is new.
func counterDelta(last, now uint64) uint64 {
	if now < last {
		return now
	}
	return now - last
}
