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
	"github.com/autoshape/autoshape/sim"
)

// sweepReport is the JSON shape of `autoshape sweep --json`.
type sweepReport struct {
	Steps          []sweepStep         `json:"steps"`
	Recommendation sweepRecommendation `json:"recommendation"`
}

// sweepStep is one step of a calibration sweep: the shaper at a fraction of
// the line rate, what got through and the added delay under load.
type sweepStep struct {
	Direction   string    `json:"direction"`
	Fraction    float64   `json:"fraction"`
	RateKbit    float64   `json:"rate_kbit"`
	GoodputKbit float64   `json:"goodput_kbit"`
	Delay       sim.Delay `json:"delay_ms"`
	Drops       uint64    `json:"drops"`
}

// sweepRecommendation is a sweep's verdict: the highest rates whose p95
// added delay stays within the budget.
type sweepRecommendation struct {
	DownKbit float64 `json:"down_kbit"`
	UpKbit   float64 `json:"up_kbit"`
	BudgetMs float64 `json:"budget_ms"`
}

// A plotInput is one decoded --in file.
type plotInput struct {
	name      string
	report    *simReport          // simulate or linklab run --json
	sweep     *sweepReport        // sweep --json
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
		in.report = &r
	case first["steps"] != nil:
		var r sweepReport
		if err := strictJSON(b, &r); err != nil {
			return in, fmt.Errorf("not a sweep report: %w", err)
		}
		if len(r.Steps) == 0 {
			return in, errors.New("a sweep report without steps")
		}
		for i, s := range r.Steps {
			if s.Direction != "down" && s.Direction != "up" {
				return in, fmt.Errorf("sweep step %d: direction %q is neither down nor up", i+1, s.Direction)
			}
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
		recs = append(recs, rec)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].Time.Before(recs[j].Time) })
	return recs, nil
}
