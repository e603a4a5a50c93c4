package actuator

import (
	"testing"

	"github.com/florianl/go-tc"
	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

// TestClassesLikeGoTC: the class listing decodes what go-tc decodes of the
// HTB classes that iproute2 made (ATM framing, 64-bit rates), and lists
// only the interface asked for.
func TestClassesLikeGoTC(t *testing.T) {
	l := newHTBLink(t)
	conn := testTC(t, l.ns)
	tcDo := func(args ...string) { runCmd(t, "tc", append([]string{"-n", l.router.NS}, args...)...) }
	tcDo("qdisc", "add", "dev", "wan0", "root", "handle", "a5:", "htb", "default", "12")
	tcDo("class", "add", "dev", "wan0", "parent", "a5:", "classid", "a5:1", "htb", "rate", "40gbit", "ceil", "50gbit")
	tcDo("class", "add", "dev", "wan0", "parent", "a5:1", "classid", "a5:11", "htb", "rate", "1750kbit", "ceil", "2mbit",
		"prio", "0", "quantum", "3000", "overhead", "44", "linklayer", "atm", "mpu", "96")
	tcDo("class", "add", "dev", "wan0", "parent", "a5:1", "classid", "a5:12", "htb", "rate", "250kbit", "ceil", "2mbit", "prio", "1")
	tcDo("qdisc", "add", "dev", "wan0", "parent", "a5:12", "handle", "12:", "bfifo", "limit", "6056")
	other := testEnd{NS: l.router.NS, Dev: "wan1"}
	newTestVeth(t, other, testEnd{NS: l.router.NS, Dev: "isp1"})
	tcDo("qdisc", "add", "dev", "wan1", "root", "handle", "1:", "htb")
	tcDo("class", "add", "dev", "wan1", "parent", "1:", "classid", "1:1", "htb", "rate", "1mbit")

	got, err := conn.classes(l.ifindex)
	if err != nil {
		t.Fatalf("classes: %v", err)
	}
	all, err := conn.Class().Get(&tc.Msg{Family: unix.AF_UNSPEC, Ifindex: l.ifindex})
	if err != nil {
		t.Fatal(err)
	}
	var want []tc.Object
	for _, o := range all {
		w := tc.Object{Msg: o.Msg, Attribute: tc.Attribute{Kind: o.Kind}}
		if o.Htb != nil {
			w.Htb = &tc.Htb{Parms: o.Htb.Parms, Rate64: o.Htb.Rate64, Ceil64: o.Htb.Ceil64}
		}
		want = append(want, w)
	}
	if len(want) != 3 {
		t.Fatalf("go-tc lists %d classes on wan0, want 3", len(want))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("classes (-go-tc +ours):\n%s", diff)
	}
	if top, err := findClass(got, OwnHTBClass); err != nil || classRate(top.Htb) != 5_000_000_000 || classCeil(top.Htb) != 6_250_000_000 {
		t.Errorf("class a5:1: %+v, %v; want 40 and 50 Gbit/s in bytes/s", top, err)
	}
}

// TestQdiscsLikeGoTC: the qdisc listing has every qdisc of the namespace
// that go-tc lists, with its interface, handle, parent and kind.
func TestQdiscsLikeGoTC(t *testing.T) {
	l := newHTBLink(t)
	conn := testTC(t, l.ns)
	h := newHTB(conn, Framing{})
	createSplit(t, h, l.ifindex, 2_000_000)
	runCmd(t, "tc", "-n", l.router.NS, "qdisc", "add", "dev", "wan0", "ingress")
	got, err := conn.qdiscs()
	if err != nil {
		t.Fatalf("qdiscs: %v", err)
	}
	all, err := conn.Qdisc().Get()
	if err != nil {
		t.Fatal(err)
	}
	var want []tc.Object
	for _, o := range all {
		want = append(want, tc.Object{
			Msg:       tc.Msg{Ifindex: o.Ifindex, Handle: o.Handle, Parent: o.Parent},
			Attribute: tc.Attribute{Kind: o.Kind},
		})
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("qdiscs (-go-tc +ours):\n%s", diff)
	}
	if root := findRoot(got, l.ifindex); !root.isOwn() || root.Kind != "htb" {
		t.Errorf("wan0's root: %v, want autoshape's htb", root)
	}
}

// TestExecOutcomes: a batch's writes are carried out in order, each
// whatever became of the others, and each gets its own outcome, the last
// one's too.
func TestExecOutcomes(t *testing.T) {
	l := newHTBLink(t)
	conn := testTC(t, l.ns)
	h := newHTB(conn, Framing{})
	createSplit(t, h, l.ifindex, 2_000_000)
	classes, err := conn.classes(l.ifindex)
	if err != nil {
		t.Fatal(err)
	}
	bulk, err := findClass(classes, htbBulkClass)
	if err != nil {
		t.Fatal(err)
	}
	opts := keptOptions(bulk.Htb, 50_000, 250_000)
	good, err := htbClassWrite(l.ifindex, htbBulkClass, OwnHTBClass, opts)
	if err != nil {
		t.Fatal(err)
	}
	// A class b0:98 cannot be under a5:1 (HTB makes a class whose parent
	// is missing at its root, so that is no failure).
	orphan, err := htbClassWrite(l.ifindex, 0x00b0_0098, OwnHTBClass, opts)
	if err != nil {
		t.Fatal(err)
	}
	writes := []tcWrite{
		bfifoWrite(l.ifindex, 0x0030_0000, htbSparseClass, 3000), // the leaf is 11:, not 30:
		good,
		orphan,
	}
	for _, ws := range [][]tcWrite{writes, writes[:2]} {
		errs, err := conn.exec(ws)
		if err != nil {
			t.Fatalf("exec: %v", err)
		}
		if len(errs) != len(ws) || errs[0] == nil || errs[1] != nil || (len(ws) == 3 && errs[2] == nil) {
			t.Fatalf("exec of %d writes: outcomes %v; want an error, nil and an error", len(ws), errs)
		}
	}
	classes, err = conn.classes(l.ifindex)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := findClass(classes, htbBulkClass); err != nil || classRate(got.Htb) != 50_000 {
		t.Errorf("class a5:12 after the batch: %+v, %v; want 50000 bytes/s", got, err)
	}
	if _, err := findClass(classes, 0x00b0_0098); err == nil {
		t.Errorf("the class b0:98 was made")
	}
	mustContain(t, "tc qdisc show", l.tcShow(t, false, "qdisc"), "qdisc bfifo 11: parent a5:11 limit")
}
