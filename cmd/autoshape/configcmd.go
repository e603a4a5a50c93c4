package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/autoshape/autoshape/config"
	"github.com/autoshape/autoshape/internal/cli"
)

const configUsage = `usage: autoshape config default | check FILE | from-sqm [FILE]

  default          print the reference configuration (TOML)
  check FILE       check a configuration file, TOML or UCI (/etc/config/autoshape)
  from-sqm [FILE]  print a UCI configuration (for /etc/config/autoshape) that
                   attaches to the CAKE of sqm-scripts' FILE (/etc/config/sqm)
`

// defaultSQM is where OpenWrt keeps sqm-scripts' configuration.
const defaultSQM = "/etc/config/sqm"

// configCmd is `autoshape config default|check FILE|from-sqm [FILE]`.
func configCmd(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return cli.Usagef("a command is missing (see 'autoshape config -h')")
	}
	sub := func(usage string, minArgs, maxArgs int) ([]string, error) {
		fs := flag.NewFlagSet("config "+args[0], flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		err := fs.Parse(args[1:])
		switch {
		case errors.Is(err, flag.ErrHelp):
			fmt.Fprintln(stderr, "usage: autoshape config "+usage)
			return nil, cli.ErrHelp
		case err != nil:
			return nil, cli.Usagef("%v (see 'autoshape %s -h')", err, fs.Name())
		case fs.NArg() < minArgs || fs.NArg() > maxArgs:
			return nil, cli.Usagef("usage: autoshape config %s", usage)
		}
		return fs.Args(), nil
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stderr, configUsage)
		return cli.ErrHelp
	case "default":
		if _, err := sub("default: print the reference configuration", 0, 0); err != nil {
			return err
		}
		_, err := io.WriteString(stdout, config.Reference)
		return err
	case "check":
		files, err := sub("check FILE: check a configuration file, TOML or UCI", 1, 1)
		if err != nil {
			return err
		}
		cfg, err := config.Load(files[0])
		if err != nil {
			return cli.UsageError{Err: err}
		}
		fmt.Fprintf(stdout, "%s: ok (%d link(s))\n", files[0], len(cfg.Links))
		return nil
	case "from-sqm":
		files, err := sub("from-sqm [FILE]: print a UCI configuration that attaches to the CAKE of sqm-scripts' FILE ("+defaultSQM+")", 0, 1)
		if err != nil {
			return err
		}
		path := defaultSQM
		if len(files) == 1 {
			path = files[0]
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return cli.UsageError{Err: err}
		}
		out, err := config.FromSQM(string(b), path)
		if err != nil {
			return cli.UsageError{Err: err}
		}
		_, err = io.WriteString(stdout, out)
		return err
	}
	return cli.Usagef("unknown config command %q (known: default, check, from-sqm)", args[0])
}
