package lab

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
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

	mu       sync.Mutex
	prev     lineLook // the last look at the line's counters
	delivery deliveryCount
}

// A lineLook is the line's counters at one time, and the rate it held from
// then on.
type lineLook struct {
	at      time.Time
	bytes   uint64 // sent, as the kernel counts them (without Overhead)
	packets uint64
	backlog uint64 // bytes queued
	rate    uint64 // bit/s
}

// queuedBacklog is the backlog, two full-size frames, from which the line
// holds a queue.
const queuedBacklog = 2 * 1514

// A deliveryCount adds up what the line sent between looks in which it held
// a queue (sim.Delivery).
type deliveryCount struct {
	overhead             int // bytes per packet the rate counts beyond the kernel's
	queued, short        time.Duration
	allowedBits, sentBit float64
}

// add counts the span from prev to cur.
func (c *deliveryCount) add(prev, cur lineLook) {
	dt := cur.at.Sub(prev.at)
	if prev.at.IsZero() || dt <= 0 || cur.bytes < prev.bytes || cur.packets < prev.packets ||
		prev.backlog < queuedBacklog || cur.backlog < queuedBacklog {
		return
	}
	sent := 8 * (float64(cur.bytes-prev.bytes) + float64(c.overhead)*float64(cur.packets-prev.packets))
	allowed := float64(prev.rate) * dt.Seconds()
	c.queued += dt
	c.allowedBits += allowed
	c.sentBit += sent
	if sent < sim.ShortShare*allowed {
		c.short += dt
	}
}

// result is the count as a sim.Delivery.
func (c *deliveryCount) result() *sim.Delivery {
	d := &sim.Delivery{QueuedS: c.queued.Seconds(), ShortS: c.short.Seconds()}
	if c.allowedBits > 0 {
		d.Share = c.sentBit / c.allowedBits
	}
	return d
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
	b.delivery.overhead = opt.Overhead
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
// rate BPS [linklayer atm] [overhead N]` sets it, with a burst of
// lineBurst of the rate and at least one full frame.
func (b *Bottleneck) classOptions(bps uint64) *tc.Htb {
	bytes := bps / 8
	spec := tc.RateSpec{Rate: uint32(min(bytes, math.MaxUint32)), Linklayer: 1, Overhead: uint16(b.opt.Overhead)}
	if b.opt.ATM {
		spec.Linklayer = 2
	}
	burst := uint32(max(bytes*uint64(lineBurst)/uint64(time.Second), 1514))
	opts := &tc.Htb{Parms: &tc.HtbOpt{Rate: spec, Ceil: spec,
		Buffer: core.XmitTime(bytes, burst), Cbuffer: core.XmitTime(bytes, burst)}}
	if bytes > math.MaxUint32 {
		opts.Rate64, opts.Ceil64 = &bytes, &bytes
	}
	return opts
}

// lineBurst is how much of its rate, in time, the line may send at once:
// what lets HTB make up for a timer that wakes it late. With 1 ms, on a
// 2-core machine, a 40 Mbit/s line that held a queue sent 82 % of its rate
// on the host and 93 % inside the User-mode Linux kernel, and a static
// shaper at 90 % of it saw the line's own queue (host: p50 43.8 ms, p95
// 201); with 5 ms, 93 % and 98.5 %, and that shaper's p50 0.5 ms, p95 5.4
// (one run each; docs/sim-vs-lab.md, "The line's burst").
const lineBurst = 5 * time.Millisecond

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
// until ctx ends, and looks at what the line sends (see Delivery).
func (b *Bottleneck) Follow(ctx context.Context, start time.Time) error {
	tick := time.NewTicker(FollowEvery)
	defer tick.Stop()
	b.look()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-tick.C:
			if err := b.SetRate(rateAt(b.capacity, now.Sub(start))); err != nil {
				return err
			}
			b.look()
		}
	}
}

// look reads the line's counters and counts the span since the last look.
// A read that fails leaves a gap: the next span starts at the next read.
func (b *Bottleneck) look() {
	cur, err := b.counters()
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil {
		b.prev = lineLook{}
		return
	}
	cur.rate = b.rate.Load()
	b.delivery.add(b.prev, cur)
	b.prev = cur
}

// counters reads the root HTB's counters.
func (b *Bottleneck) counters() (lineLook, error) {
	qs, err := b.conn.Qdisc().Get()
	now := time.Now()
	if err != nil {
		return lineLook{}, err
	}
	for _, q := range qs {
		if q.Ifindex != b.ifindex || q.Parent != tc.HandleRoot || q.Kind != "htb" {
			continue
		}
		// TCA_STATS: go-tc v0.4.8 decodes TCA_STATS2 wrongly.
		if q.Stats == nil {
			return lineLook{}, errors.New("the kernel sent no statistics for the bottleneck")
		}
		return lineLook{at: now, bytes: q.Stats.Bytes, packets: uint64(q.Stats.Packets), backlog: uint64(q.Stats.Backlog)}, nil
	}
	return lineLook{}, fmt.Errorf("no root HTB on %s in %s", b.dev, b.ns)
}

// Delivery is what the line sent while it held a queue, against its rate,
// since Follow started; nil with ATM framing, whose cells the kernel's
// counters do not show.
func (b *Bottleneck) Delivery() *sim.Delivery {
	if b.opt.ATM {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.delivery.result()
}
