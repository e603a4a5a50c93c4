package uml

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// cpuTime is what a group of host processes spent on and waiting for a
// host CPU, from the kernel's scheduler statistics.
type cpuTime struct {
	Run, Wait time.Duration
}

// String is the line the lab logs after a boot.
func (c cpuTime) String() string {
	s := fmt.Sprintf("the kernel's processes ran %.1f s on the host and waited %.1f s for a host CPU", c.Run.Seconds(), c.Wait.Seconds())
	if c.Run > 0 {
		s += fmt.Sprintf(" (%.0f %% of their running time)", 100*c.Wait.Seconds()/c.Run.Seconds())
	}
	if c.Distorted() {
		s += "; other work on the host delayed the kernel, so this run's delays hold some of the host's scheduling"
	}
	return s
}

// Distorted reports whether the processes waited for a CPU a quarter as
// long as they ran or more. Alone on its CPU, a kernel that forwards
// 10 Mbit/s through CAKE waited 3-9 % of its running time (2-core machine);
// with a busy loop sharing that CPU it waited as long as it ran, and the
// added delay's p50 went from 2-3 ms to 5-9 ms.
func (c cpuTime) Distorted() bool { return c.Run > 0 && 4*c.Wait >= c.Run }

// cpuWatch follows the processes of one process group (the kernel and the
// host processes it starts for the guest's own, which stay in its group).
// A process's counts are kept as last seen, so one that exits between two
// looks loses only what it did since the last.
type cpuWatch struct {
	proc string // /proc
	pgid int
	seen map[int]cpuTime
}

func newCPUWatch(proc string, pgid int) *cpuWatch {
	return &cpuWatch{proc: proc, pgid: pgid, seen: map[int]cpuTime{}}
}

// watchCPU follows the process group pgid in /proc every 500 ms until the
// function it returns is called, which returns the group's times.
func watchCPU(pgid int) func() cpuTime {
	w, stop, stopped := newCPUWatch("/proc", pgid), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			w.look()
			select {
			case <-tick.C:
			case <-stop:
				return
			}
		}
	}()
	return func() cpuTime {
		close(stop)
		<-stopped
		return w.total()
	}
}

// look reads the group's processes now.
func (w *cpuWatch) look() {
	ents, err := os.ReadDir(w.proc)
	if err != nil {
		return
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join(w.proc, e.Name(), "stat"))
		if err != nil || statPgrp(stat) != w.pgid {
			continue
		}
		b, err := os.ReadFile(filepath.Join(w.proc, e.Name(), "schedstat"))
		if err != nil {
			continue
		}
		if c, ok := parseSchedstat(b); ok {
			w.seen[pid] = c
		}
	}
}

// total is the sum over every process seen.
func (w *cpuWatch) total() cpuTime {
	var t cpuTime
	for _, c := range w.seen {
		t.Run += c.Run
		t.Wait += c.Wait
	}
	return t
}

// statPgrp is the process group in /proc/PID/stat, -1 where it cannot be
// read. The command's name, in parentheses, may hold spaces and
// parentheses: the fields follow its last ')'.
func statPgrp(stat []byte) int {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return -1
	}
	f := bytes.Fields(stat[i+1:])
	// state, ppid, pgrp
	if len(f) < 3 {
		return -1
	}
	n, err := strconv.Atoi(string(f[2]))
	if err != nil {
		return -1
	}
	return n
}

// parseSchedstat reads /proc/PID/schedstat: nanoseconds on a CPU,
// nanoseconds waiting on a run queue, time slices.
func parseSchedstat(b []byte) (cpuTime, bool) {
	f := bytes.Fields(b)
	if len(f) < 2 {
		return cpuTime{}, false
	}
	run, err1 := strconv.ParseInt(string(f[0]), 10, 64)
	wait, err2 := strconv.ParseInt(string(f[1]), 10, 64)
	if err1 != nil || err2 != nil || run < 0 || wait < 0 {
		return cpuTime{}, false
	}
	return cpuTime{Run: time.Duration(run), Wait: time.Duration(wait)}, true
}
