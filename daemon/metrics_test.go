package daemon

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/autoshape/autoshape/controller"
	"github.com/autoshape/autoshape/estimator"
	"github.com/autoshape/autoshape/policies"
	"github.com/autoshape/autoshape/probe"
)

func newTestMetrics(t *testing.T) (*Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg, "v1.2.3")
	if m == nil {
		t.Fatal("NewMetrics returned nil for a registry")
	}
	return m, reg
}

func TestMetricsAddLinkPrecreatesSeries(t *testing.T) {
	m, reg := newTestMetrics(t)
	m.AddLink("wan")
	m.AddLink("wan") // idempotent

	nReasons := len(rateChangeReasons())
	for _, tt := range []struct {
		name string
		want int
	}{
		{metricShaperRate, 2},
		{metricAchievedRate, 2},
		{metricCapacityEstimate, 2},
		{metricDelayDelta, 2},
		{metricBloatEvents, 2},
		{metricRateChanges, 2 * nReasons},
		{metricState, 3},
		{metricReflectorBaseline, 0},
		{metricReflectorAnswered, 0},
		{metricReflectorLost, 0},
		{metricBuildInfo, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := testutil.GatherAndCount(reg, tt.name)
			if err != nil {
				t.Fatalf("GatherAndCount: %v", err)
			}
			if got != tt.want {
				t.Errorf("%s has %d series, want %d", tt.name, got, tt.want)
			}
		})
	}

	want := `
# HELP autoshape_bloat_events_total Times bloat was detected after a tick without it.
# TYPE autoshape_bloat_events_total counter
autoshape_bloat_events_total{dir="down",link="wan"} 0
autoshape_bloat_events_total{dir="up",link="wan"} 0
# HELP autoshape_shaper_rate_bits The rate the shaper is set to, in bit/s.
# TYPE autoshape_shaper_rate_bits gauge
autoshape_shaper_rate_bits{dir="down",link="wan"} 0
autoshape_shaper_rate_bits{dir="up",link="wan"} 0
# HELP autoshape_state The controller's state for the link: 1 for the current state, 0 for the others.
# TYPE autoshape_state gauge
autoshape_state{link="wan",state="active"} 0
autoshape_state{link="wan",state="idle"} 0
autoshape_state{link="wan",state="stall"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), metricBloatEvents, metricShaperRate, metricState); err != nil {
		t.Error(err)
	}
	for _, r := range rateChangeReasons() {
		if got := testutil.ToFloat64(m.rateChanges.WithLabelValues("wan", "up", string(r))); got != 0 {
			t.Errorf("rate changes for %q = %v, want 0", r, got)
		}
	}
}

func TestMetricsBuildInfo(t *testing.T) {
	_, reg := newTestMetrics(t)
	want := `
# HELP autoshape_build_info Always 1; its labels name the version of autoshape and of Go it was built with.
# TYPE autoshape_build_info gauge
autoshape_build_info{goversion="` + runtime.Version() + `",version="v1.2.3"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), metricBuildInfo); err != nil {
		t.Error(err)
	}
}

