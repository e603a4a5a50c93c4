package daemon

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/autoshape/autoshape/controller"
	"github.com/autoshape/autoshape/estimator"
	"github.com/autoshape/autoshape/policies"
	"github.com/autoshape/autoshape/probe"
)

// A scraped is one exposition: the text, each series' value by its name
// and labels as written, and each family's type.
type scraped struct {
	text   string
	values map[string]float64
	types  map[string]string
}

// scrape reads what m writes. It fails the test on a line that is not in
// the text format, a series without its family's TYPE line before it, or a
// family written twice.
func scrape(t *testing.T, m *Metrics) scraped {
	t.Helper()
	var b strings.Builder
	m.WritePrometheus(&b)
	return parseExposition(t, b.String())
}

func parseExposition(t *testing.T, text string) scraped {
	t.Helper()
	sc := scraped{text: text, values: map[string]float64{}, types: map[string]string{}}
	family := ""
	for _, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		if f, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, typ, _ := strings.Cut(f, " ")
			if _, dup := sc.types[name]; dup {
				t.Fatalf("family %s written twice:\n%s", name, text)
			}
			sc.types[name], family = typ, name
			continue
		}
		if strings.HasPrefix(line, "# HELP ") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			t.Fatalf("line %q is not a sample", line)
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		series := line[:i]
		name, _, _ := strings.Cut(series, "{")
		if name != family && !(sc.types[family] == "histogram" && strings.HasPrefix(name, family+"_")) {
			t.Fatalf("series %s is not under its family's TYPE line (last %q)", series, family)
		}
		sc.values[series] = v
	}
	return sc
}

// count returns how many series family name has; a histogram's are
// counted by their _count.
func (sc scraped) count(name string) int {
	if sc.types[name] == "histogram" {
		name += "_count"
	}
	n := 0
	for s := range sc.values {
		if strings.HasPrefix(s, name+"{") {
			n++
		}
	}
	return n
}

// value returns the value of family name's series with labels (name,
// value pairs in the order of the names), failing the test when there is
// none.
func (sc scraped) value(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	s := (&family{name: name}).series(labels...)
	v, ok := sc.values[s]
	if !ok {
		t.Fatalf("no series %s in:\n%s", s, sc.text)
	}
	return v
}

var labelRE = regexp.MustCompile(`[a-z]+="([^"]*)"`)

// byLabels returns the value of every series of family name, keyed by its
// label values joined with "/" in label-name order.
func (sc scraped) byLabels(name string) map[string]float64 {
	out := map[string]float64{}
	for s, v := range sc.values {
		labels, ok := strings.CutPrefix(s, name+"{")
		if !ok {
			continue
		}
		var key []string
		for _, m := range labelRE.FindAllStringSubmatch(labels, -1) {
			key = append(key, m[1])
		}
		out[strings.Join(key, "/")] = v
	}
	return out
}

func TestMetricsAddLinkPrecreatesSeries(t *testing.T) {
	m := NewMetrics("v1.2.3")
	m.AddLink("wan")
	m.AddLink("wan") // idempotent

	sc := scrape(t, m)
	nReasons := len(rateChangeReasons())
	for _, tt := range []struct {
		name, typ string
		want      int
	}{
		{metricShaperRate, "gauge", 2},
		{metricAchievedRate, "gauge", 2},
		{metricCapacityEstimate, "gauge", 2},
		{metricDelayDelta, "histogram", 2},
		{metricBloatEvents, "counter", 2},
		{metricRateChanges, "counter", 2 * nReasons},
		{metricState, "gauge", 3},
		{metricReflectorBaseline, "", 0},
		{metricReflectorAnswered, "", 0},
		{metricReflectorLost, "", 0},
		{metricBuildInfo, "gauge", 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := sc.count(tt.name); got != tt.want {
				t.Errorf("%s has %d series, want %d", tt.name, got, tt.want)
			}
			if got := sc.types[tt.name]; got != tt.typ {
				t.Errorf("%s has type %q, want %q", tt.name, got, tt.typ)
			}
		})
	}

	for _, want := range []string{`
# HELP autoshape_bloat_events_total Times bloat was detected after a tick without it.
# TYPE autoshape_bloat_events_total counter
autoshape_bloat_events_total{dir="down",link="wan"} 0
autoshape_bloat_events_total{dir="up",link="wan"} 0
`, `
# HELP autoshape_shaper_rate_bits The rate the shaper is set to, in bit/s.
# TYPE autoshape_shaper_rate_bits gauge
autoshape_shaper_rate_bits{dir="down",link="wan"} 0
autoshape_shaper_rate_bits{dir="up",link="wan"} 0
`, `
# HELP autoshape_state The controller's state for the link: 1 for the current state, 0 for the others.
# TYPE autoshape_state gauge
autoshape_state{link="wan",state="active"} 0
autoshape_state{link="wan",state="idle"} 0
autoshape_state{link="wan",state="stall"} 0
`} {
		if !strings.Contains(sc.text, want) {
			t.Errorf("the metrics lack%s\ngot:\n%s", want, sc.text)
		}
	}
	for _, r := range rateChangeReasons() {
		if got := sc.value(t, metricRateChanges, labelDir, "up", labelLink, "wan", labelReason, string(r)); got != 0 {
			t.Errorf("rate changes for %q = %v, want 0", r, got)
		}
	}
}

