//go:build linux

package actuator_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/autoshape/autoshape/actuator"
)

// A driftSummary is what a test asserts of a Drift: where, whether Check
// made or attached to a root, whether what it tried failed, and words of
// what it found.
type driftSummary struct {
	Dev     string
	Found   string // a part of Drift.Found
	Changed bool
	Failed  bool
}

func summarize(ds []actuator.Drift, want []driftSummary) []driftSummary {
	var got []driftSummary
	for i, d := range ds {
		s := driftSummary{Dev: d.Dev, Found: d.Found, Changed: d.Changed, Failed: d.Err != nil}
		if i < len(want) && strings.Contains(d.Found, want[i].Found) {
			s.Found = want[i].Found
		}
		got = append(got, s)
	}
	return got
}

// ownRoot is the root autoshape's backend b makes, as tc prints it.
func ownRoot(b actuator.Backend) string { return "qdisc " + string(b) + " a5: root" }

// foreignRoot replaces dev's root with a qdisc of kind b and handle 5:.
func foreignRoot(t *testing.T, ns string, b actuator.Backend, dev string) {
	t.Helper()
	if b == actuator.CAKE {
		tcCmd(t, ns, "qdisc", "replace", "dev", dev, "root", "handle", "5:", "cake", "bandwidth", "3mbit")
		return
	}
	tcCmd(t, ns, "qdisc", "replace", "dev", dev, "root", "handle", "5:", "htb", "default", "1")
	tcCmd(t, ns, "class", "add", "dev", dev, "parent", "5:", "classid", "5:1", "htb", "rate", "3mbit")
}

