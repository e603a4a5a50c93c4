package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/autoshape/autoshape/actuator"
	"github.com/autoshape/autoshape/config"
	"github.com/autoshape/autoshape/controller"
	"github.com/autoshape/autoshape/estimator"
	"github.com/autoshape/autoshape/policies"
)

func TestStateFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "state.json")
	if st := loadState(path, zap.NewNop()); len(st.Links) != 0 {
		t.Errorf("a missing state file gave %+v, want an empty state", st)
	}
	st := stateFile{Links: map[string]linkState{"wan": {DownKbit: 20000, UpKbit: 5000, Reflectors: []string{"192.0.2.1"}}}}
	if err := st.save(path, time.Now()); err != nil {
		t.Fatalf("save() failed: %v", err)
	}
	got := loadState(path, zap.NewNop())
	if l := got.Links["wan"]; l.DownKbit != 20000 || l.UpKbit != 5000 || len(l.Reflectors) != 1 {
		t.Errorf("read back %+v", got)
	}
	if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 1 {
		t.Errorf("save() left %d files, want only the state file", len(entries))
	}
	for name, content := range map[string]string{
		"corrupt": "{not json",
		"version": `{"version": 7, "links": {}}`,
		"empty":   "",
	} {
		t.Run(name, func(t *testing.T) {
			os.WriteFile(path, []byte(content), 0o644)
			if st := loadState(path, zap.NewNop()); len(st.Links) != 0 || st.Links == nil {
				t.Errorf("a %s state file gave %+v, want it ignored", name, st)
			}
		})
	}
}

func TestDecisionFileRotates(t *testing.T) {
	path := filepath.Join(t.TempDir(), "decisions.jsonl")
	f := NewRecordFile(RecordFileConfig{Path: path, MaxBytes: 1000})
	d := controller.Decision{Time: time.Unix(1, 0), Link: "wan", Direction: estimator.Down, From: 1e6, To: 2e6}
	for range 20 {
		if err := f.Write(d); err != nil {
			t.Fatal(err)
		}
	}
	cur, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	old, err := os.ReadFile(path + ".1")
	if err != nil {
		t.Fatalf("no rotated file: %v", err)
	}
	if len(cur) >= 1000+400 || len(old) < 1000 {
		t.Errorf("sizes: current %d, rotated %d: want the current under the limit plus a line, the rotated at it", len(cur), len(old))
	}
	if n := strings.Count(string(cur), "\n") + strings.Count(string(old), "\n"); n > 20 || n < 10 {
		t.Errorf("%d lines kept in the two files", n)
	}
	var rec controller.Record
	first, _, _ := strings.Cut(string(cur), "\n")
	if err := json.Unmarshal([]byte(first), &rec); err != nil || rec.RateKbit != 2000 {
		t.Errorf("the current file does not read back: %v %+v", err, rec)
	}
}

