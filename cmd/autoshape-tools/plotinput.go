package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/autoshape/autoshape/controller"
	"github.com/autoshape/autoshape/sweep"
)

// A plotInput is one decoded --in file.
type plotInput struct {
	name      string
	report    *simReport          // simulate or linklab run --json
	sweep     *sweep.Report       // sweep --json
	decisions []controller.Record // the daemon's decision file
}

// kind returns the figure an input makes by default.
func (in plotInput) kind() string {
	if in.sweep != nil {
		return "sweep"
	}
	return "timeseries"
}

// readPlotInput reads and recognises one input file.
func readPlotInput(path string) (plotInput, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return plotInput{}, err
	}
	in, err := decodePlotInput(path, b)
	if err != nil {
		return plotInput{}, fmt.Errorf("%s: %w", path, err)
	}
	return in, nil
}

// decodePlotInput recognises simulate/linklab JSON, sweep JSON and the
// JSON-lines decision file by their keys.
func decodePlotInput(name string, b []byte) (plotInput, error) {
	in := plotInput{name: name}
	if len(bytes.TrimSpace(b)) == 0 {
		return in, errors.New("empty input")
	}
	var first map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&first); err != nil {
		return in, fmt.Errorf("not JSON: %w", err)
	}
	switch {
	case first["results"] != nil:
		var r simReport
		if err := strictJSON(b, &r); err != nil {
			return in, fmt.Errorf("not a simulation report: %w", err)
		}
		if len(r.Results) == 0 {
			return in, errors.New("a simulation report without results")
		}
		if err := checkReport(r); err != nil {
			return in, err
		}
		in.report = &r
	case first["steps"] != nil:
		var r sweep.Report
		if err := strictJSON(b, &r); err != nil {
			return in, fmt.Errorf("not a sweep report: %w", err)
		}
		if len(r.Steps) == 0 {
			return in, errors.New("a sweep report without steps")
		}
		if err := checkSweep(r); err != nil {
			return in, err
		}
		in.sweep = &r
	case first["rate_kbit"] != nil && first["dir"] != nil:
		recs, err := readRecords(bytes.NewReader(b))
		if err != nil {
			return in, err
		}
		in.decisions = recs
	default:
		return in, errors.New("neither a simulation report, a sweep report nor a decision file")
	}
	return in, nil
}

// strictJSON decodes one JSON document, refusing anything after it.
func strictJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("more than one JSON document")
	}
	return nil
}

// readRecords reads a JSON-lines decision file, in time order.
func readRecords(r io.Reader) ([]controller.Record, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var recs []controller.Record
	line := 0
	for sc.Scan() {
		line++
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var rec controller.Record
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			return nil, fmt.Errorf("line %d: not a decision record: %w", line, err)
		}
		if rec.Dir != "down" && rec.Dir != "up" {
			return nil, fmt.Errorf("line %d: direction %q is neither down nor up", line, rec.Dir)
		}
		if rec.Time.IsZero() {
			return nil, fmt.Errorf("line %d: no time", line)
		}
		if err := checkRecord(rec); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		recs = append(recs, rec)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].Time.Before(recs[j].Time) })
	return recs, nil
}

// A plotRange is what a plotted value may be. JSON has no infinities, but
// it has 1e308: on an axis next to ordinary values such a number overflows
// the plotting library's arithmetic (its rasteriser then never ends), and
// no measurement is near it, so an input that holds one is refused.
type plotRange struct {
	lo, hi float64
	unit   string
}

var (
	// Delays: no queue holds a packet for 1000 s (the sweep and the
	// simulator record a lost probe as 1 s); an added delay may be
	// slightly negative, below a baseline.
	delayRange  = plotRange{-1e6, 1e6, "ms"}
	budgetRange = plotRange{0, 1e6, "ms"}
	// Rates: up to controller.MaxRate.
	kbitRange = plotRange{0, controller.MaxRate / 1e3, "kbit/s"}
	mbitRange = plotRange{0, controller.MaxRate / 1e6, "Mbit/s"}
	// Time from a run's start: about three years.
	timeRange = plotRange{0, 1e8, "s"}
)