// TestCheckAfterSetup: what someone deletes of the shaping Setup made is
// made again by Check (roots at the rate last set), once; what someone puts
// in its place is left alone and reported at every Check.
func TestCheckAfterSetup(t *testing.T) {
	for _, b := range backends(t) {
		for _, tt := range []struct {
			name   string
			damage func(t *testing.T, ns string)
			want   []driftSummary
			// again is what a second Check finds.
			again []driftSummary
			// holds checks what the kernel holds afterwards.
			holds func(t *testing.T, ns string)
		}{
			{
				name:   "ingress qdisc deleted",
				damage: func(t *testing.T, ns string) { tcCmd(t, ns, "qdisc", "del", "dev", "wan0", "ingress") },
				want:   []driftSummary{{Dev: "wan0", Found: "no ingress qdisc"}},
			},
			{
				name: "redirect deleted, another filter added",
				damage: func(t *testing.T, ns string) {
					tcCmd(t, ns, "filter", "del", "dev", "wan0", "ingress", "pref", "10")
					tcCmd(t, ns, "filter", "add", "dev", "wan0", "parent", "ffff:", "protocol", "ip", "prio", "20", "u32",
						"match", "ip", "dst", "192.0.2.1/32", "flowid", "1:1")
				},
				want: []driftSummary{{Dev: "wan0", Found: "no redirect to ifb4wan0"}},
				holds: func(t *testing.T, ns string) {
					if got := tcCmd(t, ns, "filter", "show", "dev", "wan0", "ingress"); !strings.Contains(got, "pref 20") {
						t.Errorf("ingress filters = %q, want the other filter kept", got)
					}
				},
			},
			{
				name:   "upload root deleted",
				damage: func(t *testing.T, ns string) { tcCmd(t, ns, "qdisc", "del", "dev", "wan0", "root") },
				want:   []driftSummary{{Dev: "wan0", Found: "no root qdisc", Changed: true}},
			},
			{
				name:   "download root deleted",
				damage: func(t *testing.T, ns string) { tcCmd(t, ns, "qdisc", "del", "dev", "ifb4wan0", "root") },
				want:   []driftSummary{{Dev: "ifb4wan0", Found: "no root qdisc", Changed: true}},
			},
			{
				name:   "IFB deleted",
				damage: func(t *testing.T, ns string) { ipCmd(t, "-n", ns, "link", "del", "ifb4wan0") },
				want: []driftSummary{
					{Dev: "ifb4wan0", Found: "no such interface"},
					{Dev: "wan0", Found: "a redirect to a deleted device"},
					{Dev: "ifb4wan0", Found: "no root qdisc", Changed: true},
				},
				holds: func(t *testing.T, ns string) {
					got := tcCmd(t, ns, "filter", "show", "dev", "wan0", "ingress")
					if strings.Count(got, "Redirect to device") != 1 || !strings.Contains(got, "Redirect to device ifb4wan0") {
						t.Errorf("ingress filters = %q, want one redirect, to the new ifb4wan0", got)
					}
				},
			},
			{
				name:   "foreign upload root",
				damage: func(t *testing.T, ns string) { foreignRoot(t, ns, b, "wan0") },
				want:   []driftSummary{{Dev: "wan0", Found: string(b) + " 5: at the root, not autoshape's"}},
				again:  []driftSummary{{Dev: "wan0", Found: string(b) + " 5: at the root, not autoshape's"}},
				holds: func(t *testing.T, ns string) {
					if got := tcCmd(t, ns, "qdisc", "show", "dev", "wan0", "root"); !strings.Contains(got, "qdisc "+string(b)+" 5: root") {
						t.Errorf("wan0's root = %q, want the foreign %s 5: left alone", got, b)
					}
				},
			},
			{
				name: "foreign download root",
				damage: func(t *testing.T, ns string) {
					foreignRoot(t, ns, b, "ifb4wan0")
				},
				want:  []driftSummary{{Dev: "ifb4wan0", Found: "5: at the root, not autoshape's"}},
				again: []driftSummary{{Dev: "ifb4wan0", Found: "5: at the root, not autoshape's"}},
			},
			{
				name: "clsact in the ingress qdisc's place",
				damage: func(t *testing.T, ns string) {
					tcCmd(t, ns, "qdisc", "del", "dev", "wan0", "ingress")
					tcCmd(t, ns, "qdisc", "add", "dev", "wan0", "clsact")
				},
				want:  []driftSummary{{Dev: "wan0", Found: "clsact"}},
				again: []driftSummary{{Dev: "wan0", Found: "clsact"}},
				holds: func(t *testing.T, ns string) {
					if got := tcCmd(t, ns, "qdisc", "show", "dev", "wan0"); !strings.Contains(got, "clsact") {
						t.Errorf("wan0's qdiscs = %q, want the clsact left alone", got)
					}
					tcCmd(t, ns, "qdisc", "del", "dev", "wan0", "clsact")
				},
			},
		} {
			t.Run(string(b)+"/"+tt.name, func(t *testing.T) {
				ns, h := wanNS(t)
				l, err := actuator.Setup(actuator.SetupConfig{Iface: "wan0", Backend: b, Up: 20e6, Down: 30e6, NetNS: int(h)})
				if err != nil {
					t.Fatalf("Setup() failed: %v", err)
				}
				t.Cleanup(func() { l.Close() })
				ctx := context.Background()
				for _, s := range []actuator.Shaper{l.Up(), l.Down()} {
					if _, err := s.SetRate(ctx, 7e6); err != nil {
						t.Fatalf("SetRate(7e6) failed: %v", err)
					}
				}
				if ds, err := l.Check(); err != nil || len(ds) != 0 {
					t.Fatalf("Check() of untouched shaping = %v, %v; want nothing", ds, err)
				}
				tt.damage(t, ns)
				ds, err := l.Check()
				if err != nil {
					t.Fatalf("Check() failed: %v", err)
				}
				if diff := cmp.Diff(tt.want, summarize(ds, tt.want)); diff != "" {
					t.Errorf("Check() found (-want +got):\n%s\n%v", diff, ds)
				}
				ds, err = l.Check()
				if err != nil {
					t.Fatalf("Check() again failed: %v", err)
				}
				if diff := cmp.Diff(tt.again, summarize(ds, tt.again)); diff != "" {
					t.Errorf("a second Check() found (-want +got):\n%s\n%v", diff, ds)
				}
				if tt.holds != nil {
					tt.holds(t, ns)
				}
				for _, w := range tt.want {
					if !w.Changed {
						continue
					}
					// Made again at the rate last set, and a rate change
					// works on it.
					if got := tcCmd(t, ns, "qdisc", "show", "dev", w.Dev, "root"); !strings.Contains(got, ownRoot(b)) {
						t.Errorf("%s's root = %q, want %s", w.Dev, got, ownRoot(b))
					}
					s := l.Up()
					if w.Dev == "ifb4wan0" {
						s = l.Down()
					}
					// A download CAKE made again runs autorate-ingress, under
					// which a stray packet may move its rate.
					selfRated := b == actuator.CAKE && w.Dev == "ifb4wan0"
					if ch, err := s.SetRate(ctx, 7e6); err != nil || (ch.From != 7e6 && !selfRated) {
						t.Errorf("SetRate(7e6) after Check() = %+v, %v; want the root made at 7e6", ch, err)
					}
					if _, err := s.SetRate(ctx, 9e6); err != nil {
						t.Errorf("SetRate(9e6) after Check() failed: %v", err)
					}
				}
				if err := l.Remove(); err != nil {
					t.Errorf("Remove() failed: %v", err)
				}
			})
		}
	}
}

