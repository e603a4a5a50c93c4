// Command autoshape-tools holds what autoshape needs only on a laptop: the
// simulator, with its embedded traces, and the figures. The router binary,
// autoshape, carries neither. See README.md.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/autoshape/autoshape/internal/cli"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const usage = `usage: autoshape-tools COMMAND [FLAGS]

commands:
  simulate   replay a capacity trace through the link model under several schemes
  plot       draw time series, delay distributions and sweeps as PNG or SVG
  frontier   sweep each scheme's knob over traces and seeds: utilisation against delay
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
	case "frontier":
		err = frontier(args[1:], stdout, stderr)
	case "version", "--version", "-version":
		fmt.Fprintf(stdout, "autoshape-tools %s\n", version)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
	default:
		fmt.Fprintf(stderr, "autoshape-tools: unknown command %q\n%s", args[0], usage)
		return 2
	}
	return cli.Exit("autoshape-tools", args[0], err, stderr)
}

// parseFlags parses a command's flags (see cli.ParseFlags).
func parseFlags(fs *flag.FlagSet, args []string) error {
	return cli.ParseFlags("autoshape-tools", fs, args)
}

// writeJSON writes v to w as indented JSON, all or nothing: it is encoded
// before anything is written.
func writeJSON(w io.Writer, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := w.Write(buf.Bytes())
	return err
}
