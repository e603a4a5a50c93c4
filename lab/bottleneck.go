package lab

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/florianl/go-tc"
	"github.com/florianl/go-tc/core"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/autoshape/autoshape/actuator"
	"github.com/autoshape/autoshape/sim"
)

// FollowEvery is how often a bottleneck's rate follows its capacity trace.
const FollowEvery = 50 * time.Millisecond

// BottleneckOptions shape one direction of the emulated line.
type BottleneckOptions struct {
	// Buffer is the depth of the line's queue in time at the nominal rate
	// (the capacity's mean over its default duration); 500 ms when zero.
	Buffer time.Duration
	// ATM pads each packet plus Overhead to whole 48-byte cells of 53.
	ATM bool
	// Overhead is added to each packet's size, in bytes.
	Overhead int
}

// A Bottleneck is one direction of the emulated line: an HTB class whose
// rate follows a capacity (a schedule or a Mahimahi trace) over a deep bfifo,
// on an isp interface's egress.
type Bottleneck struct {
	ns, dev  string
	conn     *tc.Tc
	ifindex  uint32
	capacity *sim.Trace
	opt      BottleneckOptions
	rate     atomic.Uint64 // bit/s now held
}

// NewBottleneck creates the bottleneck on dev in the namespace ns at the
// capacity's starting rate.
func NewBottleneck(ns, dev string, capacity *sim.Trace, opt BottleneckOptions) (*Bottleneck, error) {
	if capacity == nil {
		return nil, errors.New("a bottleneck needs a capacity")
	}
	if opt.Buffer == 0 {
		opt.Buffer = 500 * time.Millisecond
	}
	if opt.Buffer < 0 || opt.Overhead < -64 || opt.Overhead > 256 {
		return nil, fmt.Errorf("bottleneck options %+v: want a positive buffer and an overhead in [-64, 256]", opt)
	}
	nominal := capacity.MeanRate(capacity.DefaultDuration())
	limit := max(int64(nominal*opt.Buffer.Seconds()/8), 2*1514)
	b := &Bottleneck{ns: ns, dev: dev, capacity: capacity, opt: opt}
	b.rate.Store(b0(capacity))
	if err := run("tc", "-n", ns, "qdisc", "replace", "dev", dev, "root", "handle", "1:", "htb", "default", "1"); err != nil {
		return nil, err
	}
	if err := run("tc", b.classArgs("add", b.rate.Load())...); err != nil {
		return nil, err
	}
	if err := run("tc", "-n", ns, "qdisc", "add", "dev", dev, "parent", "1:1", "handle", "10:", "bfifo", "limit", strconv.FormatInt(limit, 10)); err != nil {
		return nil, err
	}
	if err := b.open(); err != nil {
		return nil, err
	}
	return b, nil
}

// open connects to traffic control in the bottleneck's namespace: the rate
// follows a trace every FollowEvery, and an exec of tc costs a third of a
// second inside User-mode Linux.
func (b *Bottleneck) open() error {
	// HTB's bursts are in the packet scheduler's ticks; the actuator reads
	// its clock once for the whole process.
	if err := actuator.InitClock(); err != nil {
		return fmt.Errorf("failed to read the packet scheduler clock: %w", err)
	}
	h, err := netns.GetFromName(b.ns)
	if err != nil {
		return fmt.Errorf("namespace %s: %w", b.ns, err)
	}
	defer h.Close()
	nl, err := netlink.NewHandleAt(h, unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("failed to open link netlink in %s: %w", b.ns, err)
	}
	defer nl.Close()
	link, err := nl.LinkByName(b.dev)
	if err != nil {
		return fmt.Errorf("interface %s in %s: %w", b.dev, b.ns, err)
	}
	b.ifindex = uint32(link.Attrs().Index)
	if b.conn, err = tc.Open(&tc.Config{NetNS: int(h)}); err != nil {
		return fmt.Errorf("failed to open traffic control netlink in %s: %w", b.ns, err)
	}
	return nil
}

