// Command ticknoise reads the daemon's decision files (decisions.jsonl, kept
// in a lab run's directory with LINKLAB_KEEP=1) and prints, for each, how
// evenly one direction's ticks measured what got through in a window of the
// run, and when its capacity drops came. docs/peers.md ("Fifth set") quotes
// its output.
//
// The window counts from the file's first decision (the daemon's start).
// Over its probe_up decisions (a rise: the traffic pressed against the rate)
// it prints the median load (what got through over the rate), its median
// absolute deviation and how many ticks showed over 1.15 times the rate
// getting through (more than a shaper passes); over all its decisions, the
// largest load. Then the time of every capacity_drop and drop_undone
// decision of the direction, in the whole run.
//
//	go run ./scripts/ticknoise [-dir down] [-from 12s] [-to 31s] DECISIONS.jsonl...
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"
)

// decision is the part of a decision line this command reads.
type decision struct {
	Time   time.Time `json:"time"`
	Dir    string    `json:"dir"`
	Reason string    `json:"reason"`
	Load   float64   `json:"load"`
	Kbit   float64   `json:"achieved_kbit"`
}

// noise is what one file shows.
type noise struct {
	rises         int
	median, mad   float64
	over, largest float64
	drops         []string // "31.78 s capacity_drop"
}

func main() {
	dir := flag.String("dir", "down", "the direction: down or up")
	from := flag.Duration("from", 12*time.Second, "the window's start, after the daemon's start")
	to := flag.Duration("to", 31*time.Second, "the window's end")
	flag.Parse()
	if (*dir != "down" && *dir != "up") || *to <= *from || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "ticknoise: -dir must be down or up, -to after -from, and at least one decisions.jsonl given")
		os.Exit(2)
	}
	fmt.Println("| file | rises | median load | MAD | ticks over 1.15 | largest load | drops |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---|")
	for _, path := range flag.Args() {
		f, err := os.Open(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "ticknoise:", err)
			os.Exit(2)
		}
		n, err := measure(f, *dir, *from, *to)
		f.Close()
		if err != nil {
			fmt.Fprintf(os.Stderr, "ticknoise: %s: %v\n", path, err)
			os.Exit(2)
		}
		fmt.Printf("| %s | %d | %.2f | %.3f | %.0f | %.2f | %s |\n",
			path, n.rises, n.median, n.mad, n.over, n.largest, strings.Join(n.drops, ", "))
	}
}

// measure reads one decision file.
func measure(r io.Reader, dir string, from, to time.Duration) (noise, error) {
	var (
		n     noise
		t0    time.Time
		loads []float64
	)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		var d decision
		if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
			return noise{}, fmt.Errorf("line %d: %v", line, err)
		}
		if t0.IsZero() {
			t0 = d.Time
		}
		if d.Dir != dir {
			continue
		}
		at := d.Time.Sub(t0)
		if d.Reason == "capacity_drop" || d.Reason == "drop_undone" {
			n.drops = append(n.drops, fmt.Sprintf("%.2f s %s", at.Seconds(), d.Reason))
		}
		if at <= from || at >= to || d.Kbit == 0 {
			continue
		}
		n.largest = math.Max(n.largest, d.Load)
		if d.Reason == "probe_up" {
			loads = append(loads, d.Load)
		}
	}
	if err := sc.Err(); err != nil {
		return noise{}, err
	}
	if len(loads) == 0 {
		return noise{}, fmt.Errorf("no %s probe_up decision with a rate between %v and %v", dir, from, to)
	}
	n.rises = len(loads)
	n.median = median(loads)
	dev := make([]float64, len(loads))
	for i, l := range loads {
		dev[i] = math.Abs(l - n.median)
		if l > 1.15 {
			n.over++
		}
	}
	n.mad = median(dev)
	return n, nil
}

// median returns the median of xs (the mean of the middle two when even).
func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	m := len(s) / 2
	if len(s)%2 == 0 {
		return (s[m-1] + s[m]) / 2
	}
	return s[m]
}
