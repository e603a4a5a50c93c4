//go:build linux

package actuator

import (
	"testing"
)

// newBenchHTB builds an HTB at 20 Mbit/s on a veth in a fresh namespace.
func newBenchHTB(b *testing.B) (*htb, uint32) {
	b.Helper()
	name, ns := newTestNS(b)
	newTestVeth(b, testEnd{NS: name, Dev: "wan0"}, testEnd{NS: name, Dev: "isp0"})
	ifindex := testIfindex(b, testNetlink(b, ns), "wan0")
	h := newHTB(testTC(b, ns), Framing{LinkLayer: ATM, Overhead: 44})
	if err := h.Create(ifindex, 20_000_000, false); err != nil {
		b.Fatalf("Create: %v", err)
	}
	return h, ifindex
}

// BenchmarkHTBSetRate alternates two rates, so every call writes the class
// and resizes the bfifo leaf.
func BenchmarkHTBSetRate(b *testing.B) {
	h, ifindex := newBenchHTB(b)
	rates := [2]uint64{10_000_000, 20_000_000}
	i := 0
	for b.Loop() {
		if err := h.SetRate(ifindex, rates[i%2]); err != nil {
			b.Fatalf("SetRate: %v", err)
		}
		i++
	}
}

// BenchmarkHTBSetRateSame sets the rate the kernel already holds: a read
// and no write.
func BenchmarkHTBSetRateSame(b *testing.B) {
	h, ifindex := newBenchHTB(b)
	for b.Loop() {
		if err := h.SetRate(ifindex, 20_000_000); err != nil {
			b.Fatalf("SetRate: %v", err)
		}
	}
}

// BenchmarkHTBStats reads the root qdisc's counters.
func BenchmarkHTBStats(b *testing.B) {
	h, ifindex := newBenchHTB(b)
	for b.Loop() {
		if _, err := h.Stats(ifindex); err != nil {
			b.Fatalf("Stats: %v", err)
		}
	}
}

// BenchmarkLinkCounters reads an interface's 64-bit counters.
func BenchmarkLinkCounters(b *testing.B) {
	name, ns := newTestNS(b)
	newTestVeth(b, testEnd{NS: name, Dev: "wan0"}, testEnd{NS: name, Dev: "isp0"})
	h := testNetlink(b, ns)
	for b.Loop() {
		if _, _, err := linkCounters(h, "wan0"); err != nil {
			b.Fatalf("linkCounters: %v", err)
		}
	}
}