// TestShapingWatchWarnsOncePerEvent: what Link.Check finds is one WARN
// line when it appears, none while it stays, and one again when it comes
// back after it was gone.
func TestShapingWatchWarnsOncePerEvent(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	w := &shapingWatch{log: zap.New(core)}
	ingress := actuator.Drift{Dev: "wan0", Found: "no ingress qdisc", Done: "added it again"}
	foreign := actuator.Drift{Dev: "wan0", Found: "htb 5: at the root, not autoshape's", Done: "left it alone"}
	made := actuator.Drift{Dev: "ifb4wan0", Found: "no root qdisc", Done: "made it again", Changed: true}
	gone := fmt.Errorf("interface %q: %w", "wan0", actuator.ErrLinkGone)
	for _, step := range []struct {
		drifts  []actuator.Drift
		err     error
		changed bool
	}{
		{drifts: []actuator.Drift{ingress}},
		{},
		{drifts: []actuator.Drift{foreign}},
		{drifts: []actuator.Drift{foreign}},
		{drifts: []actuator.Drift{foreign, ingress}},
		{drifts: []actuator.Drift{foreign, made}, changed: true},
		{drifts: []actuator.Drift{foreign}},
		{err: gone},
		{err: gone},
		{},
		{drifts: []actuator.Drift{ingress}},
	} {
		if got := w.report(step.drifts, step.err); got != step.changed {
			t.Errorf("report(%v, %v) = %v, want %v", step.drifts, step.err, got, step.changed)
		}
	}
	var got []string
	for _, e := range logs.All() {
		if e.Level != zap.WarnLevel {
			t.Errorf("a %s line, want WARN: %s", e.Level, e.Message)
		}
		m := e.ContextMap()
		got = append(got, fmt.Sprintf("%v|%v|%v", m["dev"], m["found"], m["error"]))
	}
	want := []string{
		"wan0|no ingress qdisc|<nil>",
		"wan0|htb 5: at the root, not autoshape's|<nil>",
		"wan0|no ingress qdisc|<nil>",
		"ifb4wan0|no root qdisc|<nil>",
		`<nil>|<nil>|interface "wan0": no such interface`,
		"wan0|no ingress qdisc|<nil>",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("WARN lines (-want +got):\n%s", diff)
	}
}

// freePort returns a loopback address with a port nobody listens on now.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// scrapes reports whether metrics are served at addr.
func scrapes(addr string) bool {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + metricsPath)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode == http.StatusOK && strings.Contains(string(b), metricBuildInfo)
}

// TestReloadAppliesSettings: a reload applies the log level, the metrics
// server's address and the decision file, the last also to links that the
// reload leaves running.
func TestReloadAppliesSettings(t *testing.T) {
	var logBuf safeLog
	level := zap.NewAtomicLevelAt(zap.InfoLevel)
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(&logBuf), level))
	dir := t.TempDir()
	addrA, addrB := freePort(t), freePort(t)
	cur := config.Config{LogLevel: "info", MetricsListen: addrA, Decisions: filepath.Join(dir, "a.jsonl"), DecisionsMaxMB: 10}
	d := New(Options{Logger: log, Level: level})
	d.metrics = NewMetrics("v")
	d.server = &metricsServer{metrics: d.metrics, log: log}
	d.decisions = NewRecordFile(RecordFileConfig{Path: cur.Decisions, MaxBytes: 10 << 20, Logger: log})
	ctx := context.Background()
	if err := d.server.serve(ctx, cur.MetricsListen); err != nil {
		t.Fatal(err)
	}
	defer d.server.stop()
	// A link that runs on through the reload.
	r := d.newLinkRunner(config.Link{Name: "wan"})
	dec := controller.Decision{Time: time.Unix(1, 0), Link: "wan", Direction: estimator.Down, From: 1e6, To: 2e6}
	r.record(dec, true)

	next := cur
	next.LogLevel, next.MetricsListen, next.Decisions = "warn", addrB, filepath.Join(dir, "b.jsonl")
	d.reconfigure(ctx, cur, next)
	r.record(dec, true)
	log.Info("an info line after the reload")
	log.Warn("a warn line after the reload")

	if !scrapes(addrB) || scrapes(addrA) {
		t.Errorf("after the move: served at the new address %v, at the old %v; want only the new", scrapes(addrB), scrapes(addrA))
	}
	for _, f := range []struct {
		name string
		want int
	}{{"a.jsonl", 1}, {"b.jsonl", 1}} {
		b, _ := os.ReadFile(filepath.Join(dir, f.name))
		if got := strings.Count(string(b), "\n"); got != f.want {
			t.Errorf("%s holds %d records, want %d", f.name, got, f.want)
		}
	}
	out := logBuf.String()
	if strings.Contains(out, "an info line after the reload") || !strings.Contains(out, "a warn line after the reload") {
		t.Errorf("at level warn the log holds:\n%s", out)
	}

	// Metrics off, and on again at the first address.
	off := next
	off.MetricsListen = ""
	d.reconfigure(ctx, next, off)
	if scrapes(addrB) {
		t.Errorf("metrics still served at %s after listen = \"\"", addrB)
	}
	d.reconfigure(ctx, off, cur)
	if !scrapes(addrA) {
		t.Errorf("metrics not served at %s again", addrA)
	}
}

