//go:build linux

package actuator

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestIFBRedirect redirects a WAN interface's incoming packets to an IFB,
// shapes them there with an HTB and undoes it all.
func TestIFBRedirect(t *testing.T) {
	l := newHTBLink(t)
	h := testNetlink(t, l.ns)
	const ifb = "ifb4wan0"
	snapshot := func() string {
		return runCmd(t, "ip", "-n", l.router.NS, "link") + runCmd(t, "tc", "-n", l.router.NS, "qdisc")
	}
	before := snapshot()

	for i, want := range []bool{true, false} {
		created, err := ensureIFB(h, ifb)
		if err != nil {
			t.Fatalf("ensureIFB #%d: %v", i+1, err)
		}
		if created != want {
			t.Errorf("ensureIFB #%d: created %t, want %t", i+1, created, want)
		}
	}
	mustContain(t, "ip link show", runCmd(t, "ip", "-n", l.router.NS, "link", "show", ifb), "state UNKNOWN", ",UP,", "alias autoshape")
	for i, want := range []bool{true, false} {
		added, err := redirectIngress(h, l.router.Dev, ifb)
		if err != nil {
			t.Fatalf("redirectIngress #%d: %v", i+1, err)
		}
		if added != want {
			t.Errorf("redirectIngress #%d: added %t, want %t", i+1, added, want)
		}
	}
	filters := runCmd(t, "tc", "-n", l.router.NS, "filter", "show", "dev", l.router.Dev, "ingress")
	if got := strings.Count(filters, "Redirect to device "+ifb); got != 1 {
		t.Errorf("tc filter show has %d redirects to %s, want 1:\n%s", got, ifb, filters)
	}
	mustContain(t, "tc filter show", filters, "filter parent ffff: protocol all pref 10 u32", "match 00000000/00000000 at 0")

	shaper := newHTB(testTC(t, l.ns), Framing{})
	ifbIndex := testIfindex(t, h, ifb)
	if err := shaper.Create(ifbIndex, 50_000_000, false); err != nil {
		t.Fatalf("Create on the IFB: %v", err)
	}
	_, tx0, err := linkCounters(h, ifb)
	if err != nil {
		t.Fatalf("linkCounters: %v", err)
	}
	// From the peer into wan0: these arrive on wan0 and leave through the
	// IFB, where the shaper sees them.
	const n, size = 50, 500
	sendUDP(t, l.peerNS, l.router.IP()+":9", n, size, 500*time.Microsecond)
	// Each redirected frame is the payload with UDP, IPv4 and Ethernet
	// headers.
	want := uint64(n * (size + 8 + 20 + 14))
	var tx uint64
	var s Stats
	ok := eventually(func() bool {
		_, tx, err = linkCounters(h, ifb)
		if err != nil {
			return false
		}
		s, err = shaper.Stats(ifbIndex)
		return err == nil && tx-tx0 >= want && s.Bytes >= want
	})
	if !ok {
		t.Errorf("IFB sent %d bytes, HTB on it counted %+v (err %v); want at least %d bytes each", tx-tx0, s, err, want)
	}

	for i := range 2 {
		if err := removeRedirect(h, l.router.Dev, int(ifbIndex)); err != nil {
			t.Fatalf("removeRedirect #%d: %v", i+1, err)
		}
		if err := deleteIFB(h, ifb); err != nil {
			t.Fatalf("deleteIFB #%d: %v", i+1, err)
		}
	}
	if diff := cmp.Diff(before, snapshot()); diff != "" {
		t.Errorf("ip link and tc qdisc after undoing (-before +after):\n%s", diff)
	}
}

