package lab

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"
)

// An EndpointLoad keeps Streams TCP streams to a load Endpoint busy in one
// direction until its context ends. A stream that fails is replaced by a
// new connection at once, so that one lost connection neither ends the load
// nor leaves it a stream short; after MaxReplacements replacements the next
// failure ends it.
type EndpointLoad struct {
	// Dial opens one connection to the endpoint.
	Dial func(ctx context.Context) (net.Conn, error)
	// Download asks the endpoint to send; otherwise the streams send to it.
	Download bool
	Streams  int
	// MaxReplacements is how many failed streams are replaced before Run
	// gives up; 0 means four per stream.
	MaxReplacements int
	// Replaced, when set, learns of each failure that was replaced.
	Replaced func(err error)
}

// Run loads until ctx ends (and then returns nil), or returns the failure
// that found no replacement left.
func (l *EndpointLoad) Run(ctx context.Context) error {
	if l.Streams < 1 {
		return fmt.Errorf("endpoint load: %d streams, want at least 1", l.Streams)
	}
	left := l.MaxReplacements
	if left <= 0 {
		left = 4 * l.Streams
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	failed := make(chan error)
	start := func() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := l.stream(ctx)
			select {
			case failed <- err:
			case <-ctx.Done():
			}
		}()
	}
	for range l.Streams {
		start()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-failed:
			if ctx.Err() != nil {
				return nil
			}
			if left == 0 {
				return fmt.Errorf("a load stream failed with no replacement left: %w", err)
			}
			left--
			if l.Replaced != nil {
				l.Replaced(err)
			}
			start()
		}
	}
}

// stream runs one connection until it fails or ctx ends.
func (l *EndpointLoad) stream(ctx context.Context) error {
	c, err := l.Dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	req := []byte{EndpointUpload}
	if l.Download {
		req[0] = EndpointDownload
	}
	if _, err := c.Write(req); err != nil {
		return err
	}
	buf := make([]byte, 64<<10)
	for {
		if l.Download {
			_, err = c.Read(buf)
		} else {
			_, err = c.Write(buf)
		}
		if err != nil {
			return err
		}
	}
}

// endpointDialTimeout bounds a connection's handshake to the endpoint: long
// enough for a SYN or SYN-ACK that a full half-second line buffer dropped to
// be sent again twice (at 1 s and 3 s).
const endpointDialTimeout = 10 * time.Second

// DialEndpoint returns a Dial for an EndpointLoad that connects from the
// namespace ns to addr with the TCP congestion control cc.
func DialEndpoint(ns, addr, cc string) func(ctx context.Context) (net.Conn, error) {
	if cc == "" {
		cc = "cubic"
	}
	return func(ctx context.Context) (c net.Conn, err error) {
		err = InNS(ns, func() (err error) {
			d := net.Dialer{Timeout: endpointDialTimeout, Control: congestion(cc)}
			c, err = d.DialContext(ctx, "tcp", addr)
			return err
		})
		return c, err
	}
}
