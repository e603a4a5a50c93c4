//go:build linux

package actuator

import (
	"strings"
	"testing"
)

func TestLinkCounters(t *testing.T) {
	l := newHTBLink(t)
	h := testNetlink(t, l.ns)

	rx0, tx0, err := linkCounters(h, l.router.Dev)
	if err != nil {
		t.Fatalf("linkCounters: %v", err)
	}
	const n, size = 20, 1000
	sendUDP(t, l.ns, l.peer.IP()+":9", n, size, 0)
	var rx, tx uint64
	if !eventually(func() bool {
		rx, tx, err = linkCounters(h, l.router.Dev)
		return err == nil && tx-tx0 >= n*(size+42)
	}) {
		t.Errorf("linkCounters: tx %d bytes more, err %v; want at least %d", tx-tx0, err, n*(size+42))
	}
	// The peer answers with ICMP port unreachable (rate limited, so at
	// least one) and ARP.
	if rx <= rx0 {
		t.Errorf("linkCounters: rx %d bytes, before %d; want more", rx, rx0)
	}

	for _, name := range []string{"nosuch0", "a-name-longer-than-15"} {
		_, _, err := linkCounters(h, name)
		if err == nil || !strings.Contains(err.Error(), `"`+name+`"`) {
			t.Errorf("linkCounters(%q): got %v, want an error naming it", name, err)
		}
	}
}
