// Command tickcost measures what a Go process costs on this machine when it
// does nothing but wake on a ticker, as the daemon wakes on its control tick
// (default 50 ms) with one processor: the floor under scripts/daemon-cost.sh's
// figures. It prints the CPU time of each run per minute and their median.
// The README quotes its output. -clock runtime ticks with a time.Ticker,
// -clock kernel with the daemon's own ticker (probe.RealClock: a timerfd on
// Linux).
//
//	GOMAXPROCS=1 go run ./scripts/tickcost [-clock runtime|kernel] [-every 50ms] [-for 20s] [-runs 3]
package main

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"syscall"
	"time"

	"github.com/autoshape/autoshape/probe"
)

func main() {
	every := flag.Duration("every", 50*time.Millisecond, "the tick")
	window := flag.Duration("for", 20*time.Second, "how long each run ticks")
	runs := flag.Int("runs", 3, "how many runs")
	clock := flag.String("clock", "runtime", "the ticker: runtime (time.Ticker) or kernel (the daemon's, probe.RealClock)")
	flag.Parse()
	if *every <= 0 || *window < *every || *runs < 1 || (*clock != "runtime" && *clock != "kernel") {
		fmt.Fprintln(os.Stderr, "tickcost: -every must be positive, -for at least -every, -runs at least 1, -clock runtime or kernel")
		os.Exit(2)
	}
	newTicker := func(d time.Duration) (<-chan time.Time, func()) {
		t := time.NewTicker(d)
		return t.C, t.Stop
	}
	if *clock == "kernel" {
		newTicker = probe.RealClock{}.NewTicker
	}
	var perMin []float64
	for range *runs {
		before := cpu()
		tick, stop := newTicker(*every)
		for end := time.Now().Add(*window); time.Now().Before(end); {
			<-tick
		}
		stop()
		v := (cpu() - before).Seconds() * float64(time.Minute) / float64(*window)
		perMin = append(perMin, v)
		fmt.Printf("%.3f CPU-s per minute\n", v)
	}
	slices.Sort(perMin)
	fmt.Printf("median %.3f CPU-s per minute over %d runs of %v, a %s tick every %v\n", perMin[len(perMin)/2], *runs, *window, *clock, *every)
}

// cpu is the process's user and system time so far.
func cpu() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		fmt.Fprintln(os.Stderr, "tickcost:", err)
		os.Exit(1)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
