package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os/signal"
	"strings"
	"syscall"

	"github.com/autoshape/autoshape/lab"
)

// sweepLoad is the --load that `linklab sweep` gives `autoshape sweep`: for
// each step, linklab itself (self) runs the streams from cli, the home
// network's host, to srv's endpoint at addr, in the step's direction. The
// load comes from behind the router, as a home's does, and not from rtr
// itself: the upload's sender on rtr would sit behind its own shaper's short
// bulk queue, whose drops the kernel counts against the sending socket (a
// stream with nothing in flight whose packets the local queue drops 15
// times in a row, 500 ms apart, is aborted with "connection timed out"),
// and the upload steps of a sweep lost a stream that way within seconds.
func sweepLoad(self, cli, addr string, streams int) string {
	return fmt.Sprintf(`exec:exec %s load --ns %s --addr %s --direction "$AUTOSHAPE_SWEEP_DIRECTION" --streams %d`,
		shellQuote(self), shellQuote(cli), shellQuote(addr), streams)
}

// shellQuote quotes s for /bin/sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// loadCmd is `linklab load`, the sweep's load for one step: --streams TCP
// streams from the namespace --ns to a load endpoint at --addr, in
// --direction, until SIGTERM or SIGINT (exit 0). A stream that fails is
// replaced (and said so on stderr); when replacements run out, it exits 1
// and the sweep retries the step.
func loadCmd(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	ns := fs.String("ns", "", "the namespace the streams start from")
	addr := fs.String("addr", "", "the load endpoint, HOST:PORT")
	direction := fs.String("direction", "", "down or up")
	streams := fs.Int("streams", 4, "TCP streams")
	cc := fs.String("cc", "cubic", "the streams' TCP congestion control")
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	if *ns == "" || *addr == "" {
		return usageError{fmt.Errorf("load needs --ns and --addr")}
	}
	if *direction != "down" && *direction != "up" {
		return usageError{fmt.Errorf("--direction %q: want down or up", *direction)}
	}
	if *streams < 1 || *streams > 64 {
		return usageError{fmt.Errorf("--streams %d: want 1 to 64", *streams)}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	kind := "an upload"
	if *direction == "down" {
		kind = "a download"
	}
	l := &lab.EndpointLoad{Dial: lab.DialEndpoint(*ns, *addr, *cc), Download: *direction == "down", Streams: *streams,
		Replaced: func(err error) {
			fmt.Fprintf(stderr, "linklab load: %s stream to %s failed (%v): replaced it\n", kind, *addr, err)
		}}
	return l.Run(ctx)
}
