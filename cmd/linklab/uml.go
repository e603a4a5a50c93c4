package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/autoshape/autoshape/actuator"
	"github.com/autoshape/autoshape/lab"
	"github.com/autoshape/autoshape/lab/uml"
)

// Kernels `linklab run --kernel` takes.
const (
	kernelHost = "host"
	kernelUML  = "uml"
)

// checkKernel reads --kernel.
func checkKernel(k string) error {
	if k != kernelHost && k != kernelUML {
		return usageError{fmt.Errorf("--kernel %q: want host or uml", k)}
	}
	return nil
}

// withoutFlag drops every "--name V", "--name=V", "-name V" and "-name=V"
// from args.
func withoutFlag(args []string, name string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i:]...)
		}
		bare := strings.TrimLeft(a, "-")
		if strings.HasPrefix(a, "-") && bare == name {
			i++ // its value
			continue
		}
		if strings.HasPrefix(a, "-") && strings.HasPrefix(bare, name+"=") {
			continue
		}
		out = append(out, a)
	}
	return out
}

// routerCommand is the router half of `linklab run --kernel uml` args for
// one of its schemes: this linklab's `router` with the same flags and that
// scheme alone, the LINKLAB_ variables passed on.
func routerCommand(args []string, scheme string, stderr io.Writer) (lab.GuestCommand, error) {
	self, err := os.Executable()
	if err != nil {
		return lab.GuestCommand{}, err
	}
	argv := append([]string{self, "router"}, withoutFlag(args, "scheme")...)
	argv = append(argv, "--scheme", scheme)
	var env []string
	for _, k := range []string{"LINKLAB_PREFIX", "LINKLAB_KEEP"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return lab.GuestCommand{Argv: argv, Env: env, Stderr: stderr}, nil
}

// routerCmd is `linklab router [run's flags] DIR`, the router half of a
// split run inside the kernel (lab.ServeRouter), which `linklab run
// --kernel uml` starts: one scheme, and the directory it shares with the
// host half.
func routerCmd(args []string, stderr io.Writer) error {
	o, err := parseRun(args, stderr, true)
	if err != nil {
		return err
	}
	if len(o.schemes) != 1 || len(o.extraArg) != 1 {
		return usageError{errors.New("router: want one --scheme and the shared directory")}
	}
	pfx, err := prefix()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return lab.ServeRouter(ctx, pfx, o.cfg, o.schemes[0], o.extraArg[0])
}

// runUML runs argv inside the User-mode Linux kernel until it ends or
// SIGINT or SIGTERM stops it; a non-zero exit status inside is an exitCode.
func runUML(cfg uml.Config, argv []string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	code, err := uml.Run(ctx, cfg, argv...)
	if err != nil {
		if ctx.Err() != nil {
			return errInterrupted
		}
		return err
	}
	if code != 0 {
		return exitCode(code)
	}
	return nil
}

// An exitCode is the exit status of a linklab that ran inside the kernel;
// it has said why already.
type exitCode int

func (c exitCode) Error() string {
	return fmt.Sprintf("exit status %d inside the User-mode Linux kernel", int(c))
}

// umlCmd is `linklab uml`: any command inside the User-mode Linux kernel.
func umlCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("uml", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var modules schemeList
	fs.Var(&modules, "module", "a module to load (repeatable; default: the lab's: "+strings.Join(uml.LabModules, " ")+")")
	mem := fs.String("mem", "1G", "the kernel's memory")
	dir := fs.String("dir", "", "a host directory the command may write, at the same path inside (default: a temporary one)")
	install := fs.Bool("install", false, "install the kernel with apt-get if it is missing (root)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if fs.NArg() == 0 {
		return usageError{errors.New("uml: no command given")}
	}
	if *install {
		if err := uml.Install(stderr); err != nil {
			return err
		}
	}
	if len(modules) == 0 {
		modules = uml.LabModules
	}
	return runUML(uml.Config{Modules: modules, Mem: *mem, Dir: *dir, Stdout: stdout, Stderr: stderr}, fs.Args())
}

// lineBackend reads --backend: by default CAKE where the kernel has it (the
// User-mode Linux kernel), else HTB.
func lineBackend(name string, cake bool) (actuator.Backend, error) {
	if name == "" {
		if cake {
			return actuator.CAKE, nil
		}
		return actuator.HTB, nil
	}
	b, err := actuator.ParseBackend(name)
	if err != nil {
		return "", usageError{fmt.Errorf("--backend: %w", err)}
	}
	return b, nil
}
