package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
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

// save writes the state atomically: a temporary file beside it, synced and
// renamed into place.
func (st stateFile) save(path string) error {
	st.Version = 1
	st.Saved = time.Now().UTC()
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

// decisionFile appends decision records as JSON lines and rotates the file
// (to FILE.1) when it passes maxBytes.
type decisionFile struct {
	path     string
	maxBytes int64
	mu       sync.Mutex
}

func (f *decisionFile) write(d controller.Decision) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if st, err := os.Stat(f.path); err == nil && f.maxBytes > 0 && st.Size() >= f.maxBytes {
		if err := os.Rename(f.path, f.path+".1"); err != nil {
			return err
		}
	}
	out, err := os.OpenFile(f.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if err := controller.WriteRecord(out, d); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// dryShaper stands in for the shaper in --dry-run: it logs what it would
// write and reads the interface's counters (received bytes for download,
// sent for upload), so the loop sees the traffic.
type dryShaper struct {
	iface string
	rx    bool
	log   *zap.Logger
	rate  uint64
}

func (s *dryShaper) SetRate(_ context.Context, bps uint64) (actuator.Change, error) {
	ch := actuator.Change{Iface: s.iface, Kind: "dry-run", From: s.rate, To: bps}
	s.rate = bps
	return ch, nil
}

func (s *dryShaper) Stats(context.Context) (actuator.Stats, error) {
	rx, tx, err := actuator.Counters(s.iface, 0)
	if err != nil {
		return actuator.Stats{}, err
	}
	if s.rx {
		return actuator.Stats{Bytes: rx}, nil
	}
	return actuator.Stats{Bytes: tx}, nil
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

// startMetrics serves the metrics on addr until ctx ends or stop is called.
func startMetrics(ctx context.Context, addr, version string, log *zap.Logger) (*Metrics, func(), error) {
	ln, err := listenMetrics(addr)
	if err != nil {
		return nil, nil, err
	}
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg, version)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := serveMetrics(ctx, ln, reg, log); err != nil {
			log.Error("metrics server stopped", zap.Error(err))
		}
	}()
	return m, func() { cancel(); <-done }, nil
}
