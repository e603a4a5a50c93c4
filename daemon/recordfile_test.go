package daemon_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/autoshape/autoshape/controller"
	"github.com/autoshape/autoshape/daemon"
	"github.com/autoshape/autoshape/estimator"
	"github.com/autoshape/autoshape/policies"
)

// testDecision is a decision whose record line has the same length for
// every i below 10.
func testDecision(i int) controller.Decision {
	return controller.Decision{
		Time: time.Date(2026, 3, 1, 12, 0, i, 0, time.UTC), Link: "wan", Direction: estimator.Down,
		From: 10e6, To: 9e6, Reason: policies.ReasonBloat, State: controller.Active,
	}
}

// recordLen is the length of testDecision's line.
func recordLen(t *testing.T) int64 {
	t.Helper()
	var buf bytes.Buffer
	if err := controller.WriteRecord(&buf, testDecision(0)); err != nil {
		t.Fatal(err)
	}
	return int64(buf.Len())
}

// wholeRecords reads a decision file and fails t unless it is whole JSON
// lines; it returns their number.
func wholeRecords(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		t.Errorf("%s ends in a torn line: %q", path, tailOf(b))
	}
	n := 0
	for i, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		if line == "" && len(b) == 0 {
			break
		}
		var rec controller.Record
		if err := json.Unmarshal([]byte(line), &rec); err != nil || rec.Dir == "" {
			t.Errorf("%s: line %d is not a record (%v): %q", path, i+1, err, line)
		}
		n++
	}
	return n
}

func tailOf(b []byte) []byte { return b[max(len(b)-80, 0):] }

// A smallDisk holds capacity bytes: a write past them is cut short with
// ENOSPC, as a full file system does.
type smallDisk struct{ capacity int64 }

func (d *smallDisk) open(path string) (daemon.AppendFile, error) {
	f, err := daemon.OpenAppend(path)
	if err != nil {
		return nil, err
	}
	return diskFile{AppendFile: f, disk: d}, nil
}

type diskFile struct {
	daemon.AppendFile
	disk *smallDisk
}

func (f diskFile) Write(p []byte) (int, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	room := max(f.disk.capacity-st.Size(), 0)
	if room >= int64(len(p)) {
		return f.AppendFile.Write(p)
	}
	n, _ := f.AppendFile.Write(p[:room])
	return n, syscall.ENOSPC
}

// TestRecordFileOnFullDisk: on a full disk a record is a whole line or
// nothing, whatever part of it fitted; once there is room again, records
// follow the last whole line.
func TestRecordFileOnFullDisk(t *testing.T) {
	l := recordLen(t)
	for _, tt := range []struct {
		name     string
		capacity int64 // bytes
	}{
		{"room for part of a record", 2*l + l/2},
		{"room for one byte", 2*l + 1},
		{"no room", 2 * l},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "decisions.jsonl")
			disk := &smallDisk{capacity: tt.capacity}
			f := daemon.NewRecordFile(daemon.RecordFileConfig{Path: path, Open: disk.open})
			var errs []bool
			for i := range 4 {
				err := f.Write(testDecision(i))
				if err != nil && !errors.Is(err, syscall.ENOSPC) {
					t.Errorf("Write() = %v, want ENOSPC", err)
				}
				errs = append(errs, err != nil)
				if got, want := wholeRecords(t, path), min(i+1, 2); got != want {
					t.Errorf("after %d records the file holds %d, want %d", i+1, got, want)
				}
			}
			if diff := cmp.Diff([]bool{false, false, true, true}, errs); diff != "" {
				t.Errorf("failed writes (-want +got):\n%s", diff)
			}
			disk.capacity = 10 * l
			if err := f.Write(testDecision(5)); err != nil {
				t.Fatalf("Write() with room again failed: %v", err)
			}
			if got := wholeRecords(t, path); got != 3 {
				t.Errorf("with room again the file holds %d records, want 3", got)
			}
		})
	}
}

// TestRecordFileCutsATornTail: a file that ends in a torn line (a crash in
// mid-write) loses that line, and the next record starts a line of its own.
func TestRecordFileCutsATornTail(t *testing.T) {
	var whole bytes.Buffer
	controller.WriteRecord(&whole, testDecision(0))
	torn := whole.String()[:whole.Len()/2]
	for _, tt := range []struct {
		name, before string
		want         int
	}{
		{"empty", "", 1},
		{"whole", whole.String(), 2},
		{"whole and torn", whole.String() + torn, 2},
		{"torn only", torn, 1},
		{"long torn line", strings.Repeat("x", 10000), 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "decisions.jsonl")
			if err := os.WriteFile(path, []byte(tt.before), 0o644); err != nil {
				t.Fatal(err)
			}
			f := daemon.NewRecordFile(daemon.RecordFileConfig{Path: path})
			if err := f.Write(testDecision(1)); err != nil {
				t.Fatalf("Write() failed: %v", err)
			}
			if got := wholeRecords(t, path); got != tt.want {
				t.Errorf("the file holds %d records, want %d", got, tt.want)
			}
		})
	}
}

