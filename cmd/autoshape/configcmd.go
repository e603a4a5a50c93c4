package main

import (
	"fmt"
	"io"

	"github.com/autoshape/autoshape/config"
)

// configCmd is `autoshape config default|check FILE`.
func configCmd(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usagef("usage: autoshape config default | autoshape config check FILE")
	}
	switch args[0] {
	case "default":
		if len(args) != 1 {
			return usagef("config default takes no arguments")
		}
		_, err := io.WriteString(stdout, config.Reference)
		return err
	case "check":
		if len(args) != 2 {
			return usagef("usage: autoshape config check FILE")
		}
		cfg, err := config.Load(args[1])
		if err != nil {
			return usageError{err}
		}
		fmt.Fprintf(stdout, "%s: ok (%d link(s))\n", args[1], len(cfg.Links))
		return nil
	}
	return usagef("unknown config command %q (known: default, check)", args[0])
}
