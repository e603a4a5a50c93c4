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

// inUML runs this linklab again inside the User-mode Linux kernel with the
// lab's modules, with args (the subcommand's, --kernel dropped), and passes
// its output and exit status through.
func inUML(sub string, args []string, stdout, stderr io.Writer) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if err := uml.Install(stderr); err != nil {
		return err
	}
	argv := append([]string{self, sub}, withoutFlag(args, "kernel")...)
	env := []string{}
	for _, k := range []string{"LINKLAB_PREFIX", "LINKLAB_KEEP"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return runUML(uml.Config{Modules: uml.LabModules, Mem: "2G", Env: env, Stdout: stdout, Stderr: stderr}, argv)
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

// umlInside reports whether this process runs inside a User-mode Linux
// kernel: its one CPU says so in /proc/cpuinfo.
func umlInside() bool {
	b, err := os.ReadFile("/proc/cpuinfo")
	return err == nil && strings.Contains(string(b), "User Mode Linux")
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
