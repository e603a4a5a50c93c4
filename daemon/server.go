package daemon

import (
	"context"
	"net"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// A metricsServer serves one registry on an address that a reload may
// change.
type metricsServer struct {
	reg *prometheus.Registry
	log *zap.Logger

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
		if err := serveMetrics(ctx, ln, s.reg, s.log); err != nil {
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
