package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

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

// metricsPath is where serveMetrics answers scrapes.
const metricsPath = "/metrics"

// metricsShutdownTimeout bounds how long serveMetrics waits for scrapes in
// flight when its context ends.
const metricsShutdownTimeout = 5 * time.Second

// rateChangeReasons lists the reasons whose rate-change series AddLink
// creates. A Decision with any other reason is still counted; its series
// appears with its first change.
func rateChangeReasons() []policies.Reason {
	return []policies.Reason{
		policies.ReasonHold, policies.ReasonBloat, policies.ReasonProbe,
		policies.ReasonEase, policies.ReasonDrop, policies.ReasonDecay,
		policies.ReasonFixed, policies.ReasonIdle, policies.ReasonStall,
		policies.ReasonFallback, policies.ReasonBounds, policies.ReasonStart,
		policies.ReasonShutdown,
	}
}

// controllerStates lists the states of the state gauge.
func controllerStates() []controller.State {
	return []controller.State{controller.Active, controller.Idle, controller.Stall}
}

// Metrics are the daemon's Prometheus metrics. Its methods are safe for
// concurrent use (one controller per link may feed it), and a nil *Metrics
// is valid: every method is then a no-op, so the daemon runs the same way
// with metrics off.
type Metrics struct {
	shaperRate       *prometheus.GaugeVec     // link, dir
	achievedRate     *prometheus.GaugeVec     // link, dir
	capacityEstimate *prometheus.GaugeVec     // link, dir
	delayDelta       *prometheus.HistogramVec // link, dir
	bloatEvents      *prometheus.CounterVec   // link, dir
	rateChanges      *prometheus.CounterVec   // link, dir, reason
	state            *prometheus.GaugeVec     // link, state

	reflectorBaseline *prometheus.GaugeVec   // link, reflector
	reflectorAnswered *prometheus.CounterVec // link, reflector
	reflectorLost     *prometheus.CounterVec // link, reflector

	buildInfo prometheus.Gauge

	mu sync.Mutex
	// bloated is whether the last observation of a link and direction was
	// bloated: a bloat event is the step from false to true.
	bloated map[linkDir]bool
	// reflectors holds each link's last snapshot of its reflectors'
	// counters, by reflector label.
	reflectors map[string]map[string]reflectorCounts
}

// A linkDir is one direction of one link.
type linkDir struct {
	link string
	dir  estimator.Direction
}

// reflectorCounts are a reflector's probe counters at the last snapshot.
type reflectorCounts struct {
	answered, lost uint64
}

// NewMetrics makes the daemon's metrics and registers them with reg; a nil
// reg returns a nil *Metrics (metrics off). It panics when a metric is
// registered with reg already.
func NewMetrics(reg prometheus.Registerer, version string) *Metrics {
	if reg == nil {
		return nil
	}
	linkDirLabels := []string{labelLink, labelDir}
	reflectorLabels := []string{labelLink, labelReflector}
	m := &Metrics{
		shaperRate: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: metricShaperRate,
			Help: "The rate the shaper is set to, in bit/s.",
		}, linkDirLabels),
		achievedRate: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: metricAchievedRate,
			Help: "The rate through the shaper over the last counter interval, in bit/s.",
		}, linkDirLabels),
		capacityEstimate: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: metricCapacityEstimate,
			Help: "CAKE's own capacity estimate, in bit/s; 0 when the shaper has none.",
		}, linkDirLabels),
		delayDelta: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    metricDelayDelta,
			Help:    "The delay added over the baseline, combined across reflectors, observed every tick that has a fresh sample, in seconds.",
			Buckets: prometheus.ExponentialBuckets(delayBucketStart, delayBucketFactor, delayBucketCount),
		}, linkDirLabels),
		bloatEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricBloatEvents,
			Help: "Times bloat was detected after a tick without it.",
		}, linkDirLabels),
		rateChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricRateChanges,
			Help: "Rate changes written to the shaper, by reason.",
		}, []string{labelLink, labelDir, labelReason}),
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: metricState,
			Help: "The controller's state for the link: 1 for the current state, 0 for the others.",
		}, []string{labelLink, labelState}),
		reflectorBaseline: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: metricReflectorBaseline,
			Help: "An active reflector's baseline round trip, in seconds; 0 before its first answer.",
		}, reflectorLabels),
		reflectorAnswered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricReflectorAnswered,
			Help: "Probes an active reflector answered.",
		}, reflectorLabels),
		reflectorLost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricReflectorLost,
			Help: "Probes to an active reflector that were lost.",
		}, reflectorLabels),
		buildInfo: prometheus.NewGauge(prometheus.GaugeOpts{
			Name:        metricBuildInfo,
			Help:        "Always 1; its labels name the version of autoshape and of Go it was built with.",
			ConstLabels: prometheus.Labels{labelVersion: version, labelGoVersion: runtime.Version()},
		}),
		bloated:    make(map[linkDir]bool),
		reflectors: make(map[string]map[string]reflectorCounts),
	}
	reg.MustRegister(
		m.shaperRate, m.achievedRate, m.capacityEstimate, m.delayDelta,
		m.bloatEvents, m.rateChanges, m.state,
		m.reflectorBaseline, m.reflectorAnswered, m.reflectorLost,
		m.buildInfo,
	)
	m.buildInfo.Set(1)
	return m
}

