//go:build linux

package actuator

import (
	"context"
	"fmt"
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
		if _, _, err := h.SetRate(ifindex, rates[i%2]); err != nil {
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
		if _, _, err := h.SetRate(ifindex, 20_000_000); err != nil {
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

// BenchmarkStats reads a Link's upload statistics, as the daemon does for
// each direction at every tick, in a namespace with one shaped link and in
// one with 16 (the cost of a request that dumps every qdisc grows with
// them).
func BenchmarkStats(b *testing.B) {
	for _, links := range []int{1, 16} {
		b.Run(fmt.Sprintf("htb/links=%d", links), func(b *testing.B) {
			name, ns := newTestNS(b)
			var l *Link
			for i := range links {
				wan := fmt.Sprintf("wan%d", i)
				newTestVeth(b, testEnd{NS: name, Dev: wan}, testEnd{NS: name, Dev: fmt.Sprintf("isp%d", i)})
				var err error
				l, err = Setup(SetupConfig{Iface: wan, Backend: HTB, Up: 20e6, Down: 30e6, NetNS: int(ns)})
				if err != nil {
					b.Fatalf("Setup %s: %v", wan, err)
				}
				b.Cleanup(func() { l.Close() })
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := l.Up().Stats(ctx); err != nil {
					b.Fatalf("Stats: %v", err)
				}
			}
		})
	}
}
