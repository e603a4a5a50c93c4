// Command autoshape keeps an internet link fast and responsive: it retunes the
// router's shaper to the highest rate that keeps the added delay under load
// within a latency budget. See README.md.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
)

// version is the release, set at build time with
// -ldflags "-X main.version=..."; a build without it takes the commit from
// the module's build info (init).
var version = "dev"

func init() { version = resolveVersion(version, debug.ReadBuildInfo) }

// resolveVersion is the version a binary reports: the stamped one; else the
// module's version (go install module@version, or the pseudo-version that
// Go 1.24 and later make from a checkout's commit); else "dev" with the
// commit a build from a checkout records, and "-dirty" for uncommitted
// changes.
func resolveVersion(stamped string, buildInfo func() (*debug.BuildInfo, bool)) string {
	if stamped != "dev" {
		return stamped
	}
	bi, ok := buildInfo()
	if !ok {
		return stamped
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch {
		case s.Key == "vcs.revision":
			rev = s.Value
		case s.Key == "vcs.modified" && s.Value == "true":
			dirty = "-dirty"
		}
	}
	if rev == "" {
		return stamped
	}
	return "dev-" + rev[:min(len(rev), 12)] + dirty
}

// errHelp is returned after a command's -h: exit status 0.
var errHelp = errors.New("help shown")

// usageError marks errors caused by bad input: exit status 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

const usage = `usage: autoshape COMMAND [FLAGS]

commands:
  run        the daemon: run -c FILE [--dry-run]
  shape      set up static shaping on an interface once, or remove it (needs CAP_NET_ADMIN)
  sweep      shape at stepped fractions of the line rate under load and pick the knee
  calc       TCP goodput of a shaped rate for a link's framing (ATM, PTM, PPPoE, ...)
  config     default: print the reference configuration; check FILE: validate one
  version    print the version

Run 'autoshape COMMAND -h' for a command's flags. The simulator and the
figures are in autoshape-tools.
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
	case "run":
		err = runDaemon(args[1:], stdout, stderr)
	case "shape":
		err = shape(args[1:], stdout, stderr)
	case "sweep":
		err = sweepCmd(args[1:], stdout, stderr)
	case "calc":
		err = calc(args[1:], stdout, stderr)
	case "config":
		err = configCmd(args[1:], stdout, stderr)
	case "version", "--version", "-version":
		err = versionCmd(args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
	default:
		fmt.Fprintf(stderr, "autoshape: unknown command %q\n%s", args[0], usage)
		return 2
	}
	if err == nil {
		return 0
	}
	if errors.Is(err, errHelp) {
		return 0
	}
	fmt.Fprintf(stderr, "autoshape %s: %v\n", args[0], err)
	var ue usageError
	if errors.As(err, &ue) {
		return 2
	}
	return 1
}

// parseFlags parses a command's flags: -h shows the usage (exit 0), a bad
// flag or a stray argument is a usage error (exit 2) that run reports once,
// with a pointer to -h. The flag package's own messages are silenced: it
// would print the error and the whole usage before run prints the error
// again. Each command sets fs.Usage to print its usage line first.
func parseFlags(fs *flag.FlagSet, args []string) error {
	out, usage := fs.Output(), fs.Usage
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.SetOutput(out)
	fs.Usage = usage
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.Usage()
		return errHelp
	case err != nil:
		return usagef("%v (see 'autoshape %s -h')", err, fs.Name())
	case fs.NArg() > 0:
		return usagef("unexpected argument %q (see 'autoshape %s -h')", fs.Arg(0), fs.Name())
	}
	return nil
}

// versionCmd is `autoshape version`.
func versionCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, "usage: autoshape version") }
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "autoshape %s\n", version)
	return nil
}
