package uml

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestStatPgrp(t *testing.T) {
	for _, tc := range []struct {
		stat string
		want int
	}{
		{"4242 (linux.uml) S 4240 4242 4200 0 -1 4194560 100", 4242},
		// A name with a space and a parenthesis of its own.
		{"17 (a) b (c) R 1 99 99 0", 99},
		{"17 (a) R 1", -1},
		{"17 (a) R 1 x", -1},
		{"no parenthesis", -1},
	} {
		if got := statPgrp([]byte(tc.stat)); got != tc.want {
			t.Errorf("statPgrp(%q) = %d, want %d", tc.stat, got, tc.want)
		}
	}
}

func TestParseSchedstat(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want cpuTime
		ok   bool
	}{
		{"5108510000 301032000 4521\n", cpuTime{Run: 5108510 * time.Microsecond, Wait: 301032 * time.Microsecond}, true},
		{"7 8", cpuTime{Run: 7, Wait: 8}, true},
		{"7", cpuTime{}, false},
		{"-1 8 1", cpuTime{}, false},
		{"a b c", cpuTime{}, false},
	} {
		got, ok := parseSchedstat([]byte(tc.in))
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseSchedstat(%q) = %v, %v, want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestCPUTimeDistorted(t *testing.T) {
	for _, tc := range []struct {
		c    cpuTime
		want bool
	}{
		{cpuTime{Run: 6 * time.Second, Wait: 500 * time.Millisecond}, false},
		{cpuTime{Run: 6 * time.Second, Wait: 1500 * time.Millisecond}, true},
		{cpuTime{Run: 6 * time.Second, Wait: 6 * time.Second}, true},
		{cpuTime{}, false},
	} {
		if got := tc.c.Distorted(); got != tc.want {
			t.Errorf("%+v.Distorted() = %v, want %v", tc.c, got, tc.want)
		}
		if got := strings.Contains(tc.c.String(), "delayed the kernel"); got != tc.want {
			t.Errorf("%+v.String() = %q: says the kernel was delayed %v, want %v", tc.c, tc.c.String(), got, tc.want)
		}
	}
}

// TestCPUWatch: the group's processes alone are counted, each as last
// seen, and one that has gone keeps what it had.
func TestCPUWatch(t *testing.T) {
	proc := t.TempDir()
	write := func(pid, pgrp string, schedstat string) {
		t.Helper()
		dir := filepath.Join(proc, pid)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(pid+" (linux.uml) S 1 "+pgrp+" 1 0"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "schedstat"), []byte(schedstat), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("100", "100", "1000 100 5")
	write("101", "100", "2000 300 5")
	write("200", "200", "9000 9000 5") // another group
	// Not a process: passed over.
	if err := os.WriteFile(filepath.Join(proc, "uptime"), []byte("1 1"), 0o644); err != nil {
		t.Fatal(err)
	}
	w := newCPUWatch(proc, 100)
	w.look()
	if got, want := w.total(), (cpuTime{Run: 3000, Wait: 400}); got != want {
		t.Fatalf("first look: %+v, want %+v", got, want)
	}
	write("100", "100", "1500 200 6")
	if err := os.RemoveAll(filepath.Join(proc, "101")); err != nil {
		t.Fatal(err)
	}
	w.look()
	if got, want := w.total(), (cpuTime{Run: 3500, Wait: 500}); got != want {
		t.Errorf("second look, 101 gone: %+v, want %+v", got, want)
	}
}

// TestCPUWatchOwnGroup reads the real /proc: this test's own process group
// has run.
func TestCPUWatchOwnGroup(t *testing.T) {
	if _, err := os.Stat("/proc/self/schedstat"); err != nil {
		t.Skipf("skipping: no scheduler statistics here: %v", err)
	}
	w := newCPUWatch("/proc", syscall.Getpgrp())
	w.look()
	if got := w.total(); got.Run <= 0 {
		t.Errorf("this process group's time on a CPU %v, want more than 0", got.Run)
	}
}
