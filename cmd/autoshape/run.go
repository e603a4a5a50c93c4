package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"syscall"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sys/unix"

	"github.com/autoshape/autoshape/config"
	"github.com/autoshape/autoshape/daemon"
	"github.com/autoshape/autoshape/internal/cli"
)

// runDaemon is `autoshape run -c FILE [--dry-run]`: the daemon.
func runDaemon(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("c", "", "configuration `FILE` (see autoshape config default)")
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: autoshape run -c FILE [--dry-run]\n\n")
		fs.PrintDefaults()
	}
	dry := fs.Bool("dry-run", false, "compute and log every decision without touching any qdisc")
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
	log, level := newLevelLogger(cfg.LogLevel, stdout, stderr)
	defer log.Sync()
	frugal()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	return daemon.New(daemon.Options{ConfigPath: *path, DryRun: *dry, Logger: log, Level: level, Version: version}).Run(ctx, cfg, hup)
}

// frugal sizes the Go runtime for a router, where GOMAXPROCS and GOGC do
// not say otherwise. The daemon's work is a few small steps on every tick,
// probe and answer, well within one core even for 16 links: on one
// processor (P) a hand-off from one goroutine to another (an answer to its
// target, a sample to its link) is a switch on the same thread, where with
// more Ps it wakes an idle thread, and those wake-ups, not the work, were
// most of its CPU time (scripts/daemon-cost.sh loaded: 3.4 CPU-s a minute
// with two Ps, 2.5 with one). Its live heap is under 1 MB, and the
// collector's default lets the heap grow to 4 MB before it runs; at half
// that it runs every few seconds, for under a millisecond each.
func frugal() {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(50)
	}
}

// newLogger logs to w: console lines on a terminal, JSON otherwise (for
// journald and syslog).
func newLogger(level string, w io.Writer) *zap.Logger {
	lvl := zap.NewAtomicLevel()
	_ = lvl.UnmarshalText([]byte(level))
	return zap.New(zapcore.NewCore(encoder(w), zapcore.Lock(zapcore.AddSync(w)), lvl))
}

// newLevelLogger is the daemon's logger: INFO and DEBUG to out, WARN and
// ERROR to errOut, so that procd files them as daemon.info and daemon.err
// (and journald at those priorities), at a level that a reload can change.
func newLevelLogger(level string, out, errOut io.Writer) (*zap.Logger, zap.AtomicLevel) {
	lvl := zap.NewAtomicLevel()
	_ = lvl.UnmarshalText([]byte(level))
	low := zap.LevelEnablerFunc(func(l zapcore.Level) bool { return l < zapcore.WarnLevel && lvl.Enabled(l) })
	high := zap.LevelEnablerFunc(func(l zapcore.Level) bool { return l >= zapcore.WarnLevel && lvl.Enabled(l) })
	return zap.New(zapcore.NewTee(
		zapcore.NewCore(encoder(out), zapcore.Lock(zapcore.AddSync(out)), low),
		zapcore.NewCore(encoder(errOut), zapcore.Lock(zapcore.AddSync(errOut)), high),
	)), lvl
}

// encoder writes console lines to a terminal and JSON lines elsewhere.
func encoder(w io.Writer) zapcore.Encoder {
	encCfg := zap.NewProductionEncoderConfig()
	encCfg.TimeKey = "time"
	encCfg.EncodeTime = zapcore.ISO8601TimeEncoder
	if f, ok := w.(*os.File); ok && isTerminal(f) {
		encCfg.EncodeLevel = zapcore.CapitalLevelEncoder
		return zapcore.NewConsoleEncoder(encCfg)
	}
	return zapcore.NewJSONEncoder(encCfg)
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
