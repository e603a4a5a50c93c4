package sim

import (
	"math"

	"github.com/autoshape/autoshape/estimator"
)

// stepMs is the model's time step. Two milliseconds keep an hour of trace
// well under two seconds to replay; the queues' delays are still computed to
// the microsecond from the trace (Trace.Drain), so only the senders' and the
// shaper's reactions are quantised.
const stepMs = 2

// wheelSize bounds how many steps ahead data, acks and loss signals can be
// scheduled; delays longer than wheelSize ms are cut to it (8 s at 2 ms
// steps: longer waits only delay an ack or a loss signal further).
const wheelSize = 4096

// A chunk is bytes of one flow that entered a queue in one millisecond.
type chunk struct {
	flow  int32
	bytes int32
	at    int64 // ms the bytes entered the queue
}

// A ring is a FIFO of chunks that grows as needed.
type ring struct {
	buf  []chunk
	head int
	n    int
}

func (r *ring) push(c chunk) {
	if r.n > 0 {
		// Merge with the tail when it is the same flow in the same ms.
		t := &r.buf[(r.head+r.n-1)&(len(r.buf)-1)]
		if t.flow == c.flow && t.at == c.at {
			t.bytes += c.bytes
			return
		}
	}
	if r.n == len(r.buf) {
		nb := make([]chunk, max(16, 2*len(r.buf)))
		for i := 0; i < r.n; i++ {
			nb[i] = r.buf[(r.head+i)&(len(r.buf)-1)]
		}
		r.buf, r.head = nb, 0
	}
	r.buf[(r.head+r.n)&(len(r.buf)-1)] = c
	r.n++
}

func (r *ring) front() *chunk { return &r.buf[r.head] }

func (r *ring) pop() {
	r.head = (r.head + 1) & (len(r.buf) - 1)
	r.n--
}

// A flow is a greedy TCP sender with a CUBIC or Reno window.
type flow struct {
	cwnd     float64 // bytes
	ssthresh float64
	inflight int64
	wmax     float64 // packets, at the last reduction
	epoch    int64   // ms of the last reduction
	recover  int64   // no further reduction before this ms
	minRTT   float64 // ms, for HyStart
	k        float64 // CUBIC's K for wmax, seconds
}

// codel is the per-flow state of the shaper's AQM (CoDel as in CAKE's COBALT,
// without the BLUE part that only acts on unresponsive flows).
type codel struct {
	firstAbove int64
	dropNext   int64
	count      int
	dropping   bool
}

// A path is one direction of the link: TCP senders, the bloated bottleneck, the
// router's shaper and the receivers. Download runs bottleneck then shaper (the
// shaper sits on the router's ingress); upload runs shaper then bottleneck.
type path struct {
	dir   estimator.Direction
	trace *Trace
	m     *Model

	// Bottleneck: a FIFO with tail drop.
	bq      ring
	bqBytes int64
	limit   int64

	// Shaper: per-flow queues served fairly, each under CoDel. rate 0 means no
	// shaper at all.
	rate     float64 // bit/s
	perStep  float64 // bytes the rate allows per step
	credit   float64 // bytes
	fq       []ring
	fqBytes  []int64
	sqBytes  int64
	sqDrops  int64 // bytes the shaper dropped
	aqm      []codel
	target   int64 // CoDel target, ms
	interval int64 // CoDel interval, ms

	flows []flow
	// Timing wheels indexed [ms%wheelSize*len(flows) + flow].
	fwd, ack, loss []int32

	shaped    uint64 // bytes sent by the shaper (what its counters show)
	delivered int64  // bytes delivered to the receivers
	drops     int64

	cake cakeEstimator
	// autorate is CAKE's autorate-ingress on the download shaper: on from
	// the start, as autoshape's setup mode creates it, until a controller
	// writes a rate (a bandwidth change with AUTORATE 0: the kernel then
	// stops feeding its estimator, which keeps its last value).
	autorate bool
	// served bytes of the bottleneck (for packet departure times)
	servedBytes int64

	// The ack wheel slot for deliveries at ackAt with return delay ackBack.
	ackAt   int64
	ackBack float64
	ackSlot int

	wait float64 // this ms: the bottleneck's FIFO wait beyond an empty queue's, ms
	// empty is the wait an empty bottleneck would give this ms.
	empty float64
}

