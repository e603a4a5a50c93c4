// Package cli holds what the autoshape commands share on the command line:
// usage errors (exit status 2), flag parsing that reports a bad flag once,
// and the exit status of a command's error.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// ErrHelp is returned after a command's -h: exit status 0.
var ErrHelp = errors.New("help shown")

// A UsageError is an error caused by bad input: exit status 2.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// Usagef formats a UsageError.
func Usagef(format string, a ...any) error { return UsageError{fmt.Errorf(format, a...)} }

// ParseFlags parses the flags of prog's command fs: -h shows the usage
// (ErrHelp), a bad flag or a stray argument is a UsageError that Exit
// reports once, with a pointer to -h. The flag package's own messages are
// silenced: it would print the error and the whole usage before Exit
// prints the error again. Each command sets fs.Usage to print its usage
// line first.
func ParseFlags(prog string, fs *flag.FlagSet, args []string) error {
	out, usage := fs.Output(), fs.Usage
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.SetOutput(out)
	fs.Usage = usage
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.Usage()
		return ErrHelp
	case err != nil:
		return Usagef("%v (see '%s %s -h')", err, prog, fs.Name())
	case fs.NArg() > 0:
		return Usagef("unexpected argument %q (see '%s %s -h')", fs.Arg(0), prog, fs.Name())
	}
	return nil
}

// Exit returns the exit status of prog's command cmd that ended with err,
// after saying why on stderr: 0 for none or after -h, 2 for a UsageError,
// 1 otherwise.
func Exit(prog, cmd string, err error, stderr io.Writer) int {
	if err == nil || errors.Is(err, ErrHelp) {
		return 0
	}
	fmt.Fprintf(stderr, "%s %s: %v\n", prog, cmd, err)
	var ue UsageError
	if errors.As(err, &ue) {
		return 2
	}
	return 1
}