// Close releases the bottleneck's netlink connection; the qdiscs stay.
func (b *Bottleneck) Close() error {
	if b.conn == nil {
		return nil
	}
	return b.conn.Close()
}

// classOptions is HTB class 1:1 at bps bit/s, as `tc class change ... htb
// rate BPS [linklayer atm] [overhead N]` sets it, with a burst of 1 ms of
// the rate and at least one full frame.
func (b *Bottleneck) classOptions(bps uint64) *tc.Htb {
	bytes := bps / 8
	spec := tc.RateSpec{Rate: uint32(min(bytes, math.MaxUint32)), Linklayer: 1, Overhead: uint16(b.opt.Overhead)}
	if b.opt.ATM {
		spec.Linklayer = 2
	}
	burst := uint32(max(bytes/1000, 1514))
	opts := &tc.Htb{Parms: &tc.HtbOpt{Rate: spec, Ceil: spec,
		Buffer: core.XmitTime(bytes, burst), Cbuffer: core.XmitTime(bytes, burst)}}
	if bytes > math.MaxUint32 {
		opts.Rate64, opts.Ceil64 = &bytes, &bytes
	}
	return opts
}

// b0 is a capacity's rate over its first FollowEvery (see rateAt).
func b0(c *sim.Trace) uint64 { return rateAt(c, 0) }

// minFollowRate is the bottleneck's least rate: one full frame per
// FollowEvery (242 kbit/s). HTB holds no zero rate, and it keeps the time a
// packet took at a low rate as a debt that a later, higher rate does not
// forgive: one 1514-byte frame sent at 8 kbit/s in a trace's silent window
// stalled the class for 1.5 s after the capacity came back, a stall the
// trace does not have. At this floor the debt stays within one window, at
// the cost of a trickle of one frame per window through a silent stretch.
const minFollowRate = 1514 * 8 * int64(time.Second/FollowEvery)

// rateAt is the capacity's mean rate over the FollowEvery from at, at least
// minFollowRate.
func rateAt(c *sim.Trace, at time.Duration) uint64 {
	r := c.RateAt(at.Milliseconds(), FollowEvery.Milliseconds())
	return uint64(max(math.Round(r), float64(minFollowRate)))
}

func (b *Bottleneck) classArgs(verb string, bps uint64) []string {
	args := []string{"-n", b.ns, "class", verb, "dev", b.dev, "parent", "1:", "classid", "1:1", "htb",
		"rate", strconv.FormatUint(bps, 10) + "bit"}
	if b.opt.ATM {
		args = append(args, "linklayer", "atm")
	}
	if b.opt.Overhead != 0 {
		args = append(args, "overhead", strconv.Itoa(b.opt.Overhead))
	}
	return args
}

// Rate is the rate the bottleneck holds now, in bit/s.
func (b *Bottleneck) Rate() uint64 { return b.rate.Load() }

// SetRate changes the bottleneck's rate; the queue keeps its depth.
func (b *Bottleneck) SetRate(bps uint64) error {
	if bps == b.rate.Load() {
		return nil
	}
	err := b.conn.Class().Replace(&tc.Object{
		Msg:       tc.Msg{Family: unix.AF_UNSPEC, Ifindex: b.ifindex, Handle: 0x1_0001, Parent: 0x1_0000},
		Attribute: tc.Attribute{Kind: "htb", Htb: b.classOptions(bps)},
	})
	if err != nil {
		return fmt.Errorf("failed to change the bottleneck's rate on %s in %s to %d bit/s: %w", b.dev, b.ns, bps, err)
	}
	b.rate.Store(bps)
	return nil
}

// Follow moves the rate along the capacity every FollowEvery from start
// until ctx ends.
func (b *Bottleneck) Follow(ctx context.Context, start time.Time) error {
	tick := time.NewTicker(FollowEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-tick.C:
			if err := b.SetRate(rateAt(b.capacity, now.Sub(start))); err != nil {
				return err
			}
		}
	}
}