// TestMetricsServerMoveFails: a new address that cannot be listened on
// leaves the metrics where they were, and says so.
func TestMetricsServerMoveFails(t *testing.T) {
	s := &metricsServer{metrics: NewMetrics("v"), log: zap.NewNop()}
	addr := freePort(t)
	if err := s.serve(context.Background(), addr); err != nil {
		t.Fatal(err)
	}
	defer s.stop()
	if err := s.serve(context.Background(), "192.0.2.1:9877"); err == nil {
		t.Errorf("serve() on an address this host does not have succeeded")
	}
	if !scrapes(addr) || s.addr != addr {
		t.Errorf("after a failed move the metrics are not served at %s (addr %q)", addr, s.addr)
	}
}

// safeLog collects log output from several goroutines.
type safeLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *safeLog) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *safeLog) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestSummaryPercentiles(t *testing.T) {
	if got := percentile(nil, 0.5); got != 0 {
		t.Errorf("percentile(nil) = %v", got)
	}
	v := []float64{5, 1, 3, 2, 4}
	if p50, p95 := percentile(v, 0.5), percentile(v, 0.95); p50 != 3 || p95 != 5 {
		t.Errorf("p50 %v p95 %v, want 3 and 5", p50, p95)
	}
	s := newSummary()
	for range 5000 {
		s.add(estimator.Observation{Direction: estimator.Down, Delta: time.Millisecond})
	}
	if len(s.delays[estimator.Down]) != 1200 {
		t.Errorf("the summary kept %d delays, want it bounded at 1200", len(s.delays[estimator.Down]))
	}
}

// TestEventLog: gradual steps are never logged at INFO; events are, in each
// direction, at most once every eventEvery; the summary counts every cut.
func TestEventLog(t *testing.T) {
	t0 := time.Unix(1000, 0)
	dec := func(ms int, dir estimator.Direction, reason policies.Reason, from, to float64) controller.Decision {
		return controller.Decision{Time: t0.Add(time.Duration(ms) * time.Millisecond), Direction: dir, Reason: reason, From: from, To: to}
	}
	steps := []struct {
		d    controller.Decision
		info bool
	}{
		{dec(0, estimator.Down, policies.ReasonStart, 0, 20e6), true},
		{dec(0, estimator.Up, policies.ReasonStart, 0, 10e6), true},
		{dec(50, estimator.Down, policies.ReasonProbe, 20e6, 21e6), false},
		{dec(100, estimator.Down, policies.ReasonBloat, 21e6, 15e6), false}, // 100 ms after the start
		{dec(150, estimator.Up, policies.ReasonBloat, 10e6, 8e6), false},
		{dec(10_000, estimator.Down, policies.ReasonEase, 15e6, 14e6), true},
		{dec(10_050, estimator.Down, policies.ReasonBloat, 14e6, 12e6), false},
		{dec(10_100, estimator.Up, policies.ReasonBloat, 8e6, 7e6), true},
		{dec(20_000, estimator.Down, policies.ReasonDecay, 12e6, 12.1e6), false},
	}
	var e eventLog
	s := newSummary()
	for i, st := range steps {
		if got := e.info(st.d); got != st.info {
			t.Errorf("step %d (%s %s at %v): info %v, want %v", i, st.d.Direction, st.d.Reason, st.d.Time.Sub(t0), got, st.info)
		}
		s.decision(st.d)
	}
	if s.cuts[estimator.Down] != 3 || s.cuts[estimator.Up] != 2 {
		t.Errorf("cuts counted: down %d, up %d; want 3 and 2", s.cuts[estimator.Down], s.cuts[estimator.Up])
	}
}
