package sweep

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/autoshape/autoshape/estimator"
)

// A LoadSource loads one direction of the link until ctx ends. It returns
// early only on an error (or when an external command finishes by itself).
type LoadSource interface {
	Load(ctx context.Context, d estimator.Direction, rateKbit float64, hold time.Duration) error
}

// ParseLoad reads the sweep's --load: tcp:HOST:PORT or exec:COMMAND;
// streams is the number of parallel streams of a tcp: load.
func ParseLoad(spec string, streams int) (LoadSource, error) {
	switch {
	case spec == "":
		return nil, errors.New("--load is required: tcp:HOST:PORT (a linklab load endpoint) or exec:COMMAND (wget, curl, iperf3, flent...)")
	case strings.HasPrefix(spec, "exec:"):
		cmd := strings.TrimSpace(strings.TrimPrefix(spec, "exec:"))
		if cmd == "" {
			return nil, errors.New("--load exec: names no command")
		}
		return execLoad{command: cmd}, nil
	case strings.HasPrefix(spec, "tcp:"):
		addr := strings.TrimPrefix(spec, "tcp:")
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("--load %q: want tcp:HOST:PORT", spec)
		}
		if streams < 1 || streams > 64 {
			return nil, fmt.Errorf("--streams %d: want 1 to 64", streams)
		}
		return tcpLoad{addr: addr, streams: streams}, nil
	case strings.HasPrefix(spec, "http://"), strings.HasPrefix(spec, "https://"):
		// An HTTP client (with TLS) would add about 2 MB to a binary
		// meant for routers with 16 MB of flash; the router has wget or
		// curl for that.
		return nil, fmt.Errorf("--load %q: autoshape has no HTTP client of its own; run one with exec:, e.g. exec:'wget -q -O /dev/null %s' (the command finds the step's direction in AUTOSHAPE_SWEEP_DIRECTION), or use tcp:HOST:PORT", spec, spec)
	default:
		return nil, fmt.Errorf("--load %q: want tcp:HOST:PORT or exec:COMMAND", spec)
	}
}

// cubic asks for CUBIC congestion control on a load connection: home
// traffic is mostly CUBIC, the kind that fills buffers, whatever the
// router's own default. Where it is not allowed the default stays.
func cubic(_, _ string, c syscall.RawConn) error {
	return c.Control(func(fd uintptr) {
		_ = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, "cubic")
	})
}

// A tcpLoad runs parallel TCP streams against a linklab load endpoint: each
// connection's first byte asks for a download ('D') or an upload ('U').
type tcpLoad struct {
	addr    string
	streams int
}

func (l tcpLoad) Load(ctx context.Context, d estimator.Direction, _ float64, _ time.Duration) error {
	dialer := &net.Dialer{Timeout: 10 * time.Second, Control: cubic}
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	errs := make(chan error, l.streams)
	for range l.streams {
		c, err := dialer.DialContext(ctx, "tcp", l.addr)
		if err != nil {
			return err
		}
		conns = append(conns, c)
		go func() {
			req, buf := []byte{'D'}, make([]byte, 64<<10)
			if d == estimator.Up {
				req[0] = 'U'
			}
			if _, err := c.Write(req); err != nil {
				errs <- err
				return
			}
			for {
				var err error
				if d == estimator.Up {
					_, err = c.Write(buf)
				} else {
					_, err = c.Read(buf)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case err := <-errs:
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("tcp load to %s: %w", l.addr, err)
	}
}

// An execLoad runs a command through /bin/sh for each step (flent, iperf3,
// a curl loop...) and stops it, with its whole process group, when the step
// ends. The command learns the step from its environment.
type execLoad struct{ command string }

func (e execLoad) Load(ctx context.Context, d estimator.Direction, rateKbit float64, hold time.Duration) error {
	cmd := exec.Command("/bin/sh", "-c", e.command)
	cmd.Env = append(os.Environ(),
		"AUTOSHAPE_SWEEP_DIRECTION="+d.String(),
		fmt.Sprintf("AUTOSHAPE_SWEEP_RATE_KBIT=%.0f", rateKbit),
		fmt.Sprintf("AUTOSHAPE_SWEEP_HOLD_S=%.0f", hold.Seconds()))
	cmd.Stdout, cmd.Stderr = io.Discard, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("%q: %w", e.command, err)
		}
		// Finished by itself: the load stops early, which the step's
		// goodput shows; wait for the step to end.
		<-ctx.Done()
		return ctx.Err()
	case <-ctx.Done():
	}
	pgid := cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-done
	}
	return ctx.Err()
}
