package lab

import (
	"context"
	"fmt"

	"github.com/florianl/go-tc"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/autoshape/autoshape/actuator"
)

// A shaperReader reads rtr's shaping over netlink (polling through tc would
// cost an exec every time): the rate of the root CAKE qdisc, or of the HTB
// class at the top of the root HTB qdisc's tree, whoever created them; and CAKE's
// statistics through autoshape's own decoder (an attached actuator.Link,
// which only reads here).
type shaperReader struct {
	ns   int
	name string // the namespace's name
	tc   *tc.Tc
	nl   *netlink.Handle

	// The estimate is read by a goroutine on a thread inside the
	// namespace, through a Link attached there as in its own namespace:
	// a read from outside would make (and throw away) an OS thread per
	// read, which costs a few hundred ms inside User-mode Linux.
	estReq  chan struct{}
	estResp chan estimateReading
}

type estimateReading struct {
	bps uint64
	err error
}

// openShaperReader connects to traffic control and link netlink in the
// namespace ns.
func openShaperReader(ns string) (*shaperReader, error) {
	h, err := netns.GetFromName(ns)
	if err != nil {
		return nil, fmt.Errorf("namespace %s: %w", ns, err)
	}
	conn, err := tc.Open(&tc.Config{NetNS: int(h)})
	if err != nil {
		h.Close()
		return nil, fmt.Errorf("failed to open traffic control netlink in %s: %w", ns, err)
	}
	nl, err := netlink.NewHandleAt(h, unix.NETLINK_ROUTE)
	if err != nil {
		h.Close()
		conn.Close()
		return nil, fmt.Errorf("failed to open link netlink in %s: %w", ns, err)
	}
	return &shaperReader{ns: int(h), name: ns, tc: conn, nl: nl}, nil
}

// rate returns the shaper's rate on dev in bit/s: the bytes/s the kernel
// holds, times 8 (the lab's framings are Ethernet and ATM, whose rates
// autoshape's actuator writes as bit/s ÷ 8).
func (r *shaperReader) rate(dev string) (uint64, error) {
	link, err := r.nl.LinkByName(dev)
	if err != nil {
		return 0, fmt.Errorf("interface %q: %w", dev, err)
	}
	idx := uint32(link.Attrs().Index)
	qs, err := r.tc.Qdisc().Get()
	if err != nil {
		return 0, fmt.Errorf("failed to read the qdiscs: %w", err)
	}
	var root *tc.Object
	for i := range qs {
		if qs[i].Ifindex == idx && qs[i].Parent == tc.HandleRoot {
			root = &qs[i]
		}
	}
	switch {
	case root == nil:
		return 0, fmt.Errorf("%q has no root qdisc", dev)
	case root.Kind == "cake" && root.Cake != nil && root.Cake.BaseRate != nil:
		return *root.Cake.BaseRate * 8, nil
	case root.Kind != "htb":
		return 0, fmt.Errorf("%q's root qdisc is %s, not cake or htb", dev, root.Kind)
	}
	classes, err := r.tc.Class().Get(&tc.Msg{Family: unix.AF_UNSPEC, Ifindex: idx})
	if err != nil {
		return 0, fmt.Errorf("failed to read the classes of %q: %w", dev, err)
	}
	for _, c := range classes {
		// The kernel gives a class at the top of the tree the parent
		// TC_H_ROOT.
		top := c.Parent == tc.HandleRoot || c.Parent == root.Handle
		if !top || c.Handle>>16 != root.Handle>>16 || c.Kind != "htb" || c.Htb == nil || c.Htb.Parms == nil {
			continue
		}
		if c.Htb.Rate64 != nil {
			return *c.Htb.Rate64 * 8, nil
		}
		return uint64(c.Htb.Parms.Rate.Rate) * 8, nil
	}
	return 0, fmt.Errorf("%q has no HTB class under its root", dev)
}

// estimate returns CAKE's capacity estimate on rtr's download shaper (the
// IFB) in bit/s.
func (r *shaperReader) estimate() (uint64, error) {
	if r.estReq == nil {
		r.estReq, r.estResp = make(chan struct{}), make(chan estimateReading)
		go func() {
			// InNS's thread stays in the namespace until the requests end.
			_ = InNS(r.name, func() error {
				var link *actuator.Link
				defer func() {
					if link != nil {
						link.Close()
					}
				}()
				for range r.estReq {
					var got estimateReading
					if link == nil {
						link, got.err = actuator.Attach(RtrWAN, "", 0)
					}
					if got.err == nil {
						var st actuator.Stats
						if st, got.err = link.Down().Stats(context.Background()); got.err != nil {
							// The scheme may be rebuilding its shaping.
							link.Close()
							link = nil
						}
						got.bps = st.CapacityEstimate
					}
					r.estResp <- got
				}
				return nil
			})
		}()
	}
	r.estReq <- struct{}{}
	got := <-r.estResp
	return got.bps, got.err
}

func (r *shaperReader) close() error {
	if r.estReq != nil {
		close(r.estReq)
	}
	r.nl.Close()
	unix.Close(r.ns)
	return r.tc.Close()
}
