package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// A Load is N TCP streams in one direction between cli and srv; the
// receivers count what arrives.
type Load struct {
	received atomic.Int64
	ln       net.Listener
	conns    []net.Conn
	mu       sync.Mutex
	stopped  bool
	wg       sync.WaitGroup
	err      error
}

// rcvLowat is the least a load socket's reader is woken for: 16 KB, a
// dozen full frames. A wakeup per packet costs little on the host, but
// every system call of a process inside User-mode Linux traps to the host,
// and reading packet by packet made the load generator the guest's largest
// consumer of its one CPU.
const rcvLowat = 16 << 10

// congestion sets a load socket's TCP congestion control, and its receive
// low-water mark to rcvLowat.
func congestion(cc string) func(_, _ string, c syscall.RawConn) error {
	return func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, cc)
			if serr != nil {
				serr = fmt.Errorf("TCP congestion control %q: %w", cc, serr)
				return
			}
			if err := unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, rcvLowat); err != nil {
				serr = fmt.Errorf("SO_RCVLOWAT: %w", err)
			}
		}); err != nil {
			return err
		}
		return serr
	}
}

// StartLoad starts streams TCP streams, download (srv sends to cli) or
// upload (cli sends to srv), with the congestion control cc ("cubic" when
// empty; the host's default may well be bbr). Stop ends them.
func StartLoad(top *Topology, download bool, streams int, cc string) (*Load, error) {
	if streams < 1 {
		return nil, fmt.Errorf("load: %d streams", streams)
	}
	if cc == "" {
		cc = "cubic"
	}
	l := &Load{}
	addr := net.JoinHostPort(top.SrvAddr.String(), "0")
	if err := InNS(top.Srv, func() (err error) {
		lc := net.ListenConfig{Control: congestion(cc)}
		l.ln, err = lc.Listen(context.Background(), "tcp", addr)
		return err
	}); err != nil {
		return nil, err
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		for {
			c, err := l.ln.Accept()
			if err != nil {
				return
			}
			l.track(c)
			l.wg.Add(1)
			go func() {
				defer l.wg.Done()
				if download {
					l.send(c)
				} else {
					l.receive(c)
				}
			}()
		}
	}()
	for range streams {
		var c net.Conn
		if err := InNS(top.Cli, func() (err error) {
			d := net.Dialer{Control: congestion(cc)}
			c, err = d.Dial("tcp", l.ln.Addr().String())
			return err
		}); err != nil {
			l.Stop()
			return nil, err
		}
		l.track(c)
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			if download {
				l.receive(c)
			} else {
				l.send(c)
			}
		}()
	}
	return l, nil
}

// track keeps c for Stop; after Stop it closes c at once.
func (l *Load) track(c net.Conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		c.Close()
		return
	}
	l.conns = append(l.conns, c)
}

func (l *Load) fail(err error) {
	if errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return
	}
	l.mu.Lock()
	if l.err == nil {
		l.err = err
	}
	l.mu.Unlock()
}

func (l *Load) send(c net.Conn) {
	buf := make([]byte, 64<<10)
	for {
		if _, err := c.Write(buf); err != nil {
			l.fail(err)
			return
		}
	}
}

func (l *Load) receive(c net.Conn) {
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		l.received.Add(int64(n))
		if err != nil {
			l.fail(err)
			return
		}
	}
}

// Received is how many bytes the receivers have read so far.
func (l *Load) Received() int64 { return l.received.Load() }

// Stop closes every stream and returns the first error a stream met other
// than being closed.
func (l *Load) Stop() error {
	l.ln.Close()
	l.mu.Lock()
	l.stopped = true
	for _, c := range l.conns {
		c.Close()
	}
	l.mu.Unlock()
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}
