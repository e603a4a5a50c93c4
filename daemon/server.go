package daemon

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

// metricsPath is where serveMetrics answers scrapes.
const metricsPath = "/metrics"

// metricsContentType is Prometheus' text exposition format.
const metricsContentType = "text/plain; version=0.0.4; charset=utf-8"

// metricsScrapeTimeout bounds one scrape, from the connection to the last
// byte of the answer, and so how long serveMetrics waits for scrapes in
// flight when its context ends.
const metricsScrapeTimeout = 5 * time.Second

// maxRequestHead bounds the request line and headers of a scrape.
const maxRequestHead = 8 << 10

// A metricsServer serves the metrics on an address that a reload may
// change.
type metricsServer struct {
	metrics *Metrics
	log     *zap.Logger

	addr   string // "" while it serves nothing
	cancel context.CancelFunc
	done   chan struct{}
}

// serve makes the server listen on addr, "" for nowhere. It listens on the
// new address before it lets the old one go, unless the old one is in the
// way (the same port); when the new address fails it keeps or takes back
// the old one and returns the error.
func (s *metricsServer) serve(ctx context.Context, addr string) error {
	if addr == s.addr {
		return nil
	}
	if addr == "" {
		s.stop()
		return nil
	}
	ln, err := listenMetrics(addr)
	if err != nil && s.addr != "" {
		old := s.addr
		s.stop()
		if ln, err = listenMetrics(addr); err != nil {
			if back, berr := listenMetrics(old); berr == nil {
				s.start(ctx, old, back)
			}
			return err
		}
	}
	if err != nil {
		return err
	}
	s.stop()
	s.start(ctx, addr, ln)
	return nil
}

// start serves on ln until stop or the end of ctx.
func (s *metricsServer) start(ctx context.Context, addr string, ln net.Listener) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := serveMetrics(ctx, ln, s.metrics, s.log); err != nil {
			s.log.Error("metrics server stopped", zap.Error(err))
		}
	}()
	s.addr, s.cancel, s.done = addr, cancel, done
}

// stop stops serving and waits until the listener is closed.
func (s *metricsServer) stop() {
	if s.cancel == nil {
		return
	}
	s.cancel()
	<-s.done
	s.addr, s.cancel, s.done = "", nil, nil
}

// listenMetrics listens on addr (host:port) for serveMetrics.
func listenMetrics(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("failed to listen for metrics on %q: %w", addr, err)
	}
	return ln, nil
}

// serveMetrics serves m at /metrics on ln until ctx ends, then closes ln,
// lets the scrapes in flight finish and returns nil. It is a Task: run it
// under the daemon's errgroup.
//
// It speaks just enough HTTP/1.1 for a scraper, one request per
// connection: net/http's server would add its TLS and HTTP/2 code to the
// router's binary.
func serveMetrics(ctx context.Context, ln net.Listener, m *Metrics, log *zap.Logger) error {
	if log == nil {
		log = zap.NewNop()
	}
	addr := ln.Addr().String()
	log = log.With(zap.String("addr", addr))
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	var scrapes sync.WaitGroup
	defer scrapes.Wait()
	log.Info("serving metrics", zap.String("path", metricsPath))
	for {
		c, err := ln.Accept()
		switch {
		case ctx.Err() != nil:
			if c != nil {
				c.Close()
			}
			return nil
		case errors.Is(err, net.ErrClosed):
			return fmt.Errorf("failed to serve metrics on %s: %w", addr, err)
		case err != nil:
			// Out of file descriptors, or a connection reset before it was
			// accepted: wait a little rather than spin.
			log.Warn("failed to accept a scrape", zap.Error(err))
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		scrapes.Go(func() { answerScrape(c, m) })
	}
}

// answerScrape reads one request from c, answers it and closes c: the
// metrics for a GET or HEAD of metricsPath, an error status otherwise.
func answerScrape(c net.Conn, m *Metrics) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(metricsScrapeTimeout))
	method, target, err := readRequestHead(bufio.NewReader(io.LimitReader(c, maxRequestHead)))
	var body bytes.Buffer
	status := "200 OK"
	switch {
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed):
		return // the scraper left, or the request head was too long
	case err != nil:
		status = "400 Bad Request"
	case method != "GET" && method != "HEAD":
		status = "405 Method Not Allowed"
	case strings.SplitN(target, "?", 2)[0] != metricsPath:
		status = "404 Not Found"
	default:
		m.WritePrometheus(&body)
	}
	if status != "200 OK" {
		body.WriteString(status + "\n")
	}
	fmt.Fprintf(c, "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n",
		status, metricsContentType, body.Len())
	if method != "HEAD" {
		c.Write(body.Bytes())
	}
}

// readRequestHead reads an HTTP/1.x request line and skips the headers
// after it, up to the blank line.
func readRequestHead(r *bufio.Reader) (method, target string, err error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", "", err
	}
	f := strings.Fields(line)
	if len(f) != 3 || !strings.HasPrefix(f[2], "HTTP/1.") {
		return "", "", fmt.Errorf("malformed request line %q", line)
	}
	for {
		h, err := r.ReadString('\n')
		if err != nil {
			return "", "", err
		}
		if strings.TrimRight(h, "\r\n") == "" {
			return f[0], f[1], nil
		}
	}
}