func TestIFBErrors(t *testing.T) {
	l := newHTBLink(t)
	h := testNetlink(t, l.ns)
	dev := l.router.Dev
	if _, err := ensureIFB(h, dev); err == nil || !strings.Contains(err.Error(), `"wan0" as an IFB: it is a veth link`) {
		t.Errorf("ensureIFB on a veth: got %v", err)
	}
	if err := deleteIFB(h, dev); err == nil || !strings.Contains(err.Error(), "it is a veth link") {
		t.Errorf("deleteIFB on a veth: got %v", err)
	}
	if _, err := redirectIngress(h, "nosuch0", dev); err == nil || !strings.Contains(err.Error(), `"nosuch0"`) {
		t.Errorf("redirectIngress from a missing interface: got %v", err)
	}
	if _, err := redirectIngress(h, dev, "nosuch1"); err == nil || !strings.Contains(err.Error(), `"nosuch1"`) {
		t.Errorf("redirectIngress to a missing IFB: got %v", err)
	}
	if err := removeRedirect(h, "nosuch2", 1); err == nil || !strings.Contains(err.Error(), `"nosuch2"`) {
		t.Errorf("removeRedirect on a missing interface: got %v", err)
	}
	// A clsact qdisc holds the ingress hook for someone else.
	runCmd(t, "tc", "-n", l.router.NS, "qdisc", "add", "dev", dev, "clsact")
	if _, err := ensureIFB(h, "ifb0"); err != nil {
		t.Fatalf("ensureIFB: %v", err)
	}
	if _, err := redirectIngress(h, dev, "ifb0"); err == nil || !strings.Contains(err.Error(), "clsact") {
		t.Errorf("redirectIngress with a clsact qdisc: got %v", err)
	}
	if err := removeRedirect(h, dev, int(testIfindex(t, h, "ifb0"))); err == nil {
		t.Errorf("removeRedirect with a clsact qdisc: got nil, want an error")
	}
	mustContain(t, "tc qdisc show", runCmd(t, "tc", "-n", l.router.NS, "qdisc", "show", "dev", dev), "qdisc clsact ffff: parent ffff:fff1")
}

// TestRemoveRedirectKeepsOthers: removing autoshape's redirect leaves other
// ingress filters, at its own preference or another, and the ingress qdisc
// that holds them.
func TestRemoveRedirectKeepsOthers(t *testing.T) {
	l := newHTBLink(t)
	h := testNetlink(t, l.ns)
	ns, dev := l.router.NS, l.router.Dev
	for _, ifb := range []string{"ifb0", "ifb1"} {
		if _, err := ensureIFB(h, ifb); err != nil {
			t.Fatalf("ensureIFB: %v", err)
		}
	}
	if _, err := redirectIngress(h, dev, "ifb0"); err != nil {
		t.Fatalf("redirectIngress: %v", err)
	}
	// Someone else's filters: one at another preference, and a redirect to
	// another IFB at autoshape's own preference (as sqm-scripts adds it).
	runCmd(t, "tc", "-n", ns, "filter", "add", "dev", dev, "parent", "ffff:", "protocol", "ip", "prio", "5",
		"u32", "match", "ip", "src", "192.0.2.1/32", "flowid", "1:1")
	runCmd(t, "tc", "-n", ns, "filter", "add", "dev", dev, "parent", "ffff:", "protocol", "all", "prio", "10",
		"u32", "match", "u32", "0", "0", "action", "mirred", "egress", "redirect", "dev", "ifb1")
	if err := removeRedirect(h, dev, int(testIfindex(t, h, "ifb0"))); err != nil {
		t.Fatalf("removeRedirect: %v", err)
	}
	filters := runCmd(t, "tc", "-n", ns, "filter", "show", "dev", dev, "ingress")
	mustContain(t, "tc filter show", filters, "pref 5 u32", "match c0000201/ffffffff at 12", "Redirect to device ifb1")
	if strings.Contains(filters, "ifb0") {
		t.Errorf("the redirect to ifb0 is still there:\n%s", filters)
	}
	// Then the other redirect, and the one at preference 5 by hand: with
	// no filter left the ingress qdisc goes too.
	if err := removeRedirect(h, dev, int(testIfindex(t, h, "ifb1"))); err != nil {
		t.Fatalf("removeRedirect: %v", err)
	}
	mustContain(t, "tc qdisc show", runCmd(t, "tc", "-n", ns, "qdisc", "show", "dev", dev), "qdisc ingress ffff:")
	runCmd(t, "tc", "-n", ns, "filter", "del", "dev", dev, "parent", "ffff:", "prio", "5")
	if err := removeRedirect(h, dev, int(testIfindex(t, h, "ifb1"))); err != nil {
		t.Fatalf("removeRedirect: %v", err)
	}
	if got := runCmd(t, "tc", "-n", ns, "qdisc", "show", "dev", dev); strings.Contains(got, "ingress") {
		t.Errorf("the empty ingress qdisc is still there:\n%s", got)
	}
}
