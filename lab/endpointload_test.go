package lab_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/autoshape/autoshape/lab"
)

// fakeEndpoint hands out in-memory connections whose far end asks nothing
// of the load: it reads the request byte, then reads and discards (upload)
// or sends (download) until told to fail the connection.
type fakeEndpoint struct {
	mu       sync.Mutex
	requests []byte
	far      []net.Conn
	dialed   chan int // the number of each dial, from 1
	refuse   bool
}

func newFakeEndpoint() *fakeEndpoint { return &fakeEndpoint{dialed: make(chan int, 64)} }

func (f *fakeEndpoint) dial(context.Context) (net.Conn, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refuse {
		return nil, errors.New("connection refused")
	}
	near, far := net.Pipe()
	f.far = append(f.far, far)
	n := len(f.far)
	go func() {
		var req [1]byte
		if _, err := io.ReadFull(far, req[:]); err != nil {
			return
		}
		f.mu.Lock()
		f.requests = append(f.requests, req[0])
		f.mu.Unlock()
		f.dialed <- n
		if req[0] == lab.EndpointUpload {
			io.Copy(io.Discard, far)
			return
		}
		buf := make([]byte, 1024)
		for {
			if _, err := far.Write(buf); err != nil {
				return
			}
		}
	}()
	return near, nil
}

// fail breaks connection n (from 1) from the endpoint's side.
func (f *fakeEndpoint) fail(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.far[n-1].Close()
}

// TestEndpointLoadReplacesAFailedStream: a stream whose connection fails in
// the middle of a step is replaced by a new connection asking for the same
// direction, the failure is reported, and the load goes on until its
// context ends, when Run returns nil.
func TestEndpointLoadReplacesAFailedStream(t *testing.T) {
	for _, download := range []bool{false, true} {
		ep := newFakeEndpoint()
		var replaced []string
		l := &lab.EndpointLoad{Dial: ep.dial, Download: download, Streams: 2,
			Replaced: func(err error) { replaced = append(replaced, err.Error()) }}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- l.Run(ctx) }()
		<-ep.dialed
		<-ep.dialed
		ep.fail(1)
		if n := <-ep.dialed; n != 3 {
			t.Fatalf("download %v: dial %d after the failure, want the 3rd", download, n)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("download %v: Run = %v, want nil once its context ends", download, err)
		}
		want := byte(lab.EndpointUpload)
		if download {
			want = lab.EndpointDownload
		}
		if diff := cmp.Diff([]byte{want, want, want}, ep.requests); diff != "" {
			t.Errorf("download %v: requests (-want +got):\n%s", download, diff)
		}
		if len(replaced) != 1 {
			t.Errorf("download %v: replaced %q, want the one failure", download, replaced)
		}
	}
}

// TestEndpointLoadGivesUp: when every replacement fails too (the endpoint
// is gone), Run returns the failure after MaxReplacements instead of
// looping, so that the sweep's step can fail and be retried.
func TestEndpointLoadGivesUp(t *testing.T) {
	ep := newFakeEndpoint()
	l := &lab.EndpointLoad{Dial: ep.dial, Streams: 2, MaxReplacements: 3}
	done := make(chan error, 1)
	go func() { done <- l.Run(context.Background()) }()
	<-ep.dialed
	<-ep.dialed
	ep.mu.Lock()
	ep.refuse = true
	ep.mu.Unlock()
	ep.fail(1)
	err := <-done
	if err == nil || !strings.Contains(err.Error(), "connection refused") || !strings.Contains(err.Error(), "no replacement left") {
		t.Errorf("Run = %v, want the last failure after the replacements ran out", err)
	}
}
