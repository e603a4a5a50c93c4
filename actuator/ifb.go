package actuator

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Download shaping: an interface's incoming packets are redirected to an IFB
// device, whose egress the shaper then holds. Each function reads what the
// kernel has before it writes, so calling it again changes nothing.

// ingressHandle is the ingress qdisc's handle, ffff:.
var ingressHandle = netlink.MakeHandle(0xffff, 0)

// redirectPriority is the priority of autoshape's redirect filter.
const redirectPriority = 10

// ensureIFB makes an IFB device called name exist and be up. One it adds
// gets autoshape's alias (OwnIFBAlias). created says whether it had to be
// added; a link of that name that is not an IFB is an error.
func ensureIFB(h *netlink.Handle, name string) (created bool, err error) {
	link, err := h.LinkByName(name)
	switch {
	case errors.As(err, new(netlink.LinkNotFoundError)):
		attrs := netlink.NewLinkAttrs()
		attrs.Name, attrs.Alias = name, OwnIFBAlias
		if err := h.LinkAdd(&netlink.Ifb{LinkAttrs: attrs}); err != nil {
			return false, linkErr("add IFB", name, err)
		}
		created = true
		if link, err = h.LinkByName(name); err != nil {
			return true, linkErr("read new IFB", name, err)
		}
		// A kernel that takes no alias with a new link gets it now.
		if link.Attrs().Alias != OwnIFBAlias {
			if err := h.LinkSetAlias(link, OwnIFBAlias); err != nil {
				return true, linkErr("mark new IFB", name, err)
			}
		}
	case err != nil:
		return false, linkErr("read IFB", name, err)
	case link.Type() != "ifb":
		return false, fmt.Errorf("failed to use %q as an IFB: it is a %s link", name, link.Type())
	}
	if link.Attrs().Flags&unix.IFF_UP == 0 {
		if err := h.LinkSetUp(link); err != nil {
			return created, linkErr("set IFB up", name, err)
		}
	}
	return created, nil
}

// redirectIngress redirects every packet arriving on iface to the egress of
// the IFB device ifb: an ingress qdisc ffff: on iface with a u32 filter
// matching all protocols and a mirred egress redirect action. added says
// whether it added the filter; a redirect to ifb that is there already
// (sqm-scripts', or autoshape's from before) is left as it is.
func redirectIngress(h *netlink.Handle, iface, ifb string) (added bool, err error) {
	link, err := h.LinkByName(iface)
	if err != nil {
		return false, linkErr("read interface", iface, err)
	}
	target, err := h.LinkByName(ifb)
	if err != nil {
		return false, linkErr("read IFB", ifb, err)
	}
	ingress, err := findIngress(h, link)
	if err != nil {
		return false, linkErr("read qdiscs of", iface, err)
	}
	if ingress == nil {
		q := &netlink.Ingress{QdiscAttrs: netlink.QdiscAttrs{
			LinkIndex: link.Attrs().Index, Handle: ingressHandle, Parent: netlink.HANDLE_INGRESS,
		}}
		if err := h.QdiscAdd(q); err != nil {
			return false, linkErr("add ingress qdisc to", iface, err)
		}
	}
	filters, err := dumpAgain(func() ([]netlink.Filter, error) { return h.FilterList(link, ingressHandle) })
	if err != nil {
		return false, linkErr("read ingress filters of", iface, err)
	}
	for _, f := range filters {
		if redirectsTo(f, target.Attrs().Index) {
			return false, nil
		}
	}
	filter := &netlink.U32{
		FilterAttrs: netlink.FilterAttrs{
			LinkIndex: link.Attrs().Index,
			Parent:    ingressHandle,
			Priority:  redirectPriority,
			Protocol:  unix.ETH_P_ALL,
		},
		// A nil selector is u32's "match u32 0 0": every packet.
		Actions: []netlink.Action{netlink.NewMirredAction(target.Attrs().Index)},
	}
	if err := h.FilterAdd(filter); err != nil {
		return false, fmt.Errorf("failed to redirect ingress of %q to %q: %w", iface, ifb, err)
	}
	return true, nil
}

// redirectsTo reports whether f is a u32 filter that redirects to the
// egress of ifindex.
func redirectsTo(f netlink.Filter, ifindex int) bool {
	u, ok := f.(*netlink.U32)
	if !ok {
		return false
	}
	for _, a := range u.Actions {
		if m, ok := a.(*netlink.MirredAction); ok && m.MirredAction == netlink.TCA_EGRESS_REDIR && m.Ifindex == ifindex {
			return true
		}
	}
	return false
}