func TestMetricsBuildInfo(t *testing.T) {
	want := `# HELP autoshape_build_info Always 1; its labels name the version of autoshape and of Go it was built with.
# TYPE autoshape_build_info gauge
autoshape_build_info{goversion="` + runtime.Version() + `",version="v1.2.3"} 1
`
	if got := scrape(t, NewMetrics("v1.2.3")).text; !strings.Contains(got, want) {
		t.Errorf("the metrics lack\n%s\ngot:\n%s", want, got)
	}
}

func TestMetricsLabelValuesEscaped(t *testing.T) {
	m := NewMetrics("v1")
	m.SetState("a\"b\\c\nd", controller.Idle)
	want := `autoshape_state{link="a\"b\\c\nd",state="idle"} 1`
	if got := scrape(t, m).text; !strings.Contains(got, want) {
		t.Errorf("the metrics lack %s:\n%s", want, got)
	}
}

func TestMetricsObserveGauges(t *testing.T) {
	m := NewMetrics("v1.2.3")
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

	sc := scrape(t, m)
	for _, tt := range []struct {
		name, metric, dir string
		want              float64
	}{
		{"down rate", metricShaperRate, "down", 50e6},
		{"down achieved", metricAchievedRate, "down", 45e6},
		{"down capacity", metricCapacityEstimate, "down", 52e6},
		{"up rate", metricShaperRate, "up", 10e6},
		{"up achieved", metricAchievedRate, "up", 8e6},
		{"up capacity", metricCapacityEstimate, "up", 0},
		{"down delay count", metricDelayDelta + "_count", "down", 1},
		{"down delay sum", metricDelayDelta + "_sum", "down", 0.003},
		{"up delay count", metricDelayDelta + "_count", "up", 1},
		{"up delay sum", metricDelayDelta + "_sum", "up", 0.040},
	} {
		if got := sc.value(t, tt.metric, labelDir, tt.dir, labelLink, "wan"); got != tt.want {
			t.Errorf("%s = %v, want %v", tt.name, got, tt.want)
		}
	}
	// The buckets are cumulative: 3ms is above 2ms and within 4ms.
	for _, tt := range []struct {
		le   string
		want float64
	}{{"0.002", 0}, {"0.004", 1}, {"2.048", 1}, {"+Inf", 1}} {
		if got := sc.value(t, metricDelayDelta+"_bucket", labelDir, "down", labelLink, "wan", "le", tt.le); got != tt.want {
			t.Errorf("down delay bucket le=%s = %v, want %v", tt.le, got, tt.want)
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
			m := NewMetrics("v1.2.3")
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
			sc := scrape(t, m)
			got := [2]float64{
				sc.value(t, metricBloatEvents, labelDir, "down", labelLink, "wan"),
				sc.value(t, metricBloatEvents, labelDir, "up", labelLink, "wan"),
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
	m := NewMetrics("v1.2.3")
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
	sc := scrape(t, m)
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
		if got := sc.value(t, metricRateChanges, labelDir, tt.dir, labelLink, tt.link, labelReason, string(tt.reason)); got != tt.want {
			t.Errorf("rate changes %s/%s/%s = %v, want %v", tt.link, tt.dir, tt.reason, got, tt.want)
		}
	}
	// wan: 2×13 pre-created plus "custom"; lte: only the one it got.
	if got, want := sc.count(metricRateChanges), 2*len(rateChangeReasons())+1+1; got != want {
		t.Errorf("%s has %d series, want %d", metricRateChanges, got, want)
	}
}

func TestMetricsSetStateFlipsGauge(t *testing.T) {
	m := NewMetrics("v1.2.3")
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
			sc := scrape(t, m)
			got := map[string]float64{}
			for _, s := range controllerStates() {
				got[s.String()] = sc.value(t, metricState, labelLink, "wan", labelState, s.String())
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("wan state gauge (-want +got):\n%s", diff)
			}
		})
	}
	sc := scrape(t, m)
	if got := sc.value(t, metricState, labelLink, "lte", labelState, "stall"); got != 1 {
		t.Errorf("lte stall = %v, want 1 (another link's state must not move it)", got)
	}
	if got, want := sc.count(metricState), 6; got != want {
		t.Errorf("%s has %d series, want %d", metricState, got, want)
	}
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

	m := NewMetrics("v1.2.3")
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
			sc := scrape(t, m)
			got := series{
				Answered: sc.byLabels(metricReflectorAnswered),
				Lost:     sc.byLabels(metricReflectorLost),
				Baseline: sc.byLabels(metricReflectorBaseline),
			}
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("reflector series (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMetricsNilIsNoOp(t *testing.T) {
	var m *Metrics
	m.AddLink("wan")
	m.Observe("wan", estimator.Observation{Direction: estimator.Up, Bloat: true, Reflectors: 1}, 1e6)
	m.Decision(controller.Decision{Link: "wan", Reason: policies.ReasonBloat})
	m.SetState("wan", controller.Stall)
	m.Reflectors("wan", probe.PoolStats{Reflectors: []probe.ReflectorStats{{Addr: netip.MustParseAddr("192.0.2.1"), Answered: 1}}})
	var b strings.Builder
	m.WritePrometheus(&b)
	if b.Len() != 0 {
		t.Errorf("a nil *Metrics wrote %q", b.String())
	}
}