func newPath(m *Model, dir estimator.Direction, tr *Trace, limit int64) *path {
	n := m.cfg.Flows
	p := &path{
		dir: dir, trace: tr, m: m, limit: limit,
		fq: make([]ring, n), fqBytes: make([]int64, n), aqm: make([]codel, n),
		flows: make([]flow, n),
		fwd:   make([]int32, wheelSize*n), ack: make([]int32, wheelSize*n), loss: make([]int32, wheelSize*n),
	}
	for i := range p.flows {
		p.flows[i] = flow{cwnd: 10 * PacketBytes, ssthresh: math.Inf(1)}
	}
	p.setRate(0)
	return p
}

// setRate changes the shaper's rate (0: no shaper) and CoDel's parameters,
// scaled as CAKE does at low rates.
func (p *path) setRate(bps float64) {
	p.rate = bps
	p.perStep = bps / 8000 * stepMs
	p.target, p.interval = 5, 100
	if bps > 0 {
		mtuMs := float64(PacketBytes) * 8 * 1000 / bps
		if t := int64(math.Ceil(1.5 * mtuMs)); t > p.target {
			p.target = t
			p.interval = max(100+t-5, 2*t)
		}
	}
}

// fifoWait is how long a packet arriving now waits in the bottleneck beyond
// what an empty queue would make it wait, in ms, and that empty wait.
func (p *path) fifoWait(now int64) (extra, empty float64) {
	const probe = 100 // bytes of a small probe packet
	empty = p.trace.Drain(now, probe)
	if p.bqBytes == 0 {
		return 0, empty
	}
	full := p.trace.Drain(now, p.bqBytes+probe)
	return math.Max(0, full-empty), empty
}

// sparseWait is the wait of a sparse flow (a probe) in the shaper: with flow
// isolation it waits only for the rest of the packet being sent, on average
// half a full-size packet's time.
func (p *path) sparseWait() float64 {
	if p.rate <= 0 || p.sqBytes == 0 {
		return 0
	}
	return float64(PacketBytes) * 8 * 1000 / p.rate / 2
}

// shaperDelay estimates how long bytes now entering the shaper wait in it.
func (p *path) shaperDelay() float64 {
	if p.rate <= 0 {
		return 0
	}
	return float64(p.sqBytes) * 8 * 1000 / p.rate
}

// slot is the wheel index of the step in which an event at t (ms) is
// handled: the first step starting at or after t.
func (p *path) slot(t int64) int {
	return int(((t+stepMs-1)/stepMs)&(wheelSize-1)) * len(p.flows)
}

func clampDelay(d float64) int64 {
	if d < 1 {
		return 1
	}
	if d > wheelSize-1 {
		return wheelSize - 1
	}
	return int64(d)
}

// step advances the path by stepMs milliseconds. revWait is the reverse
// direction's current queueing delay (ms), which the acks of this path cross.
func (p *path) step(now int64, revWait float64) {
	cfg := &p.m.cfg
	half := float64(cfg.BaseRTT.Milliseconds()) / 2
	rtt := 2*half + p.wait + p.empty + p.shaperDelay() + revWait
	s := p.slot(now)
	nf := len(p.flows)

	if nf == 0 {
		p.serve(now, revWait+half)
		return
	}
	lineMax := cfg.SenderBytesPerMs * stepMs / int64(nf)
	due := p.slot(now + clampDelay(half))
	for i := range p.flows {
		f := &p.flows[i]
		// Acks and loss signals reaching the sender now.
		if a := p.ack[s+i]; a != 0 {
			p.ack[s+i] = 0
			f.inflight -= int64(a)
			f.onAck(float64(a), now, rtt, cfg.Reno)
		}
		if l := p.loss[s+i]; l != 0 {
			p.loss[s+i] = 0
			f.inflight -= int64(l)
			f.onLoss(now, rtt, cfg.Reno)
		}
		// The sender: whatever the window allows, up to its line rate.
		if room := int64(f.cwnd) - f.inflight; room > 0 {
			room = min(room, lineMax)
			f.inflight += room
			p.fwd[due+i] += int32(room)
		}
		// Data reaching the first queue.
		if b := p.fwd[s+i]; b != 0 {
			p.fwd[s+i] = 0
			if p.dir == estimator.Down {
				p.enqueueBottleneck(now, int32(i), int64(b), revWait+half)
			} else {
				p.enqueueShaper(now, int32(i), int64(b), revWait+half)
			}
		}
	}
	p.serve(now, revWait+half)
}

// serve runs the two queues in path order.
func (p *path) serve(now int64, back float64) {
	if p.dir == estimator.Down {
		p.serveBottleneck(now, back)
		p.serveShaper(now, back)
	} else {
		p.serveShaper(now, back)
		p.serveBottleneck(now, back)
	}
}

