package probe

import (
	"net"
	"net/netip"
	"testing"
	"time"
)

// TestSocketRead reads a UDP socket on loopback as a probe socket: each
// packet comes with its source and the kernel's receive stamp, and the
// reads stop once more says no answer is awaited, leaving the rest queued
// for the next read.
func TestSocketRead(t *testing.T) {
	var local netip.AddrPort
	sock := newProbeSocket("", netip.MustParseAddr("127.0.0.1"), false, func() (net.PacketConn, error) {
		c, err := net.ListenPacket("udp4", "127.0.0.1:0")
		if err == nil {
			local = c.LocalAddr().(*net.UDPAddr).AddrPort()
		}
		return c, err
	})
	if err := sock.start(); err != nil {
		t.Fatal(err)
	}
	defer sock.stop()
	peer, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	awaitKernelStamps(t, sock, peer, local)
	for _, p := range []string{"one", "two", "three"} {
		if _, err := peer.WriteTo([]byte(p), net.UDPAddrFromAddrPort(local)); err != nil {
			t.Fatal(err)
		}
	}
	sent := time.Now()
	time.Sleep(50 * time.Millisecond)

	buf := make([]byte, 512)
	var got []string
	read := func(want int) {
		t.Helper()
		now := time.Now()
		err := sock.read(buf, now, func() bool { return len(got) < want }, func(b []byte, from netip.Addr, arrival time.Time) {
			got = append(got, string(b))
			if from != netip.MustParseAddr("127.0.0.1") {
				t.Errorf("from %v, want 127.0.0.1", from)
			}
			// The kernel stamped the packet on arrival, some 50 ms
			// before the read.
			if arrival.Before(sent.Add(-time.Second)) || arrival.After(now.Add(-40*time.Millisecond)) {
				t.Errorf("arrival %v after the send, %v before the read: want the kernel's stamp", arrival.Sub(sent), now.Sub(arrival))
			}
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	read(1)
	if len(got) != 1 || got[0] != "one" {
		t.Fatalf("read while one answer is awaited: %q, want [one]", got)
	}
	read(10)
	if len(got) != 3 || got[1] != "two" || got[2] != "three" {
		t.Fatalf("read on: %q, want [one two three]", got)
	}
	read(20) // nothing queued: EAGAIN, no error
	if len(got) != 3 {
		t.Fatalf("read of an empty socket: %q", got)
	}
}

// awaitKernelStamps waits until the kernel stamps the packets that sock
// receives on arrival. Linux turns receive stamping on for the whole
// system when the first socket asks for it, but in a work item that runs
// later (net_enable_timestamp defers the static key's switch): a packet
// that arrives before then is stamped when it is read. On a busy machine,
// with no other socket holding stamps on, the test's first packets came
// in that gap ("0s before the read"). A warm-up packet read 20 ms after
// it was sent shows which side of it we are on.
func awaitKernelStamps(t *testing.T, sock *probeSocket, peer net.PacketConn, local netip.AddrPort) {
	t.Helper()
	buf := make([]byte, 512)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		if _, err := peer.WriteTo([]byte("warm-up"), net.UDPAddrFromAddrPort(local)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
		now, stamped := time.Now(), false
		err := sock.read(buf, now, func() bool { return true }, func(_ []byte, _ netip.Addr, arrival time.Time) {
			stamped = stamped || arrival.Before(now.Add(-10*time.Millisecond))
		})
		if err != nil {
			t.Fatal(err)
		}
		if stamped {
			return
		}
	}
	t.Fatal("the kernel did not stamp a received packet within 5s")
}