// AddLink creates link's series for both directions, every known reason and
// every state, at 0, so that they are there before the first event. Calling
// it again for the same link changes nothing.
func (m *Metrics) AddLink(link string) {
	if m == nil {
		return
	}
	for _, d := range estimator.Directions {
		dir := d.String()
		m.shaperRate.WithLabelValues(link, dir)
		m.achievedRate.WithLabelValues(link, dir)
		m.capacityEstimate.WithLabelValues(link, dir)
		m.delayDelta.WithLabelValues(link, dir)
		m.bloatEvents.WithLabelValues(link, dir)
		for _, r := range rateChangeReasons() {
			m.rateChanges.WithLabelValues(link, dir, string(r))
		}
	}
	for _, s := range controllerStates() {
		m.state.WithLabelValues(link, s.String())
	}
}

// Observe records one tick's observation of one direction of link, whose
// shaper is set to rate (bit/s). The delay is observed only when some
// reflector had a fresh sample (the estimator's Delta is 0 without one, which
// is no measurement). A bloat event is counted when bloat is detected after
// a tick without it, so a run of bloated ticks counts once.
func (m *Metrics) Observe(link string, obs estimator.Observation, rate float64) {
	if m == nil {
		return
	}
	dir := obs.Direction.String()
	m.shaperRate.WithLabelValues(link, dir).Set(rate)
	m.achievedRate.WithLabelValues(link, dir).Set(obs.Achieved)
	m.capacityEstimate.WithLabelValues(link, dir).Set(obs.CapacityEstimate)
	if obs.Reflectors > 0 {
		m.delayDelta.WithLabelValues(link, dir).Observe(obs.Delta.Seconds())
	}

	key := linkDir{link, obs.Direction}
	m.mu.Lock()
	was := m.bloated[key]
	m.bloated[key] = obs.Bloat
	m.mu.Unlock()
	if obs.Bloat && !was {
		m.bloatEvents.WithLabelValues(link, dir).Inc()
	}
}

// Decision counts one rate change by its link, direction and reason.
func (m *Metrics) Decision(d controller.Decision) {
	if m == nil {
		return
	}
	m.rateChanges.WithLabelValues(d.Link, d.Direction.String(), string(d.Reason)).Inc()
}

// SetState sets link's state gauge to 1 for s and 0 for the other states.
func (m *Metrics) SetState(link string, s controller.State) {
	if m == nil {
		return
	}
	for _, st := range controllerStates() {
		v := 0.0
		if st == s {
			v = 1
		}
		m.state.WithLabelValues(link, st.String()).Set(v)
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
		m.reflectorBaseline.WithLabelValues(link, name).Set(r.Baseline.Seconds())
		m.reflectorAnswered.WithLabelValues(link, name).Add(float64(counterDelta(last.answered, r.Answered)))
		m.reflectorLost.WithLabelValues(link, name).Add(float64(counterDelta(last.lost, r.Lost)))
		next[name] = reflectorCounts{answered: r.Answered, lost: r.Lost}
	}
	for name := range prev {
		if _, ok := next[name]; ok {
			continue
		}
		m.reflectorBaseline.DeleteLabelValues(link, name)
		m.reflectorAnswered.DeleteLabelValues(link, name)
		m.reflectorLost.DeleteLabelValues(link, name)
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

// listenMetrics listens on addr (host:port) for serveMetrics.
func listenMetrics(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("failed to listen for metrics on %q: %w", addr, err)
	}
	return ln, nil
}

// serveMetrics serves reg's metrics at /metrics on ln until ctx ends, then
// shuts the server down gracefully (scrapes in flight get a few seconds) and
// returns nil. It closes ln. It is a Task: run it under the daemon's
// errgroup.
func serveMetrics(ctx context.Context, ln net.Listener, reg *prometheus.Registry, log *zap.Logger) error {
	if log == nil {
		log = zap.NewNop()
	}
	addr := ln.Addr().String()
	log = log.With(zap.String("addr", addr))
	errLog := zap.NewStdLog(log)
	mux := http.NewServeMux()
	mux.Handle(metricsPath, promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:      errLog,
		ErrorHandling: promhttp.ContinueOnError,
	}))
	srv := &http.Server{
		Handler:           mux,
		ErrorLog:          errLog,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       time.Minute,
	}

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("serving metrics", zap.String("path", metricsPath))

	select {
	case err := <-served:
		return fmt.Errorf("failed to serve metrics on %s: %w", addr, err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), metricsShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		// A scrape outlived the grace period: cut it off, shutting down is
		// not an error.
		log.Warn("metrics server did not shut down in time", zap.Error(err))
		srv.Close()
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		log.Warn("metrics server stopped", zap.Error(err))
	}
	return nil
}