// TestCheckAfterAttach: after Attach, Check attaches to a cake or htb root
// that took the place of the one attached to, and creates nothing: a
// deleted ingress qdisc or root is reported, not made.
func TestCheckAfterAttach(t *testing.T) {
	for _, b := range backends(t) {
		for _, tt := range []struct {
			name   string
			damage func(t *testing.T, ns string)
			want   []driftSummary
			again  []driftSummary
		}{
			{
				name: "root replaced",
				damage: func(t *testing.T, ns string) {
					tcCmd(t, ns, "qdisc", "del", "dev", "wan0", "root")
					foreignRoot(t, ns, b, "wan0")
				},
				want: []driftSummary{{Dev: "wan0", Found: string(b) + " 5: at the root in place of", Changed: true}},
			},
			{
				name:   "root deleted",
				damage: func(t *testing.T, ns string) { tcCmd(t, ns, "qdisc", "del", "dev", "ifb4wan0", "root") },
				want:   []driftSummary{{Dev: "ifb4wan0", Found: "at the root in place of"}},
				again:  []driftSummary{{Dev: "ifb4wan0", Found: "at the root in place of"}},
			},
			{
				name:   "ingress qdisc deleted",
				damage: func(t *testing.T, ns string) { tcCmd(t, ns, "qdisc", "del", "dev", "wan0", "ingress") },
				want:   []driftSummary{{Dev: "wan0", Found: "no ingress qdisc"}},
				again:  []driftSummary{{Dev: "wan0", Found: "no ingress qdisc"}},
			},
		} {
			t.Run(string(b)+"/"+tt.name, func(t *testing.T) {
				ns, h := wanNS(t)
				sqmLike(t, ns, b)
				l, err := actuator.Attach("wan0", "", int(h))
				if err != nil {
					t.Fatalf("Attach() failed: %v", err)
				}
				t.Cleanup(func() { l.Close() })
				if ds, err := l.Check(); err != nil || len(ds) != 0 {
					t.Fatalf("Check() of untouched shaping = %v, %v; want nothing", ds, err)
				}
				tt.damage(t, ns)
				before := snapshot(t, ns)
				ds, err := l.Check()
				if err != nil {
					t.Fatalf("Check() failed: %v", err)
				}
				if diff := cmp.Diff(tt.want, summarize(ds, tt.want)); diff != "" {
					t.Errorf("Check() found (-want +got):\n%s\n%v", diff, ds)
				}
				ds, err = l.Check()
				if err != nil {
					t.Fatalf("Check() again failed: %v", err)
				}
				if diff := cmp.Diff(tt.again, summarize(ds, tt.again)); diff != "" {
					t.Errorf("a second Check() found (-want +got):\n%s\n%v", diff, ds)
				}
				if after := snapshot(t, ns); after != before {
					t.Errorf("Check() after Attach changed the namespace:\nbefore:\n%s\nafter:\n%s", before, after)
				}
				if tt.want[0].Changed {
					if _, err := l.Up().SetRate(context.Background(), 8e6); err != nil {
						t.Errorf("SetRate() on the root attached to failed: %v", err)
					}
					if got := tcCmd(t, ns, "qdisc", "show", "dev", "wan0", "root"); !strings.Contains(got, "5: root") {
						t.Errorf("wan0's root = %q, want the one attached to", got)
					}
				}
			})
		}
	}
}

