package actuator

import (
	"errors"
	"fmt"

	"github.com/florianl/go-tc"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// A Drift is one way in which the kernel's shaping differs from what a Link
// made (Setup) or attached to (Attach), as Check found it, and what Check
// did about it.
type Drift struct {
	// Dev is the interface it was found on.
	Dev string
	// Found says what was there, Done what Check did about it.
	Found, Done string
	// Changed says that Check made a root qdisc or attached to another one:
	// the rate the shaper holds need not be the one last written.
	Changed bool
	// Err is why what Check tried failed, nil when it did not.
	Err error
}

func (d Drift) String() string {
	s := fmt.Sprintf("%s: %s: %s", d.Dev, d.Found, d.Done)
	if d.Err != nil {
		s += ": " + d.Err.Error()
	}
	return s
}

// Check reads what the kernel holds for the link and compares it with what
// the link made or attached to. After Setup it puts back what is missing of
// autoshape's own shaping (its roots at the rate last set, its IFB, the
// ingress qdisc and the redirect) and makes an incomplete root of its own
// again; a qdisc or link that autoshape did not create is left as it is and
// reported. After Attach it attaches to a cake or htb root that took the
// place of the one it was attached to, and creates nothing. It returns one
// Drift per difference, none when all is as it was, and an error only when
// it could not look (the interface is gone: ErrLinkGone). It costs a few
// netlink requests (one qdisc dump for the whole namespace), so it can run
// every second.
func (l *Link) Check() ([]Drift, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.nl == nil || l.conn == nil {
		return nil, errors.New("the link is closed")
	}
	iface, err := l.nl.LinkByName(l.iface)
	if err != nil {
		if errors.As(err, new(netlink.LinkNotFoundError)) {
			return nil, fmt.Errorf("interface %q: %w", l.iface, ErrLinkGone)
		}
		return nil, linkErr("read interface", l.iface, err)
	}
	qdiscs, err := l.conn.qdiscs()
	if err != nil {
		return nil, fmt.Errorf("failed to list qdiscs: %w", kernelErr(err))
	}
	var drifts []Drift
	add := func(d *Drift) {
		if d != nil {
			drifts = append(drifts, *d)
		}
	}
	idx := uint32(iface.Attrs().Index)
	// The shapers go on with the indexes Check found.
	l.up.idx = idx
	if l.own {
		add(l.checkOwnRoot(l.iface, idx, l.up, qdiscs))
	} else {
		add(l.checkAttached(l.iface, idx, l.up, qdiscs))
	}
	ifb, d := l.checkIFB()
	add(d)
	if ifb == nil {
		return drifts, nil
	}
	add(l.checkRedirect(iface, ifb, qdiscs))
	ifbIdx := uint32(ifb.Attrs().Index)
	l.down.idx = ifbIdx
	if l.own {
		add(l.checkOwnRoot(l.ifb, ifbIdx, l.down, qdiscs))
	} else {
		add(l.checkAttached(l.ifb, ifbIdx, l.down, qdiscs))
	}
	return drifts, nil
}

// checkOwnRoot checks the root of the named interface after Setup: the
// shaper's own, complete, or made again; another's is left alone.
func (l *Link) checkOwnRoot(name string, idx uint32, s *ifaceShaper, qdiscs []tc.Object) *Drift {
	root := findRoot(qdiscs, idx)
	d := &Drift{Dev: name}
	switch {
	case root.isOwn() && root.Kind == s.b.Kind():
		_, err := s.b.Rate(idx)
		if err == nil {
			return nil
		}
		// Someone deleted a class or a leaf of autoshape's tree.
		d.Found = fmt.Sprintf("autoshape's %s is incomplete (%v)", root, err)
	case root.isOwn():
		d.Found = fmt.Sprintf("autoshape's %s, not the %s it set up", root, s.b.Kind())
	case root.isDefault():
		d.Found = "no root qdisc of autoshape's (the kernel's default: " + root.Kind + ")"
		if root.Kind == "" {
			d.Found = "no root qdisc"
		}
	default:
		d.Found = fmt.Sprintf("%s at the root, not autoshape's", root)
		d.Done = "left it alone: autoshape does not shape " + name + " while it is there"
		return d
	}
	d.Done = fmt.Sprintf("made autoshape's %s %s again at %d kbit/s", s.b.Kind(), handleString(OwnRootHandle), s.rate/1000)
	d.Changed = true
	if root.isOwn() {
		if err := l.removeOwnRoot(name); err != nil {
			d.Err = err
			return d
		}
	}
	if err := s.b.Create(idx, s.rate, false); err != nil {
		d.Err = fmt.Errorf("failed to create %s shaping on %q: %w", s.b.Kind(), name, err)
	}
	return d
}

// checkAttached checks the root of the named interface after Attach: the
// one attached to, or another cake or htb root to attach to.
func (l *Link) checkAttached(name string, idx uint32, s *ifaceShaper, qdiscs []tc.Object) *Drift {
	root, was := findRoot(qdiscs, idx), boundRoot(s.b)
	if root == was {
		return nil
	}
	d := &Drift{Dev: name, Found: fmt.Sprintf("%s at the root in place of the %s autoshape attached to", root, was)}
	if root.isDefault() || (root.Kind != "cake" && root.Kind != "htb") {
		d.Done = "nothing to attach to: the rate is not written until a cake or htb root is back"
		return d
	}
	d.Done = "attached to it"
	b, err := l.detect(name)
	if err != nil {
		d.Err = err
		return d
	}
	s.b = b
	d.Changed = true
	return d
}

// boundRoot returns the root qdisc a backend works on.
func boundRoot(b backend) rootQdisc {
	switch b := b.(type) {
	case *cake:
		return rootQdisc{Kind: "cake", Handle: b.handle}
	case *htb:
		return rootQdisc{Kind: "htb", Handle: b.root}
	}
	return rootQdisc{Kind: b.Kind()}
}

// checkIFB returns the IFB, added again after Setup when it is gone; nil
// when there is none to use.
func (l *Link) checkIFB() (netlink.Link, *Drift) {
	link, err := l.nl.LinkByName(l.ifb)
	switch {
	case errors.As(err, new(netlink.LinkNotFoundError)):
		d := &Drift{Dev: l.ifb, Found: "no such interface"}
		if !l.own {
			d.Done = "waiting for it: the download is not shaped"
			return nil, d
		}
		d.Done = "added the IFB again (alias " + OwnIFBAlias + ")"
		if _, err := ensureIFB(l.nl, l.ifb); err != nil {
			d.Err = err
			return nil, d
		}
		if link, err = l.nl.LinkByName(l.ifb); err != nil {
			d.Err = linkErr("read IFB", l.ifb, err)
			return nil, d
		}
		return link, d
	case err != nil:
		return nil, &Drift{Dev: l.ifb, Found: "the interface could not be read", Done: "checks again later", Err: linkErr("read IFB", l.ifb, err)}
	case link.Type() != "ifb":
		return nil, &Drift{Dev: l.ifb, Found: "a " + link.Type() + " link, not an IFB", Done: "left it alone: the download is not shaped"}
	case link.Attrs().Flags&unix.IFF_UP == 0:
		d := &Drift{Dev: l.ifb, Found: "the IFB is down"}
		if !l.own || !isOwnIFB(link) {
			d.Done = "left it alone (autoshape did not create it): the download is not shaped"
			return link, d
		}
		d.Done = "set it up"
		if err := l.nl.LinkSetUp(link); err != nil {
			d.Err = linkErr("set IFB up", l.ifb, err)
		}
		return link, d
	}
	return link, nil
}

// checkRedirect checks that the interface's ingress is redirected to the
// IFB: after Setup, an ingress qdisc and a redirect that are gone are
// added again, and a redirect of autoshape's to a deleted IFB (which drops
// every packet) is replaced; after Attach, nothing is added.
func (l *Link) checkRedirect(iface, ifb netlink.Link, qdiscs []tc.Object) *Drift {
	d := &Drift{Dev: l.iface}
	var ingress *tc.Object
	for i, q := range qdiscs {
		if q.Ifindex == uint32(iface.Attrs().Index) && q.Parent == tc.HandleIngress {
			ingress = &qdiscs[i]
		}
	}
	stale := false
	switch {
	case ingress != nil && ingress.Kind != "ingress":
		d.Found = fmt.Sprintf("a %s qdisc in the ingress qdisc's place", ingress.Kind)
		d.Done = "left it alone: the download is not redirected to " + l.ifb
		return d
	case ingress == nil:
		d.Found = "no ingress qdisc (the download is not redirected to " + l.ifb + ")"
	default:
		filters, err := dumpAgain(func() ([]netlink.Filter, error) { return l.nl.FilterList(iface, ingressHandle) })
		if err != nil {
			d.Found, d.Done, d.Err = "the ingress filters could not be read", "checks again later", linkErr("read ingress filters of", l.iface, err)
			return d
		}
		for _, f := range filters {
			if redirectsTo(f, ifb.Attrs().Index) {
				return nil
			}
			// The kernel keeps a redirect to a deleted device, with no
			// device: it drops what it redirects.
			stale = stale || redirectsTo(f, 0)
		}
		d.Found = "no redirect to " + l.ifb + " on the ingress qdisc"
		if stale {
			d.Found = "a redirect to a deleted device on the ingress qdisc (it drops every packet), none to " + l.ifb
		}
	}
	if !l.own {
		d.Done = "left it as it is (attach mode creates nothing): the download is not shaped"
		return d
	}
	if stale {
		if !l.addedRedirect {
			d.Done = "left it as it is (autoshape did not add it): the download is not shaped"
			return d
		}
		if err := removeRedirect(l.nl, l.iface, 0); err != nil {
			d.Done, d.Err = "failed to remove it", err
			return d
		}
	}
	d.Done = "added the redirect to " + l.ifb + " again"
	if ingress == nil {
		d.Done = "added the ingress qdisc and the redirect to " + l.ifb + " again"
	}
	added, err := redirectIngress(l.nl, l.iface, l.ifb)
	l.addedRedirect = l.addedRedirect || added
	if err != nil {
		d.Err = fmt.Errorf("failed to redirect %q's ingress to %q: %w", l.iface, l.ifb, kernelErr(err))
	}
	return d
}
