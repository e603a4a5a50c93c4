package lab

import (
	"context"
	"io"
	"net"
)

// Endpoint requests: the first byte a client sends on a connection to an
// Endpoint says which way the bytes flow.
const (
	EndpointDownload = 'D' // the endpoint sends until the client goes
	EndpointUpload   = 'U' // the endpoint reads and discards
)

// An Endpoint is srv's load endpoint for tools outside the lab's own Load
// (such as `autoshape sweep --load tcp:ADDR`).
type Endpoint struct {
	ln net.Listener
}

// StartEndpoint listens on srv's address at port (0: any) with the
// congestion control cc for what it sends.
func StartEndpoint(top *Topology, port string, cc string) (*Endpoint, error) {
	if cc == "" {
		cc = "cubic"
	}
	e := &Endpoint{}
	if err := InNS(top.Srv, func() (err error) {
		lc := net.ListenConfig{Control: congestion(cc)}
		e.ln, err = lc.Listen(context.Background(), "tcp", net.JoinHostPort(top.SrvAddr.String(), port))
		return err
	}); err != nil {
		return nil, err
	}
	go func() {
		for {
			c, err := e.ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				serveEndpoint(c)
			}()
		}
	}()
	return e, nil
}

func serveEndpoint(c net.Conn) {
	var req [1]byte
	if _, err := io.ReadFull(c, req[:]); err != nil {
		return
	}
	switch req[0] {
	case EndpointDownload:
		buf := make([]byte, 64<<10)
		for {
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	case EndpointUpload:
		io.Copy(io.Discard, c)
	}
}

// Addr is the endpoint's address.
func (e *Endpoint) Addr() string { return e.ln.Addr().String() }

// Close stops listening; connections end when their clients go.
func (e *Endpoint) Close() error { return e.ln.Close() }