// TestCheckInterfaceGone: a Check while the interface is away says so;
// when it is back (a new index), Check makes the shaping on it again. The
// shaper, which keeps the interface's index, follows it to the new one.
func TestCheckInterfaceGone(t *testing.T) {
	ns, h := wanNS(t)
	l, err := actuator.Setup(actuator.SetupConfig{Iface: "wan0", Backend: actuator.HTB, Up: 20e6, Down: 30e6, NetNS: int(h)})
	if err != nil {
		t.Fatalf("Setup() failed: %v", err)
	}
	defer l.Close()
	ctx := context.Background()
	if _, err := l.Up().Stats(ctx); err != nil {
		t.Fatalf("Up().Stats() failed: %v", err)
	}
	ipCmd(t, "-n", ns, "link", "del", "wan0")
	if _, err := l.Up().Stats(ctx); !errors.Is(err, actuator.ErrLinkGone) {
		t.Errorf("Up().Stats() without the interface = %v, want ErrLinkGone", err)
	}
	if _, err := l.Check(); err == nil || !strings.Contains(err.Error(), "wan0") {
		t.Fatalf("Check() without the interface = %v, want an error naming it", err)
	}
	ipCmd(t, "-n", ns, "link", "add", "wan0", "type", "veth", "peer", "name", "lan0")
	ipCmd(t, "-n", ns, "link", "set", "wan0", "up")
	if _, err := l.Up().Stats(ctx); !errors.Is(err, actuator.ErrNoQdisc) {
		t.Errorf("Up().Stats() on the new wan0 before Check = %v, want ErrNoQdisc", err)
	}
	ds, err := l.Check()
	if err != nil {
		t.Fatalf("Check() failed: %v", err)
	}
	want := []driftSummary{{Dev: "wan0", Found: "no root qdisc", Changed: true}, {Dev: "wan0", Found: "no ingress qdisc"}}
	if diff := cmp.Diff(want, summarize(ds, want)); diff != "" {
		t.Errorf("Check() found (-want +got):\n%s\n%v", diff, ds)
	}
	if ds, err := l.Check(); err != nil || len(ds) != 0 {
		t.Errorf("Check() after the repair = %v, %v; want nothing", ds, err)
	}
	if _, err := l.Up().Stats(ctx); err != nil {
		t.Errorf("Up().Stats() after the repair failed: %v", err)
	}
	if ch, err := l.Up().SetRate(ctx, 10e6); err != nil || !ch.Wrote {
		t.Errorf("Up().SetRate(10e6) after the repair = %+v, %v; want a write", ch, err)
	}
}

// BenchmarkCheck measures a Check of untouched shaping, what the daemon
// does every second.
func BenchmarkCheck(b *testing.B) {
	_, h := wanNS(b)
	l, err := actuator.Setup(actuator.SetupConfig{Iface: "wan0", Backend: actuator.HTB, Up: 20e6, Down: 30e6, NetNS: int(h)})
	if err != nil {
		b.Fatalf("Setup() failed: %v", err)
	}
	defer l.Close()
	for b.Loop() {
		if ds, err := l.Check(); err != nil || len(ds) != 0 {
			b.Fatalf("Check() = %v, %v", ds, err)
		}
	}
}
