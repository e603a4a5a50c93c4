package lab

import (
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"time"
)

// ProbeHz is the independent latency probe's rate.
const ProbeHz = 20

// A ProbeSample is one probe's one-way delays. The namespaces share the
// host's clock, so they are exact; a lost probe has Lost set.
type ProbeSample struct {
	Sent     time.Time
	Up, Down time.Duration
	Lost     bool
}

// A Probe measures the line's delay independently of the controller's own
// probes: UDP from cli to srv and back at ProbeHz, each packet stamped when
// it leaves cli and when srv echoes it.
type Probe struct {
	srv, cli *net.UDPConn
	mu       sync.Mutex
	sent     map[uint64]time.Time
	samples  []ProbeSample
	done     chan struct{}
	wg       sync.WaitGroup
}

// probeBytes is the size of a probe's payload: sequence, send time, echo time.
const probeBytes = 24

// probeDeadline is how long a probe may take before it counts as lost.
const probeDeadline = 2 * time.Second

// StartProbe starts the probe; Stop ends it and returns the samples.
func StartProbe(top *Topology) (*Probe, error) {
	p := &Probe{sent: map[uint64]time.Time{}, done: make(chan struct{})}
	if err := InNS(top.Srv, func() (err error) {
		p.srv, err = net.ListenUDP("udp4", &net.UDPAddr{IP: top.SrvAddr.AsSlice()})
		return err
	}); err != nil {
		return nil, err
	}
	if err := InNS(top.Cli, func() (err error) {
		p.cli, err = net.DialUDP("udp4", nil, p.srv.LocalAddr().(*net.UDPAddr))
		return err
	}); err != nil {
		p.srv.Close()
		return nil, err
	}
	p.wg.Add(3)
	go p.echo()
	go p.receive()
	go p.send()
	return p, nil
}

// echo stamps each probe with srv's receive time and sends it back.
func (p *Probe) echo() {
	defer p.wg.Done()
	buf := make([]byte, 64)
	for {
		n, from, err := p.srv.ReadFromUDP(buf)
		if err != nil {
			return
		}
		if n != probeBytes {
			continue
		}
		binary.BigEndian.PutUint64(buf[16:], uint64(time.Now().UnixNano()))
		p.srv.WriteToUDP(buf[:n], from)
	}
}

func (p *Probe) send() {
	defer p.wg.Done()
	tick := time.NewTicker(time.Second / ProbeHz)
	defer tick.Stop()
	buf := make([]byte, probeBytes)
	for seq := uint64(0); ; seq++ {
		select {
		case <-p.done:
			return
		case <-tick.C:
		}
		now := time.Now()
		binary.BigEndian.PutUint64(buf, seq)
		binary.BigEndian.PutUint64(buf[8:], uint64(now.UnixNano()))
		p.mu.Lock()
		p.sent[seq] = now
		p.expireLocked(now)
		p.mu.Unlock()
		p.cli.Write(buf)
	}
}

// expireLocked records probes older than the deadline as lost.
func (p *Probe) expireLocked(now time.Time) {
	for seq, at := range p.sent {
		if now.Sub(at) > probeDeadline {
			p.samples = append(p.samples, ProbeSample{Sent: at, Lost: true})
			delete(p.sent, seq)
		}
	}
}

func (p *Probe) receive() {
	defer p.wg.Done()
	buf := make([]byte, 64)
	for {
		n, err := p.cli.Read(buf)
		if err != nil {
			return
		}
		now := time.Now()
		if n != probeBytes {
			continue
		}
		seq := binary.BigEndian.Uint64(buf)
		sent := time.Unix(0, int64(binary.BigEndian.Uint64(buf[8:])))
		echoed := time.Unix(0, int64(binary.BigEndian.Uint64(buf[16:])))
		p.mu.Lock()
		if at, ok := p.sent[seq]; ok && at.Equal(sent) {
			delete(p.sent, seq)
			p.samples = append(p.samples, ProbeSample{Sent: sent, Up: echoed.Sub(sent), Down: now.Sub(echoed)})
		}
		p.mu.Unlock()
	}
}

// Samples returns a copy of the samples so far, in arrival order.
func (p *Probe) Samples() []ProbeSample {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]ProbeSample(nil), p.samples...)
}

// Stop ends the probe; probes still in flight are dropped.
func (p *Probe) Stop() error {
	close(p.done)
	err := errors.Join(p.cli.Close(), p.srv.Close())
	p.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}
