// Command autoshape keeps an internet link fast and responsive: it retunes the
// router's shaper to the highest rate that keeps the added delay under load
// within a latency budget. See README.md.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"github.com/autoshape/autoshape/internal/cli"
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
	return cli.Exit("autoshape", args[0], err, stderr)
}

// parseFlags parses a command's flags (see cli.ParseFlags).
func parseFlags(fs *flag.FlagSet, args []string) error { return cli.ParseFlags("autoshape", fs, args) }

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