// deliver hands bytes to the receiver of flow i; the ack reaches the sender
// after back (ms).
func (p *path) deliver(now int64, i int32, b int64, back float64) {
	p.delivered += b
	if now != p.ackAt || back != p.ackBack {
		p.ackAt, p.ackBack = now, back
		p.ackSlot = p.slot(now + clampDelay(back))
	}
	p.ack[p.ackSlot+int(i)] += int32(b)
}

// drop loses bytes of flow i; the sender hears of it after the time the
// following data needs to reach the receiver plus back.
func (p *path) drop(now int64, i int32, b int64, ahead, back float64) {
	p.drops += b
	p.loss[p.slot(now+clampDelay(ahead+back))+int(i)] += int32(b)
}

func (p *path) enqueueBottleneck(now int64, i int32, b int64, back float64) {
	if room := p.limit - p.bqBytes; b > room {
		lost := b - max(room, 0)
		b -= lost
		// Tail drop: the next packets of the flow reach the receiver only after
		// the whole queue ahead.
		ahead := p.wait + p.empty
		if p.dir == estimator.Down {
			ahead += p.shaperDelay()
		}
		p.drop(now, i, lost, ahead, back)
	}
	if b <= 0 {
		return
	}
	p.bq.push(chunk{flow: i, bytes: int32(b), at: now})
	p.bqBytes += b
}

func (p *path) serveBottleneck(now int64, back float64) {
	perStep := p.trace.Bytes(now, stepMs)
	if perStep == 0 || p.bqBytes == 0 {
		return
	}
	avail := perStep
	start := p.servedBytes
	for avail > 0 && p.bq.n > 0 {
		c := p.bq.front()
		take := min(int64(c.bytes), avail)
		avail -= take
		c.bytes -= int32(take)
		p.bqBytes -= take
		p.servedBytes += take
		if p.dir == estimator.Down {
			p.enqueueShaper(now, c.flow, take, back)
		} else {
			p.deliver(now, c.flow, take, back)
		}
		if c.bytes == 0 {
			p.bq.pop()
		}
	}
	if p.dir == estimator.Down && p.m.cfg.CapacityEstimate && p.autorate {
		p.cake.arrivals(now, start, p.servedBytes, perStep)
	}
}

func (p *path) enqueueShaper(now int64, i int32, b int64, back float64) {
	if p.rate <= 0 {
		// No shaper: straight through.
		p.shaped += uint64(b)
		if p.dir == estimator.Up {
			p.enqueueBottleneck(now, i, b, back)
		} else {
			p.deliver(now, i, b, back)
		}
		return
	}
	// CAKE's memory limit: 4 MB at these rates; beyond it, drop arrivals.
	if p.sqBytes+b > 4<<20 {
		p.sqDrops += b
		p.drop(now, i, b, p.shaperDelay(), back)
		return
	}
	p.fq[i].push(chunk{flow: i, bytes: int32(b), at: now})
	p.fqBytes[i] += b
	p.sqBytes += b
}

// serveShaper sends up to the shaper's rate, sharing it fairly between the
// backlogged flows (DRR), after CoDel has had its say on each flow's head.
func (p *path) serveShaper(now int64, back float64) {
	if p.rate <= 0 {
		return
	}
	p.credit = min(p.credit+p.perStep, p.perStep+PacketBytes)
	if p.sqBytes == 0 {
		return
	}
	ahead := 0.0
	if p.dir == estimator.Up {
		ahead = p.wait + p.empty
	}
	k := int64(0)
	for i, b := range p.fqBytes {
		if b == 0 {
			continue
		}
		// CoDel has nothing to do while the head is young and it is not
		// dropping.
		if a := &p.aqm[i]; a.dropping || a.firstAbove != 0 || now-p.fq[i].front().at >= p.target {
			p.codel(now, int32(i), ahead, back)
		}
		if p.fqBytes[i] > 0 {
			k++
		}
	}
	budget := int64(p.credit)
	// Water-filling: equal shares, leftovers to flows that still have data.
	for budget > 0 && k > 0 {
		each := max(budget/k, 1)
		for i, b := range p.fqBytes {
			if b == 0 || budget <= 0 {
				continue
			}
			take := min(each, b, budget)
			budget -= take
			p.dequeue(now, int32(i), take, back)
			if take == b {
				k--
			}
		}
	}
	p.credit -= float64(int64(p.credit) - budget)
}