func TestMetricsObserveGauges(t *testing.T) {
	m, reg := newTestMetrics(t)
	m.AddLink("wan")
	m.Observe("wan", estimator.Observation{
		Direction:        estimator.Down,
		Delta:            3 * time.Millisecond,
		Achieved:         45e6,
		CapacityEstimate: 52e6,
		Reflectors:       4,
	}, 50e6)
	m.Observe("wan", estimator.Observation{Direction: estimator.Up, Achieved: 9e6, Reflectors: 4, Delta: 40 * time.Millisecond}, 10e6)
	// No fresh reflector: Delta means nothing and is not observed.
	m.Observe("wan", estimator.Observation{Direction: estimator.Up, Achieved: 8e6}, 10e6)

	for _, tt := range []struct {
		name string
		c    prometheus.Collector
		want float64
	}{
		{"down rate", m.shaperRate.WithLabelValues("wan", "down"), 50e6},
		{"down achieved", m.achievedRate.WithLabelValues("wan", "down"), 45e6},
		{"down capacity", m.capacityEstimate.WithLabelValues("wan", "down"), 52e6},
		{"up rate", m.shaperRate.WithLabelValues("wan", "up"), 10e6},
		{"up achieved", m.achievedRate.WithLabelValues("wan", "up"), 8e6},
		{"up capacity", m.capacityEstimate.WithLabelValues("wan", "up"), 0},
	} {
		if got := testutil.ToFloat64(tt.c); got != tt.want {
			t.Errorf("%s = %v, want %v", tt.name, got, tt.want)
		}
	}

	hist := func(dir string) (count uint64, sum float64) {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatalf("Gather: %v", err)
		}
		for _, mf := range mfs {
			if mf.GetName() != metricDelayDelta {
				continue
			}
			for _, mt := range mf.GetMetric() {
				for _, l := range mt.GetLabel() {
					if l.GetName() == labelDir && l.GetValue() == dir {
						return mt.GetHistogram().GetSampleCount(), mt.GetHistogram().GetSampleSum()
					}
				}
			}
		}
		t.Fatalf("no %s series for dir %q", metricDelayDelta, dir)
		return 0, 0
	}
	for _, tt := range []struct {
		dir   string
		count uint64
		sum   float64
	}{
		{"down", 1, 0.003},
		{"up", 1, 0.040},
	} {
		count, sum := hist(tt.dir)
		if count != tt.count || sum != tt.sum {
			t.Errorf("%s delay histogram: count %d sum %v, want count %d sum %v", tt.dir, count, sum, tt.count, tt.sum)
		}
	}
}

