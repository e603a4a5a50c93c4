package lab

import (
	"fmt"

	"github.com/florianl/go-tc"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// htbClass is the class the lab's shaping (autoshape's actuator) rates
// traffic with: 1:1 under the root HTB qdisc 1:.
const htbClass = 0x0001_0001

// An htbReader reads the rate of the lab's HTB shaping in one namespace over
// netlink (polling through tc would cost an exec every time).
type htbReader struct {
	tc *tc.Tc
	nl *netlink.Handle
}

// openHTBReader connects to traffic control and link netlink in the
// namespace ns.
func openHTBReader(ns string) (*htbReader, error) {
	h, err := netns.GetFromName(ns)
	if err != nil {
		return nil, fmt.Errorf("namespace %s: %w", ns, err)
	}
	defer h.Close()
	conn, err := tc.Open(&tc.Config{NetNS: int(h)})
	if err != nil {
		return nil, fmt.Errorf("failed to open traffic control netlink in %s: %w", ns, err)
	}
	nl, err := netlink.NewHandleAt(h)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("failed to open link netlink in %s: %w", ns, err)
	}
	return &htbReader{tc: conn, nl: nl}, nil
}

// rate returns the rate of HTB class 1:1 on dev in bit/s: the bytes/s the
// kernel holds, times 8 (the lab's framings are Ethernet and ATM, whose
// rates autoshape's actuator writes as bit/s ÷ 8).
func (r *htbReader) rate(dev string) (uint64, error) {
	link, err := r.nl.LinkByName(dev)
	if err != nil {
		return 0, fmt.Errorf("interface %q: %w", dev, err)
	}
	classes, err := r.tc.Class().Get(&tc.Msg{Family: unix.AF_UNSPEC, Ifindex: uint32(link.Attrs().Index)})
	if err != nil {
		return 0, fmt.Errorf("failed to read the classes of %q: %w", dev, err)
	}
	for _, c := range classes {
		if c.Handle != htbClass || c.Kind != "htb" || c.Htb == nil || c.Htb.Parms == nil {
			continue
		}
		if c.Htb.Rate64 != nil {
			return *c.Htb.Rate64 * 8, nil
		}
		return uint64(c.Htb.Parms.Rate.Rate) * 8, nil
	}
	return 0, fmt.Errorf("%q has no HTB class 1:1", dev)
}

func (r *htbReader) close() error {
	r.nl.Close()
	return r.tc.Close()
}
