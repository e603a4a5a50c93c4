package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/autoshape/autoshape/actuator"
	"github.com/autoshape/autoshape/controller"
	"github.com/autoshape/autoshape/estimator"
)

// stateFile is what survives a restart: per link the rates reached and the
// reflectors that were active.
type stateFile struct {
	Version int                  `json:"version"`
	Saved   time.Time            `json:"saved"`
	Links   map[string]linkState `json:"links"`
}

type linkState struct {
	DownKbit   float64  `json:"down_kbit"`
	UpKbit     float64  `json:"up_kbit"`
	Reflectors []string `json:"reflectors,omitempty"`
}

// loadState reads the state file; a missing one is an empty state, a
// corrupt one is reported and ignored, never fatal.
func loadState(path string, log *zap.Logger) stateFile {
	st := stateFile{Version: 1, Links: map[string]linkState{}}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return st
	}
	var read stateFile
	if err == nil {
		err = json.Unmarshal(b, &read)
	}
	if err == nil && read.Version != 1 {
		err = fmt.Errorf("unknown version %d", read.Version)
	}
	if err != nil {
		log.Warn("ignoring the state file", zap.String("path", path), zap.Error(err))
		return st
	}
	if read.Links != nil {
		st.Links = read.Links
	}
	return st
}

// save writes the state, saved at now, atomically: a temporary file beside
// it, synced and renamed into place.
func (st stateFile) save(path string, now time.Time) error {
	st.Version = 1
	st.Saved = now.UTC()
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".state-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// summary gathers a minute of observations for one INFO line.
type summary struct {
	next   time.Time
	delays [2][]float64 // ms, bounded: 1200 ticks a minute
}

func newSummary() *summary { return &summary{} }

func (s *summary) add(o estimator.Observation) {
	if len(s.delays[o.Direction]) < 1200 {
		s.delays[o.Direction] = append(s.delays[o.Direction], float64(o.Delta)/float64(time.Millisecond))
	}
}

func (s *summary) due(now time.Time) bool {
	if s.next.IsZero() {
		s.next = now.Add(time.Minute)
	}
	return !now.Before(s.next)
}

// log writes the minute's summary and starts the next minute.
func (s *summary) log(log *zap.Logger, now time.Time, c *controller.Controller, reflectors int) {
	fields := []zap.Field{zap.String("state", c.State().String()), zap.Int("active_reflectors", reflectors)}
	for _, d := range estimator.Directions {
		o := c.Observation(d)
		p50, p95 := percentile(s.delays[d], 0.5), percentile(s.delays[d], 0.95)
		fields = append(fields,
			zap.Float64(d.String()+"_rate_kbit", c.Rate(d)/1000),
			zap.Float64(d.String()+"_achieved_kbit", o.Achieved/1000),
			zap.Float64(d.String()+"_capacity_estimate_kbit", o.CapacityEstimate/1000),
			zap.Float64(d.String()+"_delay_p50_ms", p50),
			zap.Float64(d.String()+"_delay_p95_ms", p95))
		s.delays[d] = s.delays[d][:0]
	}
	log.Info("summary", fields...)
	s.next = now.Add(time.Minute)
}

func percentile(v []float64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[max(int(math.Ceil(p*float64(len(s))))-1, 0)]
}

// A metricsServer serves one registry on an address that a reload may
// change.
type metricsServer struct {
	reg *prometheus.Registry
	log *zap.Logger

	addr   string // "" while it serves nothing
	cancel context.CancelFunc
	done   chan struct{}
}

// serve makes the server listen on addr, "" for nowhere. It listens on the
// new address before it lets the old one go, unless the old one is in the
// way (the same port); when the new address fails it keeps or takes back
// the old one and returns the error.
func (s *metricsServer) serve(ctx context.Context, addr string) error {
	if addr == s.addr {
		return nil
	}
	if addr == "" {
		s.stop()
		return nil
	}
	ln, err := listenMetrics(addr)
	if err != nil && s.addr != "" {
		old := s.addr
		s.stop()
		if ln, err = listenMetrics(addr); err != nil {
			if back, berr := listenMetrics(old); berr == nil {
				s.start(ctx, old, back)
			}
			return err
		}
	}
	if err != nil {
		return err
	}
	s.stop()
	s.start(ctx, addr, ln)
	return nil
}

// start serves on ln until stop or the end of ctx.
func (s *metricsServer) start(ctx context.Context, addr string, ln net.Listener) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := serveMetrics(ctx, ln, s.reg, s.log); err != nil {
			s.log.Error("metrics server stopped", zap.Error(err))
		}
	}()
	s.addr, s.cancel, s.done = addr, cancel, done
}

// stop stops serving and waits until the listener is closed.
func (s *metricsServer) stop() {
	if s.cancel == nil {
		return
	}
	s.cancel()
	<-s.done
	s.addr, s.cancel, s.done = "", nil, nil
}

// A shapingWatch logs what Link.Check finds: one WARN line when a drift
// (or a failure to check) appears, none while it stays, and one again when
// it comes back after it was gone.
type shapingWatch struct {
	log  *zap.Logger
	last map[string]bool
}

// report logs what is new in drifts and err since the last report, and
// says whether the check made or attached to a root.
func (w *shapingWatch) report(drifts []actuator.Drift, err error) (changed bool) {
	seen := map[string]bool{}
	for _, d := range drifts {
		changed = changed || d.Changed
		k := d.String()
		seen[k] = true
		if w.last[k] {
			continue
		}
		fields := []zap.Field{zap.String("dev", d.Dev), zap.String("found", d.Found), zap.String("action", d.Done)}
		if d.Err != nil {
			fields = append(fields, zap.Error(d.Err))
		}
		w.log.Warn("the shaping changed behind autoshape's back", fields...)
	}
	if err != nil {
		k := "error: " + err.Error()
		seen[k] = true
		switch {
		case w.last[k]:
		case errors.Is(err, actuator.ErrLinkGone):
			w.log.Warn("the interface is gone: waiting for it to come back", zap.Error(err))
		default:
			w.log.Warn("failed to check the shaping: checking again later", zap.Error(err))
		}
	}
	w.last = seen
	return changed
}