// TestRecordFileWarnsAtMostOnceAMinute: the first failure is a WARN line,
// later ones within the minute are counted, the next line after a minute
// says how many were dropped, and a success after failures says so too.
func TestRecordFileWarnsAtMostOnceAMinute(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	now := start
	path := filepath.Join(t.TempDir(), "decisions.jsonl")
	disk := &smallDisk{capacity: 0}
	f := daemon.NewRecordFile(daemon.RecordFileConfig{
		Path: path, Open: disk.open, Logger: zap.New(core), Now: func() time.Time { return now },
	})
	write := func(at time.Duration) {
		now = start.Add(at)
		f.Write(testDecision(0))
	}
	write(0)
	for i := range 100 {
		write(time.Duration(i) * 500 * time.Millisecond)
	}
	write(61 * time.Second)
	write(70 * time.Second)
	disk.capacity = 1 << 20
	write(80 * time.Second)
	write(81 * time.Second)

	type line struct {
		Level   string
		Dropped int64
	}
	var got []line
	for _, e := range logs.All() {
		got = append(got, line{Level: e.Level.String(), Dropped: e.ContextMap()["dropped_records"].(int64)})
	}
	want := []line{
		{Level: "warn", Dropped: 1},
		{Level: "warn", Dropped: 101},
		{Level: "info", Dropped: 1},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("log lines (-want +got):\n%s", diff)
	}
}

// TestRecordFileShared: links that share one RecordFile write and rotate
// at the same time without losing a record to the rotation or tearing a
// line.
func TestRecordFileShared(t *testing.T) {
	path := filepath.Join(t.TempDir(), "decisions.jsonl")
	l := recordLen(t)
	f := daemon.NewRecordFile(daemon.RecordFileConfig{Path: path, MaxBytes: 5 * l})
	var wg sync.WaitGroup
	errs := make(chan error, 400)
	for range 4 {
		wg.Go(func() {
			for i := range 100 {
				if err := f.Write(testDecision(i % 10)); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("Write() failed: %v", err)
	}
	// Rotation keeps one old file: the last 5 or 6 records in all.
	n := wholeRecords(t, path) + wholeRecords(t, path+".1")
	if n < 6 || n > 11 {
		t.Errorf("the two files hold %d records, want 6 to 11", n)
	}
}

// TestRecordFileOnFullTmpfs fills a real file system: a tmpfs of two
// pages, mounted in a mount namespace of a child process's own (needs
// root). The file keeps whole lines only.
func TestRecordFileOnFullTmpfs(t *testing.T) {
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		t.Skip("needs root on Linux: mounts a small tmpfs in a private mount namespace")
	}
	if os.Getenv("AUTOSHAPE_RECORD_TMPFS") == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestRecordFileOnFullTmpfs$", "-test.v")
		cmd.Env = append(os.Environ(), "AUTOSHAPE_RECORD_TMPFS=1")
		// A new mount namespace; Go makes its mounts private, so the
		// tmpfs is seen by nobody else and goes with the child.
		cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS") {
			t.Fatalf("the child in its own mount namespace: %v\n%s", err, out)
		}
		if i := strings.Index(string(out), "records filled"); i >= 0 {
			t.Logf("child: %s", strings.SplitN(string(out)[max(i-8, 0):], "\n", 2)[0])
		}
		return
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=8k"); err != nil {
		t.Fatalf("failed to mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	path := filepath.Join(dir, "decisions.jsonl")
	f := daemon.NewRecordFile(daemon.RecordFileConfig{Path: path})
	written := 0
	var err error
	for i := 0; i < 1000 && err == nil; i++ {
		if err = f.Write(testDecision(i % 10)); err == nil {
			written++
		}
	}
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("writing until the tmpfs is full ended with %v, want ENOSPC", err)
	}
	for i := range 5 {
		f.Write(testDecision(i))
	}
	if got := wholeRecords(t, path); got != written {
		t.Errorf("the full file holds %d records, want the %d written", got, written)
	}
	t.Logf("%d records filled the tmpfs", written)
}