// check reports a value outside r, naming its key.
func (r plotRange) check(key string, v float64) error {
	if !(v >= r.lo && v <= r.hi) {
		return fmt.Errorf("%s %g is outside %g to %g %s", key, v, r.lo, r.hi, r.unit)
	}
	return nil
}

// checkAll checks every value of a series.
func (r plotRange) checkAll(key string, vs []float64) error {
	for i, v := range vs {
		if err := r.check(fmt.Sprintf("%s[%d]", key, i), v); err != nil {
			return err
		}
	}
	return nil
}

// checkReport checks what a figure draws of a simulation (or lab) report.
func checkReport(r simReport) error {
	if err := budgetRange.check("budget_ms", r.BudgetMs); err != nil {
		return err
	}
	for i, res := range r.Results {
		s := res.Series
		if s == nil {
			continue
		}
		for _, c := range []struct {
			key string
			r   plotRange
			vs  []float64
		}{
			{"series.t_s", timeRange, s.T}, {"series.capacity_mbps", mbitRange, s.Capacity}, {"series.rate_mbps", mbitRange, s.Rate},
			{"series.goodput_mbps", mbitRange, s.Goodput}, {"series.delay_ms", delayRange, s.Delay},
			{"series.capacity_estimate_mbps", mbitRange, s.CapacityEstimate},
		} {
			if err := c.r.checkAll(c.key, c.vs); err != nil {
				return fmt.Errorf("result %d (%s %s): %w", i+1, res.Scheme, res.Direction, err)
			}
		}
	}
	return nil
}

// checkSweep checks a sweep report's steps and recommendation.
func checkSweep(r sweep.Report) error {
	for i, s := range r.Steps {
		if s.Direction != "down" && s.Direction != "up" {
			return fmt.Errorf("sweep step %d: direction %q is neither down nor up", i+1, s.Direction)
		}
		for _, c := range []struct {
			key string
			r   plotRange
			v   float64
		}{
			{"rate_kbit", kbitRange, s.RateKbit}, {"goodput_kbit", kbitRange, s.GoodputKbit},
			{"delay_ms.p50", delayRange, s.Delay.P50}, {"delay_ms.p95", delayRange, s.Delay.P95}, {"delay_ms.p99", delayRange, s.Delay.P99},
		} {
			if err := c.r.check(c.key, c.v); err != nil {
				return fmt.Errorf("sweep step %d (%s, fraction %g): %w", i+1, s.Direction, s.Fraction, err)
			}
		}
	}
	rec := r.Recommendation
	for _, err := range []error{kbitRange.check("recommendation.down_kbit", rec.DownKbit), kbitRange.check("recommendation.up_kbit", rec.UpKbit), budgetRange.check("recommendation.budget_ms", rec.BudgetMs)} {
		if err != nil {
			return err
		}
	}
	return nil
}

// checkRecord checks what a figure draws of a decision record.
func checkRecord(r controller.Record) error {
	for _, c := range []struct {
		key string
		r   plotRange
		v   float64
	}{
		{"rate_kbit", kbitRange, r.RateKbit}, {"achieved_kbit", kbitRange, r.AchievedKbit}, {"capacity_estimate_kbit", kbitRange, r.CapacityEstimateKbit},
		{"delay_ms", delayRange, r.DelayMs}, {"threshold_ms", budgetRange, r.ThresholdMs},
	} {
		if err := c.r.check(c.key, c.v); err != nil {
			return err
		}
	}
	for name, v := range r.ReflectorDelayMs {
		if err := delayRange.check(fmt.Sprintf("reflector_delay_ms[%q]", name), v); err != nil {
			return err
		}
	}
	return nil
}