// startServing serves m on a loopback port until the test ends, and
// returns the address.
func startServing(t *testing.T, m *Metrics) string {
	t.Helper()
	ln, err := listenMetrics("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serveMetrics(ctx, ln, m, nil) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serveMetrics after cancel = %v, want nil", err)
		}
	})
	return ln.Addr().String()
}

func TestMetricsServe(t *testing.T) {
	m := NewMetrics("v1.2.3")
	m.AddLink("wan")
	m.Observe("wan", estimator.Observation{Direction: estimator.Down, Achieved: 1e6}, 2e6)
	m.SetState("wan", controller.Active)

	ln, err := listenMetrics("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- serveMetrics(ctx, ln, m, nil) }()

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
	if got, want := resp.Header.Get("Content-Type"), "text/plain; version=0.0.4; charset=utf-8"; got != want {
		t.Errorf("Content-Type %q, want %q", got, want)
	}
	sc := parseExposition(t, string(body))
	for _, tt := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{metricShaperRate, []string{labelDir, "down", labelLink, "wan"}, 2e6},
		{metricState, []string{labelLink, "wan", labelState, "active"}, 1},
		{metricBuildInfo, []string{labelGoVersion, runtime.Version(), labelVersion, "v1.2.3"}, 1},
	} {
		if got := sc.value(t, tt.name, tt.labels...); got != tt.want {
			t.Errorf("%s%v = %v, want %v", tt.name, tt.labels, got, tt.want)
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

func TestMetricsServeAnswers(t *testing.T) {
	addr := startServing(t, NewMetrics("v1"))
	for _, tt := range []struct {
		name       string
		request    string
		wantStatus string
		wantBody   bool // the metrics
	}{
		{"get", "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", "HTTP/1.1 200 OK", true},
		{"query and bare newlines", "GET /metrics?name[]=x HTTP/1.0\n\n", "HTTP/1.1 200 OK", true},
		{"head", "HEAD /metrics HTTP/1.1\r\n\r\n", "HTTP/1.1 200 OK", false},
		{"other path", "GET / HTTP/1.1\r\n\r\n", "HTTP/1.1 404 Not Found", false},
		{"post", "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n", "HTTP/1.1 405 Method Not Allowed", false},
		{"not http", "hello\r\n\r\n", "HTTP/1.1 400 Bad Request", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			io.WriteString(c, tt.request)
			// The server closes the connection after its answer.
			answer, err := io.ReadAll(bufio.NewReader(c))
			if err != nil {
				t.Fatalf("reading the answer: %v", err)
			}
			status, _, _ := strings.Cut(string(answer), "\r\n")
			if status != tt.wantStatus {
				t.Errorf("%q answered %q, want %q", tt.request, status, tt.wantStatus)
			}
			if got := strings.Contains(string(answer), metricBuildInfo); got != tt.wantBody {
				t.Errorf("%q: metrics in the answer %v, want %v:\n%s", tt.request, got, tt.wantBody, answer)
			}
		})
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
	err = serveMetrics(context.Background(), ln, NewMetrics("v1"), nil)
	if err == nil || !strings.Contains(err.Error(), addr) {
		t.Errorf("serveMetrics on a closed listener = %v, want an error naming %s", err, addr)
	}
}

func TestMetricsConcurrentLinks(t *testing.T) {
	// One controller per link feeds the metrics from its own goroutine
	// while scrapes read them; run with -race.
	m := NewMetrics("v1.2.3")
	links := []string{"wan", "lte", "dsl"}
	var wg sync.WaitGroup
	for _, link := range links {
		wg.Go(func() {
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
		})
	}
	wg.Go(func() {
		for range 20 {
			m.WritePrometheus(io.Discard)
		}
	})
	wg.Wait()
	sc := scrape(t, m)
	for _, link := range links {
		for _, dir := range []string{"down", "up"} {
			if got := sc.value(t, metricBloatEvents, labelDir, dir, labelLink, link); got != 50 {
				t.Errorf("%s/%s bloat events = %v, want 50", link, dir, got)
			}
			if got := sc.value(t, metricRateChanges, labelDir, dir, labelLink, link, labelReason, string(policies.ReasonProbe)); got != 200 {
				t.Errorf("%s/%s probe_up changes = %v, want 200", link, dir, got)
			}
		}
	}
	if got := sc.count(metricReflectorAnswered); got != len(links) {
		t.Errorf("%d reflector series, want %d (one per link)", got, len(links))
	}
}