func TestMetricsObserveBloatEvents(t *testing.T) {
	for _, tt := range []struct {
		name string
		down []bool // bloat per tick
		up   []bool
		want [2]float64
	}{
		{name: "never", down: []bool{false, false, false}, up: []bool{false}, want: [2]float64{0, 0}},
		{name: "one run counts once", down: []bool{false, true, true, true, true}, want: [2]float64{1, 0}},
		{name: "bloated from the first tick", down: []bool{true, true}, want: [2]float64{1, 0}},
		{name: "two runs", down: []bool{true, true, false, false, true, false}, want: [2]float64{2, 0}},
		{name: "every other tick", up: []bool{true, false, true, false, true}, want: [2]float64{0, 3}},
		{name: "directions apart", down: []bool{true, true, true}, up: []bool{false, true, true}, want: [2]float64{1, 1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m, _ := newTestMetrics(t)
			m.AddLink("wan")
			m.AddLink("lte")
			for i := range max(len(tt.down), len(tt.up)) {
				if i < len(tt.down) {
					m.Observe("wan", estimator.Observation{Direction: estimator.Down, Bloat: tt.down[i]}, 1e6)
				}
				if i < len(tt.up) {
					m.Observe("wan", estimator.Observation{Direction: estimator.Up, Bloat: tt.up[i]}, 1e6)
				}
				// Another link's ticks must not end or start wan's runs.
				m.Observe("lte", estimator.Observation{Direction: estimator.Down, Bloat: i%2 == 0}, 1e6)
			}
			got := [2]float64{
				testutil.ToFloat64(m.bloatEvents.WithLabelValues("wan", "down")),
				testutil.ToFloat64(m.bloatEvents.WithLabelValues("wan", "up")),
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("bloat events [down up] (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMetricsDecisionCountsByReason(t *testing.T) {
	dec := func(link string, d estimator.Direction, r policies.Reason) controller.Decision {
		return controller.Decision{Link: link, Direction: d, Reason: r, From: 1e6, To: 2e6}
	}
	m, _ := newTestMetrics(t)
	m.AddLink("wan")
	for _, d := range []controller.Decision{
		dec("wan", estimator.Down, policies.ReasonStart),
		dec("wan", estimator.Up, policies.ReasonStart),
		dec("wan", estimator.Down, policies.ReasonProbe),
		dec("wan", estimator.Down, policies.ReasonProbe),
		dec("wan", estimator.Down, policies.ReasonBloat),
		dec("wan", estimator.Up, policies.ReasonBloat),
		dec("wan", estimator.Up, "custom"), // a reason AddLink does not know
		dec("lte", estimator.Down, policies.ReasonIdle),
	} {
		m.Decision(d)
	}
	for _, tt := range []struct {
		link, dir string
		reason    policies.Reason
		want      float64
	}{
		{"wan", "down", policies.ReasonStart, 1},
		{"wan", "up", policies.ReasonStart, 1},
		{"wan", "down", policies.ReasonProbe, 2},
		{"wan", "up", policies.ReasonProbe, 0},
		{"wan", "down", policies.ReasonBloat, 1},
		{"wan", "up", policies.ReasonBloat, 1},
		{"wan", "down", policies.ReasonDecay, 0},
		{"wan", "up", "custom", 1},
		{"lte", "down", policies.ReasonIdle, 1},
	} {
		if got := testutil.ToFloat64(m.rateChanges.WithLabelValues(tt.link, tt.dir, string(tt.reason))); got != tt.want {
			t.Errorf("rate changes %s/%s/%s = %v, want %v", tt.link, tt.dir, tt.reason, got, tt.want)
		}
	}
	// wan: 2×13 pre-created plus "custom"; lte: only the one it got.
	if got, want := testutil.CollectAndCount(m.rateChanges, metricRateChanges), 2*len(rateChangeReasons())+1+1; got != want {
		t.Errorf("%s has %d series, want %d", metricRateChanges, got, want)
	}
}

func TestMetricsSetStateFlipsGauge(t *testing.T) {
	m, _ := newTestMetrics(t)
	m.AddLink("wan")
	m.AddLink("lte")
	m.SetState("lte", controller.Stall)
	for _, tt := range []struct {
		set  controller.State
		want map[string]float64
	}{
		{controller.Active, map[string]float64{"active": 1, "idle": 0, "stall": 0}},
		{controller.Idle, map[string]float64{"active": 0, "idle": 1, "stall": 0}},
		{controller.Stall, map[string]float64{"active": 0, "idle": 0, "stall": 1}},
		{controller.Active, map[string]float64{"active": 1, "idle": 0, "stall": 0}},
	} {
		t.Run(tt.set.String(), func(t *testing.T) {
			m.SetState("wan", tt.set)
			got := map[string]float64{}
			for _, s := range controllerStates() {
				got[s.String()] = testutil.ToFloat64(m.state.WithLabelValues("wan", s.String()))
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("wan state gauge (-want +got):\n%s", diff)
			}
		})
	}
	if got := testutil.ToFloat64(m.state.WithLabelValues("lte", "stall")); got != 1 {
		t.Errorf("lte stall = %v, want 1 (another link's state must not move it)", got)
	}
	if got, want := testutil.CollectAndCount(m.state, metricState), 6; got != want {
		t.Errorf("%s has %d series, want %d", metricState, got, want)
	}
}

// gathered returns the value of every series of the named metric in reg,
// keyed by its label values joined with "/" in label-name order.
func gathered(t *testing.T, reg prometheus.Gatherer, name string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, mt := range mf.GetMetric() {
			var key []string
			for _, l := range mt.GetLabel() {
				key = append(key, l.GetValue())
			}
			var v float64
			switch {
			case mt.GetCounter() != nil:
				v = mt.GetCounter().GetValue()
			case mt.GetGauge() != nil:
				v = mt.GetGauge().GetValue()
			default:
				t.Fatalf("%s is neither a counter nor a gauge", name)
			}
			out[strings.Join(key, "/")] = v
		}
	}
	return out
}

func TestMetricsReflectors(t *testing.T) {
	a := netip.MustParseAddr("192.0.2.1")
	b := netip.MustParseAddr("198.51.100.7")
	c := netip.MustParseAddr("2001:db8::1")
	refl := func(addr netip.Addr, answered, lost uint64, baseline time.Duration) probe.ReflectorStats {
		return probe.ReflectorStats{Addr: addr, Answered: answered, Lost: lost, Baseline: baseline}
	}
	// Series are keyed "link/reflector".
	type series struct {
		Answered, Lost, Baseline map[string]float64
	}
	wan := func(addr netip.Addr) string { return "wan/" + addr.String() }
	lte := "lte/" + b.String()

	m, reg := newTestMetrics(t)
	m.AddLink("wan")
	// Another link probing the same reflector keeps its own series.
	m.Reflectors("lte", probe.PoolStats{Reflectors: []probe.ReflectorStats{refl(b, 100, 50, time.Second)}})

	for _, tt := range []struct {
		name string
		snap []probe.ReflectorStats
		want series
	}{
		{
			name: "first snapshot counts in full",
			snap: []probe.ReflectorStats{refl(a, 3, 1, 20*time.Millisecond), refl(b, 5, 0, 0)},
			want: series{
				Answered: map[string]float64{wan(a): 3, wan(b): 5, lte: 100},
				Lost:     map[string]float64{wan(a): 1, wan(b): 0, lte: 50},
				Baseline: map[string]float64{wan(a): 0.020, wan(b): 0, lte: 1},
			},
		},
		{
			name: "differences added",
			snap: []probe.ReflectorStats{refl(a, 10, 2, 18*time.Millisecond), refl(b, 9, 4, 30*time.Millisecond)},
			want: series{
				Answered: map[string]float64{wan(a): 10, wan(b): 9, lte: 100},
				Lost:     map[string]float64{wan(a): 2, wan(b): 4, lte: 50},
				Baseline: map[string]float64{wan(a): 0.018, wan(b): 0.030, lte: 1},
			},
		},
		{
			name: "no change",
			snap: []probe.ReflectorStats{refl(a, 10, 2, 18*time.Millisecond), refl(b, 9, 4, 30*time.Millisecond)},
			want: series{
				Answered: map[string]float64{wan(a): 10, wan(b): 9, lte: 100},
				Lost:     map[string]float64{wan(a): 2, wan(b): 4, lte: 50},
				Baseline: map[string]float64{wan(a): 0.018, wan(b): 0.030, lte: 1},
			},
		},
		{
			name: "vanished reflector deleted, new one added",
			snap: []probe.ReflectorStats{refl(a, 12, 2, 18*time.Millisecond), refl(c, 1, 0, 25*time.Millisecond)},
			want: series{
				Answered: map[string]float64{wan(a): 12, wan(c): 1, lte: 100},
				Lost:     map[string]float64{wan(a): 2, wan(c): 0, lte: 50},
				Baseline: map[string]float64{wan(a): 0.018, wan(c): 0.025, lte: 1},
			},
		},
		{
			// a left and rejoined between two snapshots: the pool restarted
			// its counts.
			name: "restarted counters count in full",
			snap: []probe.ReflectorStats{refl(a, 4, 1, 19*time.Millisecond), refl(c, 2, 0, 25*time.Millisecond)},
			want: series{
				Answered: map[string]float64{wan(a): 16, wan(c): 2, lte: 100},
				Lost:     map[string]float64{wan(a): 3, wan(c): 0, lte: 50},
				Baseline: map[string]float64{wan(a): 0.019, wan(c): 0.025, lte: 1},
			},
		},
		{
			name: "returning reflector starts a fresh series",
			snap: []probe.ReflectorStats{refl(a, 5, 1, 19*time.Millisecond), refl(b, 2, 1, 0)},
			want: series{
				Answered: map[string]float64{wan(a): 17, wan(b): 2, lte: 100},
				Lost:     map[string]float64{wan(a): 3, wan(b): 1, lte: 50},
				Baseline: map[string]float64{wan(a): 0.019, wan(b): 0, lte: 1},
			},
		},
		{
			name: "empty pool deletes all of the link",
			snap: nil,
			want: series{
				Answered: map[string]float64{lte: 100},
				Lost:     map[string]float64{lte: 50},
				Baseline: map[string]float64{lte: 1},
			},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m.Reflectors("wan", probe.PoolStats{State: probe.PoolProbing, Reflectors: tt.snap})
			got := series{
				Answered: gathered(t, reg, metricReflectorAnswered),
				Lost:     gathered(t, reg, metricReflectorLost),
				Baseline: gathered(t, reg, metricReflectorBaseline),
			}
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("reflector series (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMetricsNilIsNoOp(t *testing.T) {
	if m := NewMetrics(nil, "v1"); m != nil {
		t.Fatalf("NewMetrics(nil) = %v, want nil", m)
	}
	var m *Metrics
	m.AddLink("wan")
	m.Observe("wan", estimator.Observation{Direction: estimator.Up, Bloat: true, Reflectors: 1}, 1e6)
	m.Decision(controller.Decision{Link: "wan", Reason: policies.ReasonBloat})
	m.SetState("wan", controller.Stall)
	m.Reflectors("wan", probe.PoolStats{Reflectors: []probe.ReflectorStats{{Addr: netip.MustParseAddr("192.0.2.1"), Answered: 1}}})
}

func TestMetricsServe(t *testing.T) {
	ln, err := listenMetrics("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m, reg := newTestMetrics(t)
	m.AddLink("wan")
	m.Observe("wan", estimator.Observation{Direction: estimator.Down, Achieved: 1e6}, 2e6)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- serveMetrics(ctx, ln, reg, nil) }()

	// Loopback only: no proxy, whatever the environment says.
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil}}
	resp, err := client.Get("http://" + ln.Addr().String() + metricsPath)
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("reading the scrape: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape status %d, want 200:\n%s", resp.StatusCode, body)
	}
	for _, want := range []string{
		`autoshape_shaper_rate_bits{dir="down",link="wan"} 2e+06`,
		`autoshape_state{link="wan",state="active"} 0`,
		`autoshape_build_info{goversion="` + runtime.Version() + `",version="v1.2.3"} 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("scrape lacks %q:\n%s", want, body)
		}
	}
	client.CloseIdleConnections()

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serveMetrics after cancel = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serveMetrics did not return after cancel")
	}
	// The listener is closed: the port no longer answers.
	if c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err == nil {
		c.Close()
		t.Error("metrics port still accepts connections after shutdown")
	}
}

func TestMetricsListenFails(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, addr := range []string{busy.Addr().String(), "127.0.0.1:notaport"} {
		t.Run(addr, func(t *testing.T) {
			ln, err := listenMetrics(addr)
			if err == nil {
				ln.Close()
				t.Fatalf("listenMetrics(%q) succeeded, want an error", addr)
			}
			if !strings.Contains(err.Error(), addr) {
				t.Errorf("error %q does not name the address %q", err, addr)
			}
		})
	}
}

func TestMetricsServeFailsOnClosedListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	err = serveMetrics(context.Background(), ln, prometheus.NewRegistry(), nil)
	if err == nil || !strings.Contains(err.Error(), addr) {
		t.Errorf("serveMetrics on a closed listener = %v, want an error naming %s", err, addr)
	}
}

func TestMetricsConcurrentLinks(t *testing.T) {
	// One controller per link feeds the metrics from its own goroutine; run
	// with -race.
	m, reg := newTestMetrics(t)
	links := []string{"wan", "lte", "dsl"}
	done := make(chan struct{})
	for _, link := range links {
		go func() {
			defer func() { done <- struct{}{} }()
			m.AddLink(link)
			for i := range 200 {
				for _, d := range estimator.Directions {
					m.Observe(link, estimator.Observation{Direction: d, Bloat: i%4 == 0, Reflectors: 1, Delta: time.Millisecond}, 1e6)
					m.Decision(controller.Decision{Link: link, Direction: d, Reason: policies.ReasonProbe})
				}
				m.SetState(link, controller.State(i%3))
				m.Reflectors(link, probe.PoolStats{Reflectors: []probe.ReflectorStats{
					{Addr: netip.AddrFrom4([4]byte{192, 0, 2, byte(i % 5)}), Answered: uint64(i)},
				}})
			}
		}()
	}
	for range links {
		<-done
	}
	for _, link := range links {
		for _, dir := range []string{"down", "up"} {
			if got := testutil.ToFloat64(m.bloatEvents.WithLabelValues(link, dir)); got != 50 {
				t.Errorf("%s/%s bloat events = %v, want 50", link, dir, got)
			}
			if got := testutil.ToFloat64(m.rateChanges.WithLabelValues(link, dir, string(policies.ReasonProbe))); got != 200 {
				t.Errorf("%s/%s probe_up changes = %v, want 200", link, dir, got)
			}
		}
	}
	if got := len(gathered(t, reg, metricReflectorAnswered)); got != len(links) {
		t.Errorf("%d reflector series, want %d (one per link)", got, len(links))
	}
}
