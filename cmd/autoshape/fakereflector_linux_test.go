//go:build linux

package main

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// A fakeReflector answers ICMP echo and timestamp requests for addresses
// that no namespace holds, so that a test decides every answer: drop it,
// delay it, or step the reflector's wall clock. It reads the requests from a
// packet socket on the reflector's end of the veth (the reflector
// namespace's kernel drops them: they are not for it, and it does not
// forward) and sends the replies from a raw socket with the fake source.
// The router reaches the addresses through permanent neighbour entries.
type fakeReflector struct {
	addrs map[netip.Addr]bool

	mu       sync.Mutex
	drop     bool
	maxDelay time.Duration
	offset   time.Duration // added to the wall clock in timestamp replies
	now      func() time.Time

	rx, tx int
	done   chan struct{}
	wg     sync.WaitGroup
}

// newFakeReflector starts one for addrs on dev in namespace ns; router is
// the namespace that probes them and routerDev its end of the veth.
func newFakeReflector(t *testing.T, ns, dev, router, routerDev string, addrs ...string) *fakeReflector {
	t.Helper()
	f := &fakeReflector{addrs: map[netip.Addr]bool{}, now: time.Now, done: make(chan struct{})}
	mac := ""
	for _, field := range strings.Fields(mustRun(t, "ip", "-n", ns, "-o", "link", "show", dev)) {
		if _, err := net.ParseMAC(field); err == nil && strings.Count(field, ":") == 5 && field != "ff:ff:ff:ff:ff:ff" {
			mac = field
			break
		}
	}
	if mac == "" {
		t.Fatalf("no MAC address on %s in %s", dev, ns)
	}
	for _, a := range addrs {
		f.addrs[netip.MustParseAddr(a)] = true
		mustRun(t, "ip", "-n", router, "neigh", "replace", a, "lladdr", mac, "dev", routerDev, "nud", "permanent")
	}

	type fds struct {
		rx, tx int
		err    error
	}
	ready := make(chan fds, 1)
	go func() {
		runtime.LockOSThread() // left locked: the thread ends with the goroutine
		var r fds
		h, err := netns.GetFromName(ns)
		if err != nil {
			ready <- fds{err: err}
			return
		}
		defer h.Close()
		if err := netns.Set(h); err != nil {
			ready <- fds{err: err}
			return
		}
		ifi, err := net.InterfaceByName(dev)
		if err != nil {
			ready <- fds{err: err}
			return
		}
		proto := int(htons(unix.ETH_P_IP))
		if r.rx, r.err = unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM, proto); r.err == nil {
			r.err = unix.Bind(r.rx, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_IP), Ifindex: ifi.Index})
		}
		if r.err == nil {
			tv := unix.NsecToTimeval(int64(100 * time.Millisecond))
			r.err = unix.SetsockoptTimeval(r.rx, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
		}
		if r.err == nil {
			r.tx, r.err = unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_RAW)
		}
		ready <- r
	}()
	r := <-ready
	if r.err != nil {
		t.Fatalf("fake reflector in %s: %v", ns, r.err)
	}
	f.rx, f.tx = r.rx, r.tx
	f.wg.Add(1)
	go f.serve()
	t.Cleanup(f.close)
	return f
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func (f *fakeReflector) close() {
	select {
	case <-f.done:
		return
	default:
	}
	close(f.done)
	f.wg.Wait()
	unix.Close(f.rx)
	unix.Close(f.tx)
}

// set changes how the reflector answers from now on.
func (f *fakeReflector) set(drop bool, maxDelay, offset time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.drop, f.maxDelay, f.offset = drop, maxDelay, offset
}

func (f *fakeReflector) setDrop(drop bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.drop = drop
}

func (f *fakeReflector) setOffset(offset time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.offset = offset
}

func (f *fakeReflector) serve() {
	defer f.wg.Done()
	buf := make([]byte, 2048)
	for {
		select {
		case <-f.done:
			return
		default:
		}
		n, from, err := unix.Recvfrom(f.rx, buf, 0)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				continue
			}
			return
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		f.answer(append([]byte(nil), buf[:n]...))
	}
}

// answer replies to one IPv4 packet if it is an ICMP echo or timestamp
// request for one of the fake addresses.
func (f *fakeReflector) answer(p []byte) {
	if len(p) < 20 || p[0]>>4 != 4 || p[9] != unix.IPPROTO_ICMP {
		return
	}
	ihl := int(p[0]&0xf) * 4
	total := int(binary.BigEndian.Uint16(p[2:4]))
	if ihl < 20 || total > len(p) || total < ihl+8 {
		return
	}
	src, _ := netip.AddrFromSlice(p[12:16])
	dst, _ := netip.AddrFromSlice(p[16:20])
	if !f.addrs[dst] {
		return
	}
	icmp := append([]byte(nil), p[ihl:total]...)
	f.mu.Lock()
	drop, maxDelay, offset, now := f.drop, f.maxDelay, f.offset, f.now
	f.mu.Unlock()
	if drop {
		return
	}
	received := now().Add(offset)
	switch {
	case icmp[0] == 8 && icmp[1] == 0: // echo request
		icmp[0] = 0
	case icmp[0] == 13 && icmp[1] == 0 && len(icmp) >= 20: // timestamp request
		icmp[0] = 14
		binary.BigEndian.PutUint32(icmp[12:16], msOfDay(received)) // receive; 8:12 is the originate
	default:
		return
	}
	send := func() {
		if icmp[0] == 14 {
			f.mu.Lock()
			off := f.offset
			f.mu.Unlock()
			binary.BigEndian.PutUint32(icmp[16:20], msOfDay(now().Add(off))) // transmit
		}
		icmp[2], icmp[3] = 0, 0
		binary.BigEndian.PutUint16(icmp[2:4], checksum(icmp))
		f.send(dst, src, icmp)
	}
	if maxDelay > 0 {
		f.wg.Add(1) // serve holds one: close waits for the replies in flight
		time.AfterFunc(time.Duration(rand.Int64N(int64(maxDelay))), func() {
			defer f.wg.Done()
			send()
		})
		return
	}
	send()
}

func msOfDay(t time.Time) uint32 {
	t = t.UTC()
	return uint32((t.Hour()*3600+t.Minute()*60+t.Second())*1000 + t.Nanosecond()/1e6)
}

func (f *fakeReflector) send(src, dst netip.Addr, icmp []byte) {
	pkt := make([]byte, 20+len(icmp))
	pkt[0] = 0x45
	binary.BigEndian.PutUint16(pkt[2:4], uint16(len(pkt)))
	pkt[8] = 64
	pkt[9] = unix.IPPROTO_ICMP
	s, d := src.As4(), dst.As4()
	copy(pkt[12:16], s[:])
	copy(pkt[16:20], d[:])
	binary.BigEndian.PutUint16(pkt[10:12], checksum(pkt[:20]))
	copy(pkt[20:], icmp)
	select {
	case <-f.done:
		return
	default:
	}
	unix.Sendto(f.tx, pkt, 0, &unix.SockaddrInet4{Addr: d})
}

func checksum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}
