package main

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// line is one decision at ms after the first.
func line(ms int, dir, reason string, load, kbit float64) string {
	at := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC).Add(time.Duration(ms) * time.Millisecond)
	return `{"time":"` + at.Format(time.RFC3339Nano) + `","dir":"` + dir + `","reason":"` + reason +
		`","load":` + ftoa(load) + `,"achieved_kbit":` + ftoa(kbit) + "}\n"
}

func ftoa(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

func TestMeasure(t *testing.T) {
	in := line(0, "down", "start", 0, 0) +
		line(500, "down", "probe_up", 5, 1000) + // before the window
		line(1100, "down", "probe_up", 0.9, 1000) +
		line(1200, "up", "probe_up", 3, 1000) + // the other direction
		line(1300, "down", "probe_up", 1.0, 1000) +
		line(1400, "down", "ease", 2.5, 1000) + // not a rise: only the largest
		line(1500, "down", "probe_up", 1.2, 1000) +
		line(1600, "down", "probe_up", 0.98, 1000) +
		line(1700, "down", "probe_up", 4, 0) + // no rate measured
		line(2500, "down", "capacity_drop", 0.3, 1000) +
		line(2550, "down", "drop_undone", 1, 1000)
	got, err := measure(strings.NewReader(in), "down", time.Second, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// Rises 0.9, 0.98, 1.0, 1.2: median 0.99, deviations 0.09, 0.01, 0.01, 0.21.
	want := noise{rises: 4, median: 0.99, mad: 0.05, over: 1, largest: 2.5,
		drops: []string{"2.50 s capacity_drop", "2.55 s drop_undone"}}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(noise{}), cmp.Comparer(func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 })); diff != "" {
		t.Errorf("measure mismatch (-want +got):\n%s", diff)
	}
	if _, err := measure(strings.NewReader("{not json\n"), "down", 0, time.Second); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("bad line: err %v, want one naming line 1", err)
	}
	if _, err := measure(strings.NewReader(in), "up", 10*time.Second, 20*time.Second); err == nil {
		t.Error("an empty window: no error")
	}
}
