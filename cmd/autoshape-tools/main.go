// Command autoshape-tools holds what autoshape needs only on a laptop: the
// simulator, with its embedded traces, and the figures. The router binary,
// autoshape, carries neither. See README.md.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// errHelp is returned after a command's -h: exit status 0.
var errHelp = errors.New("help shown")

// usageError marks errors caused by bad input: exit status 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

const usage = `usage: autoshape-tools COMMAND [FLAGS]

commands:
  simulate   replay a capacity trace through the link model under several schemes
  plot       draw time series, delay distributions and sweeps as PNG or SVG
  version    print the version

Run 'autoshape-tools COMMAND -h' for a command's flags.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes one command line and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "simulate":
		err = simulate(args[1:], stdout, stderr)
	case "plot":
		err = plotCmd(args[1:], stdout, stderr)
	case "version", "--version", "-version":
		fmt.Fprintf(stdout, "autoshape-tools %s\n", version)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
	default:
		fmt.Fprintf(stderr, "autoshape-tools: unknown command %q\n%s", args[0], usage)
		return 2
	}
	if err == nil || errors.Is(err, errHelp) {
		return 0
	}
	fmt.Fprintf(stderr, "autoshape-tools %s: %v\n", args[0], err)
	var ue usageError
	if errors.As(err, &ue) {
		return 2
	}
	return 1
}

// parseFlags parses a command's flags: -h shows the usage (exit 0), a bad
// flag or a stray argument is a usage error (exit 2).
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return errHelp
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	return nil
}
