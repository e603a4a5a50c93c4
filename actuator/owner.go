package actuator

import (
	"errors"
	"fmt"

	"github.com/florianl/go-tc"
	"github.com/vishvananda/netlink"
)

// What autoshape creates carries a mark, so that it, a later autoshape
// process, and whoever reads `tc qdisc` and `ip link` can tell it from other
// software's shaping (sqm-scripts makes CAKE or HTB roots and ifb4<wan> too):
//   - its root qdiscs, CAKE or HTB, have the handle a5: (OwnRootHandle).
//     sqm-scripts' HTB and most scripts use 1:, tc without a handle gets the
//     kernel's automatic 8001: and up, which never reach below 8000:;
//   - an IFB it adds has the alias "autoshape" (OwnIFBAlias, `ip link`
//     prints it);
//   - an ingress redirect is its own when it leads to an IFB of its own.
//
// autoshape deletes nothing without its mark, and changes only the root it
// was given or made.

// OwnRootHandle is the handle of every root qdisc autoshape creates, a5: as
// tc prints it.
const OwnRootHandle uint32 = 0x00a5_0000

// OwnHTBClass is the class of autoshape's own HTB that holds the rate, a5:1.
const OwnHTBClass = OwnRootHandle | 1

// OwnIFBAlias is the alias (IFLA_IFALIAS) of an IFB autoshape creates.
const OwnIFBAlias = "autoshape"

// ErrForeignQdisc: an interface has a root qdisc that autoshape did not
// create, and it was not asked to replace it.
var ErrForeignQdisc = errors.New("root qdisc not created by autoshape")

// A ForeignQdiscError names the root qdisc in autoshape's way. It wraps
// ErrForeignQdisc.
type ForeignQdiscError struct {
	// Iface is the interface; Kind and Handle are its root qdisc's.
	Iface  string
	Kind   string
	Handle uint32
}

func (e *ForeignQdiscError) Error() string {
	return fmt.Sprintf("%q has a %s qdisc %s at its root that autoshape did not create (sqm-scripts', or another shaper's)",
		e.Iface, e.Kind, handleString(e.Handle))
}

// Unwrap returns ErrForeignQdisc.
func (e *ForeignQdiscError) Unwrap() error { return ErrForeignQdisc }

// A rootQdisc is what an interface has at its root.
type rootQdisc struct {
	Kind   string
	Handle uint32
}

// isDefault reports whether the root is the kernel's own (handle 0: noqueue,
// pfifo_fast, mq, or whatever net.core.default_qdisc names), or none.
func (r rootQdisc) isDefault() bool { return r.Handle == 0 }

// isOwn reports whether autoshape created the root.
func (r rootQdisc) isOwn() bool {
	return r.Handle == OwnRootHandle && (r.Kind == "cake" || r.Kind == "htb")
}

func (r rootQdisc) String() string {
	if r.Kind == "" {
		return "none"
	}
	return r.Kind + " " + handleString(r.Handle)
}

// readRoot returns ifindex's root qdisc; an interface without one gives the
// zero rootQdisc.
func readRoot(conn *tcConn, ifindex uint32) (rootQdisc, error) {
	qs, err := conn.qdiscs()
	if err != nil {
		return rootQdisc{}, fmt.Errorf("failed to list qdiscs: %w", err)
	}
	return findRoot(qs, ifindex), nil
}

// findRoot returns ifindex's root among qdiscs.
func findRoot(qs []tc.Object, ifindex uint32) rootQdisc {
	for _, q := range qs {
		if q.Ifindex == ifindex && q.Parent == tc.HandleRoot {
			return rootQdisc{Kind: q.Kind, Handle: q.Handle}
		}
	}
	return rootQdisc{}
}

// isOwnIFB reports whether link is an IFB that autoshape created.
func isOwnIFB(link netlink.Link) bool {
	return link.Type() == "ifb" && link.Attrs().Alias == OwnIFBAlias
}
