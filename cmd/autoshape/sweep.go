package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/signal"
	"syscall"
	"time"

	"github.com/autoshape/autoshape/actuator"
	"github.com/autoshape/autoshape/config"
	"github.com/autoshape/autoshape/internal/cli"
	"github.com/autoshape/autoshape/sweep"
)

// sweepCmd is `autoshape sweep`: the manual calibration sweep, automated
// (package sweep). `autoshape-tools plot` draws its --json report.
// A step whose load fails is run again once; a direction whose step fails
// again is not completed. The steps that finished and the recommendation of
// each completed direction are printed all the same, the directions not
// completed named with the reason (in --json, "incomplete"), and the exit
// status is 1 only then.
func sweepCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sweep", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("c", "", "configuration file: the link's interfaces, backend, mode, reflectors and budget")
	linkName := fs.String("link", "", "the link to sweep (default: the configuration's only link)")
	direction := fs.String("direction", "both", "down, up or both")
	lineDown := fs.String("line-rate-down", "", "the line's download rate (e.g. 17613kbit); required to sweep down")
	lineUp := fs.String("line-rate-up", "", "the line's upload rate; required to sweep up")
	from := fs.Float64("from", 0.70, "lowest fraction of the line rate")
	to := fs.Float64("to", 1.00, "highest fraction of the line rate")
	step := fs.Float64("step", 0.025, "fraction step")
	hold := fs.Duration("hold", 20*time.Second, "how long each step runs under load")
	loadSpec := fs.String("load", "", "the load: an http(s) URL of a large file that also accepts POSTs, or exec:COMMAND run for each step")
	streams := fs.Int("streams", 4, "parallel transfers of an http load")
	asJSON := fs.Bool("json", false, "print the JSON report instead of the table")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: autoshape sweep -c FILE [--link NAME] --direction down|up|both --line-rate-down RATE --line-rate-up RATE --load URL|exec:COMMAND [--from F --to F --step F --hold D] [--json]\n\n")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *path == "" {
		return cli.Usagef("-c FILE is required")
	}
	cfg, err := config.Load(*path)
	if err != nil {
		return cli.UsageError{Err: err}
	}
	link, err := pickLink(cfg, *linkName)
	if err != nil {
		return cli.UsageError{Err: err}
	}
	// Attach mode may find sqm-scripts' HTB, whatever the backend key says.
	minRate := link.Backend.MinRate()
	if link.Attach {
		minRate = actuator.HTB.MinRate()
	}
	plan, err := sweep.NewPlan(*direction, *lineDown, *lineUp, *from, *to, *step, *hold, link.Budget, minRate)
	if err != nil {
		return cli.UsageError{Err: err}
	}
	load, err := sweep.ParseLoad(*loadSpec, *streams)
	if err != nil {
		return cli.UsageError{Err: err}
	}

	log := newLogger(cfg.LogLevel, stderr)
	defer log.Sync()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	rep, err := sweep.Link(ctx, link, plan, load, log)
	if errors.Is(err, actuator.ErrForeignQdisc) {
		return cli.UsageError{Err: err}
	}
	if len(rep.Steps) == 0 {
		return err
	}
	// What the sweep finished is printed even when it could not go on.
	out := sweep.Output{Report: rep}
	var inc *sweep.IncompleteError
	if errors.As(err, &inc) {
		out.Incomplete = inc.Failed
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return err
		}
	} else {
		sweep.WriteTable(stdout, out, plan)
	}
	return err
}

// pickLink finds the named link, or the only one.
func pickLink(cfg config.Config, name string) (config.Link, error) {
	if name == "" {
		if len(cfg.Links) != 1 {
			return config.Link{}, fmt.Errorf("the configuration has %d links: name one with --link", len(cfg.Links))
		}
		return cfg.Links[0], nil
	}
	for _, l := range cfg.Links {
		if l.Name == name {
			return l, nil
		}
	}
	return config.Link{}, fmt.Errorf("--link %q: no such link in the configuration", name)
}