// dequeue sends b bytes from flow i's shaper queue onward.
func (p *path) dequeue(now int64, i int32, b int64, back float64) {
	q := &p.fq[i]
	p.fqBytes[i] -= b
	p.sqBytes -= b
	p.shaped += uint64(b)
	for b > 0 {
		c := q.front()
		take := min(int64(c.bytes), b)
		c.bytes -= int32(take)
		b -= take
		if p.dir == estimator.Up {
			p.enqueueBottleneck(now, i, take, back)
		} else {
			p.deliver(now, i, take, back)
		}
		if c.bytes == 0 {
			q.pop()
		}
	}
}

// codel runs CoDel's control law on flow i's head and drops one packet from
// the head when it says so.
func (p *path) codel(now int64, i int32, ahead, back float64) {
	c := &p.aqm[i]
	q := &p.fq[i]
	sojourn := now - q.front().at
	if sojourn < p.target || p.fqBytes[i] <= PacketBytes {
		c.firstAbove = 0
		c.dropping = false
		return
	}
	switch {
	case c.firstAbove == 0:
		c.firstAbove = now + p.interval
		return
	case !c.dropping && now >= c.firstAbove:
		c.dropping = true
		if c.count > 2 && now-c.dropNext < 8*p.interval {
			c.count -= 2
		} else {
			c.count = 1
		}
	case c.dropping && now >= c.dropNext:
		c.count++
	default:
		return
	}
	c.dropNext = now + int64(float64(p.interval)/math.Sqrt(float64(c.count)))
	// Drop one packet from the head.
	b := min(int64(PacketBytes), p.fqBytes[i])
	left := b
	for left > 0 {
		h := q.front()
		take := min(int64(h.bytes), left)
		h.bytes -= int32(take)
		left -= take
		if h.bytes == 0 {
			q.pop()
		}
	}
	p.fqBytes[i] -= b
	p.sqBytes -= b
	p.sqDrops += b
	p.drop(now, i, b, ahead, back)
}

// onAck grows the window for a bytes acknowledged.
func (f *flow) onAck(a float64, now int64, rttMs float64, reno bool) {
	if f.minRTT == 0 || rttMs < f.minRTT {
		f.minRTT = rttMs
	}
	if f.cwnd < f.ssthresh {
		// HyStart (on by default in Linux CUBIC): leave slow start when the
		// RTT has grown by an eighth of the minimum, clamped to [4, 16] ms.
		if !reno && f.cwnd >= 16*PacketBytes && rttMs > f.minRTT+math.Min(math.Max(f.minRTT/8, 4), 16) {
			f.ssthresh = f.cwnd
			f.setWmax(f.cwnd / PacketBytes)
			f.epoch = now
			return
		}
		f.cwnd += a
	} else if reno {
		f.cwnd += PacketBytes * a / f.cwnd
	} else {
		// CUBIC: W(t) = C (t-K)^3 + Wmax, in packets, t in seconds, looking
		// one RTT ahead; never slower than Reno would be.
		const c, beta = 0.4, 0.7
		t := float64(now-f.epoch)/1000 + rttMs/1000
		x := t - f.k
		target := c*x*x*x + f.wmax
		w := f.cwnd / PacketBytes
		friendly := f.wmax*beta + 3*(1-beta)/(1+beta)*t/max(rttMs/1000, 0.001)
		target = max(target, friendly)
		if target > w {
			f.cwnd += min((target-w)/w, 0.5) * a
		} else {
			f.cwnd += 0.01 * a / w
		}
	}
	f.cwnd = min(f.cwnd, maxCwnd)
}

// maxCwnd is the receive window: 4 MB, as Linux's default autotuning allows.
const maxCwnd = 4 << 20

// onLoss reduces the window, at most once per round trip.
func (f *flow) onLoss(now int64, rttMs float64, reno bool) {
	if now < f.recover {
		return
	}
	beta := 0.7
	if reno {
		beta = 0.5
	}
	f.setWmax(f.cwnd / PacketBytes)
	f.cwnd = max(f.cwnd*beta, 2*PacketBytes)
	f.ssthresh = f.cwnd
	f.epoch = now
	f.recover = now + int64(math.Max(rttMs, 1))
}

// setWmax records the window at a reduction and CUBIC's K for it.
func (f *flow) setWmax(w float64) {
	f.wmax = w
	f.k = math.Cbrt(w * (1 - 0.7) / 0.4)
}
