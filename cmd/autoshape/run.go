package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
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

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	return daemon.New(daemon.Options{ConfigPath: *path, DryRun: *dry, Logger: log, Level: level, Version: version}).Run(ctx, cfg, hup)
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