// removeRedirect deletes the u32 filters on iface's ingress that redirect
// to the egress of ifbIndex, and then the ingress qdisc if no filter is left
// on it. Other filters, and the qdisc that holds them, stay. An interface
// without an ingress qdisc is left as it is.
func removeRedirect(h *netlink.Handle, iface string, ifbIndex int) error {
	link, err := h.LinkByName(iface)
	if err != nil {
		if errors.As(err, new(netlink.LinkNotFoundError)) {
			return fmt.Errorf("interface %q: %w", iface, ErrLinkGone)
		}
		return linkErr("read interface", iface, err)
	}
	ingress, err := findIngress(h, link)
	if err != nil {
		return linkErr("read qdiscs of", iface, err)
	}
	if ingress == nil {
		return nil
	}
	list := func() ([]netlink.Filter, error) {
		return dumpAgain(func() ([]netlink.Filter, error) { return h.FilterList(link, ingressHandle) })
	}
	filters, err := list()
	if err != nil {
		return linkErr("read ingress filters of", iface, err)
	}
	for _, f := range filters {
		if !redirectsTo(f, ifbIndex) {
			continue
		}
		del := f
		if !othersAtPref(filters, f, ifbIndex) {
			// The whole u32 instance at this preference, hash table
			// included: deleting only the node would leave the empty
			// table behind.
			a := *f.Attrs()
			a.Handle = 0
			del = &netlink.U32{FilterAttrs: a}
		}
		if err := h.FilterDel(del); err != nil && !errors.Is(err, unix.ENOENT) {
			return linkErr("delete ingress redirect of", iface, err)
		}
	}
	if filters, err = list(); err != nil {
		return linkErr("read ingress filters of", iface, err)
	}
	if len(filters) > 0 {
		return nil
	}
	if err := h.QdiscDel(ingress); err != nil {
		return linkErr("delete ingress qdisc of", iface, err)
	}
	return nil
}

// othersAtPref reports whether filters hold, at f's preference and
// protocol, a filter node that is not a redirect to ifbIndex (a u32 hash
// table has node number 0 and does not count).
func othersAtPref(filters []netlink.Filter, f netlink.Filter, ifbIndex int) bool {
	a := f.Attrs()
	for _, g := range filters {
		b := g.Attrs()
		if b.Priority != a.Priority || b.Protocol != a.Protocol || redirectsTo(g, ifbIndex) {
			continue
		}
		if _, ok := g.(*netlink.U32); ok && b.Handle&0xfff == 0 {
			continue
		}
		return true
	}
	return false
}

// deleteIFB deletes the IFB device called name; a missing one is not an
// error, a link of that name that is not an IFB is.
func deleteIFB(h *netlink.Handle, name string) error {
	link, err := h.LinkByName(name)
	switch {
	case errors.As(err, new(netlink.LinkNotFoundError)):
		return nil
	case err != nil:
		return linkErr("read IFB", name, err)
	case link.Type() != "ifb":
		return fmt.Errorf("failed to delete IFB %q: it is a %s link", name, link.Type())
	}
	if err := h.LinkDel(link); err != nil {
		return linkErr("delete IFB", name, err)
	}
	return nil
}

// findIngress returns link's ingress qdisc, nil when it has none. A clsact
// qdisc, which holds the same place, is an error: its filters belong to
// someone else (a BPF program, typically).
func findIngress(h *netlink.Handle, link netlink.Link) (netlink.Qdisc, error) {
	qdiscs, err := dumpAgain(func() ([]netlink.Qdisc, error) { return h.QdiscList(link) })
	if err != nil {
		return nil, err
	}
	for _, q := range qdiscs {
		if q.Attrs().Parent != netlink.HANDLE_INGRESS {
			continue
		}
		if q.Type() != "ingress" {
			return nil, fmt.Errorf("the interface has a %s qdisc in the ingress qdisc's place", q.Type())
		}
		return q, nil
	}
	return nil, nil
}

// dumpAgain runs a netlink dump, again when the kernel interrupted it
// because the table changed meanwhile.
func dumpAgain[T any](dump func() (T, error)) (T, error) {
	var (
		res T
		err error
	)
	for range 3 {
		res, err = dump()
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	return res, err
}

// linkErr wraps err with the operation and the interface's name, and says
// which capability is missing when the kernel refused for lack of
// privilege.
func linkErr(op, name string, err error) error {
	if errors.Is(err, unix.EPERM) {
		return fmt.Errorf("failed to %s %q: %w (autoshape needs CAP_NET_ADMIN)", op, name, err)
	}
	return fmt.Errorf("failed to %s %q: %w", op, name, err)
}
