package actuator

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
)

// linkCounters reads iface's received and sent byte counters, from the
// kernel's 64-bit link statistics.
func linkCounters(h *netlink.Handle, iface string) (rxBytes, txBytes uint64, err error) {
	link, err := h.LinkByName(iface)
	if err != nil {
		return 0, 0, linkErr("read counters of", iface, err)
	}
	s := link.Attrs().Statistics
	if s == nil {
		return 0, 0, fmt.Errorf("failed to read counters of %q: %w", iface, errors.New("the kernel sent no link statistics"))
	}
	return s.RxBytes, s.TxBytes, nil
}
