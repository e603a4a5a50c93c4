//go:build linux

package actuator

import (
	"fmt"

	"github.com/florianl/go-tc"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// The whole-namespace qdisc dump: the daemon reads its own root with one
// request (tcconn.go); the tests read every qdisc this way to check what
// the kernel holds, independently of that request.

// readCakeStats reads, by a dump, the statistics of ifindex's root cake qdisc in the
// calling thread's network namespace. An interface whose root qdisc is not
// cake gives an error wrapping ErrNoQdisc.
func readCakeStats(ifindex uint32) (CakeStats, error) {
	return readCakeStatsIn(0, ifindex)
}

// readCakeStatsIn is readCakeStats in the network namespace whose file
// descriptor is netns (0: the calling thread's).
func readCakeStatsIn(netns int, ifindex uint32) (CakeStats, error) {
	return readRootCakeStats(netns, ifindex, 0)
}

// readRootCakeStats reads the statistics of ifindex's root cake qdisc in the
// network namespace netns (0: the calling thread's); a handle other than 0
// must be the root's. It dumps the qdiscs with RTM_GETQDISC over its own
// netlink socket, because go-tc decodes no CAKE statistics.
func readRootCakeStats(netns int, ifindex, handle uint32) (CakeStats, error) {
	qs, err := dumpQdiscs(netns)
	if err != nil {
		return CakeStats{}, fmt.Errorf("failed to read CAKE statistics on ifindex %d: %w", ifindex, err)
	}
	for _, q := range qs {
		if q.Ifindex != ifindex || q.Parent != tc.HandleRoot {
			continue
		}
		if q.Kind != "cake" || (handle != 0 && q.Handle != handle) {
			return CakeStats{}, fmt.Errorf("failed to read CAKE statistics on ifindex %d: root qdisc is %q (%s): %w",
				ifindex, q.Kind, handleString(q.Handle), ErrNoQdisc)
		}
		if q.App == nil {
			return CakeStats{}, fmt.Errorf("failed to read CAKE statistics on ifindex %d: the kernel sent no TCA_STATS_APP", ifindex)
		}
		s, err := decodeCakeStats(q.App)
		if err != nil {
			return CakeStats{}, fmt.Errorf("failed to read CAKE statistics on ifindex %d: %w", ifindex, err)
		}
		return s, nil
	}
	return CakeStats{}, fmt.Errorf("failed to read CAKE statistics on ifindex %d: no root qdisc: %w", ifindex, ErrNoQdisc)
}

// dumpQdiscs lists every qdisc in the network namespace netns (0: the
// calling thread's). Any message that cannot be decoded fails the dump, so
// that a broken message is never taken for a missing qdisc.
func dumpQdiscs(netns int) ([]qdiscMessage, error) {
	conn, err := netlink.Dial(unix.NETLINK_ROUTE, &netlink.Config{NetNS: netns})
	if err != nil {
		return nil, fmt.Errorf("failed to open a netlink socket: %w", err)
	}
	defer conn.Close()

	req := netlink.Message{
		Header: netlink.Header{
			Type:  unix.RTM_GETQDISC,
			Flags: netlink.Request | netlink.Dump,
		},
		// A zeroed tcmsg: family AF_UNSPEC, all interfaces.
		Data: make([]byte, tcmsgLen),
	}
	msgs, err := conn.Execute(req)
	if err != nil {
		return nil, fmt.Errorf("failed to dump qdiscs: %w", err)
	}
	qs := make([]qdiscMessage, 0, len(msgs))
	for _, m := range msgs {
		if m.Header.Type != unix.RTM_NEWQDISC {
			continue
		}
		q, err := decodeQdiscMessage(m.Data)
		if err != nil {
			return nil, fmt.Errorf("failed to decode the qdisc on ifindex %d: %w", q.Ifindex, err)
		}
		qs = append(qs, q)
	}
	return qs, nil
}
