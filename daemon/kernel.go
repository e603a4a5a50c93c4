package daemon

import (
	"context"
	"errors"

	"github.com/autoshape/autoshape/actuator"
	"github.com/autoshape/autoshape/controller"
	"github.com/autoshape/autoshape/estimator"
)

// A Kernel sets a link's shaping up, or finds what another program set up.
// The real one is the actuator's netlink; tests give a fake.
type Kernel interface {
	// Setup creates the link's shaping (replacing what autoshape left of
	// its own) at the configured base rates.
	Setup(cfg actuator.SetupConfig) (Shaping, error)
	// Attach finds the shaping that another program set up on iface and
	// its IFB.
	Attach(iface, ifb string) (Shaping, error)
}

// A Shaping is one link's shaping as the loop drives it.
type Shaping interface {
	// Shapers returns the shapers by estimator.Direction.
	Shapers() [2]controller.Shaper
	// Check compares the shaping with what the kernel holds and repairs
	// what it may (see actuator.Link.Check).
	Check() ([]actuator.Drift, error)
	// Remove removes what Setup created.
	Remove() error
	// Close lets the shaping go, as it is.
	Close() error
}

// netlinkKernel is the real Kernel.
type netlinkKernel struct{}

var _ Kernel = netlinkKernel{}

func (netlinkKernel) Setup(cfg actuator.SetupConfig) (Shaping, error) {
	l, err := actuator.Setup(cfg)
	if err != nil {
		return nil, err
	}
	return linkShaping{l}, nil
}

func (netlinkKernel) Attach(iface, ifb string) (Shaping, error) {
	l, err := actuator.Attach(iface, ifb, 0)
	if err != nil {
		return nil, err
	}
	return linkShaping{l}, nil
}

// linkShaping is an actuator.Link as a Shaping.
type linkShaping struct{ *actuator.Link }

func (l linkShaping) Shapers() [2]controller.Shaper {
	return [2]controller.Shaper{estimator.Down: shaperOf{l.Down()}, estimator.Up: shaperOf{l.Up()}}
}

// shaperOf adapts an actuator's Shaper to the controller's.
type shaperOf struct{ s actuator.Shaper }

var _ controller.Shaper = shaperOf{}

func (a shaperOf) SetRate(ctx context.Context, bps uint64) (controller.Change, error) {
	ch, err := a.s.SetRate(ctx, bps)
	return controller.Change{Iface: ch.Iface, Kind: ch.Kind, Wrote: ch.Wrote}, err
}

func (a shaperOf) Stats(ctx context.Context) (controller.ShaperStats, error) {
	st, err := a.s.Stats(ctx)
	return controller.ShaperStats{Bytes: st.Bytes, Packets: st.Packets, WireBytes: st.WireBytes, Drops: st.Drops,
		Backlog: st.Backlog, CapacityEstimate: st.CapacityEstimate, AutorateIngress: st.AutorateIngress, Rate: st.Rate}, err
}

// Yield hands the rate to CAKE's autorate-ingress where the actuator's
// shaper can (see controller.Yielder); elsewhere it is an error, which
// the controller never meets since only the supervise policy yields, and
// its config requires the CAKE backend.
func (a shaperOf) Yield(ctx context.Context, bps uint64) (controller.Change, error) {
	y, ok := a.s.(actuator.Yielder)
	if !ok {
		return controller.Change{}, errors.New("the shaper cannot hand its rate to autorate-ingress")
	}
	ch, err := y.Yield(ctx, bps)
	return controller.Change{Iface: ch.Iface, Kind: ch.Kind, Wrote: ch.Wrote}, err
}

// dryShaper stands in for the shaper in --dry-run: it writes nothing (the
// decision log shows each rate with qdisc "dry-run") and reads the
// interface's counters (received bytes for download, sent for upload), so
// the loop sees the traffic.
type dryShaper struct {
	iface string
	rx    bool
}

var _ controller.Shaper = (*dryShaper)(nil)

func (s *dryShaper) SetRate(context.Context, uint64) (controller.Change, error) {
	return controller.Change{Iface: s.iface, Kind: "dry-run"}, nil
}

func (s *dryShaper) Stats(context.Context) (controller.ShaperStats, error) {
	rx, tx, err := actuator.Counters(s.iface, 0)
	if err != nil {
		return controller.ShaperStats{}, err
	}
	if s.rx {
		return controller.ShaperStats{Bytes: rx}, nil
	}
	return controller.ShaperStats{Bytes: tx}, nil
}
