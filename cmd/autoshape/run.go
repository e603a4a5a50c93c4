package main

import (
	"context"
	"flag"
	"io"
	"os"
	"os/signal"
	"syscall"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sys/unix"

	"github.com/autoshape/autoshape/config"
	"github.com/autoshape/autoshape/daemon"
)

// runDaemon is `autoshape run -c FILE [--dry-run]`: the daemon.
func runDaemon(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("c", "", "configuration file (see `autoshape config default`)")
	dry := fs.Bool("dry-run", false, "compute and log every decision without touching any qdisc")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *path == "" {
		return usagef("-c FILE is required")
	}
	cfg, err := config.Load(*path)
	if err != nil {
		return usageError{err}
	}
	log, level := newLevelLogger(cfg.LogLevel, stderr)
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
	log, _ := newLevelLogger(level, w)
	return log
}

// newLevelLogger is newLogger with a level that a reload can change.
func newLevelLogger(level string, w io.Writer) (*zap.Logger, zap.AtomicLevel) {
	lvl := zap.NewAtomicLevel()
	_ = lvl.UnmarshalText([]byte(level))
	encCfg := zap.NewProductionEncoderConfig()
	encCfg.TimeKey = "time"
	encCfg.EncodeTime = zapcore.ISO8601TimeEncoder
	var enc zapcore.Encoder = zapcore.NewJSONEncoder(encCfg)
	if f, ok := w.(*os.File); ok && isTerminal(f) {
		encCfg.EncodeLevel = zapcore.CapitalLevelEncoder
		enc = zapcore.NewConsoleEncoder(encCfg)
	}
	return zap.New(zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(w)), lvl)), lvl
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
