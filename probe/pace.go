package probe

import (
	"context"
	"sync"
	"time"
)

// Pacing. A target does its work in polls: it reads the answers that came
// (each timed by the kernel's receive timestamp), sends a probe when one is
// due, and reports the fates it knows, the probes past their deadline as
// lost. A Pacer runs the polls of all its targets on the goroutine that
// calls Pace: the daemon paces a link's targets from the link's loop, just
// before each control step, which then sees every answer that came before
// it. The process wakes once a tick, however many reflectors it probes,
// where targets with timers and readers of their own woke it for every
// probe and every answer; on a router, and on a virtual machine, the
// wake-ups cost more than the work. A target without a Pacer paces itself
// every selfPace.

// selfPace is how often a target without a Pacer polls.
const selfPace = 10 * time.Millisecond

// A Pacer runs the polls of the targets made with it (TargetOptions.Pacer)
// at each Pace. Every is the time between two Paces.
type Pacer struct {
	every time.Duration

	mu    sync.Mutex
	polls map[*func()]struct{}
}

// NewPacer returns a Pacer that the caller will pace every every.
func NewPacer(every time.Duration) *Pacer {
	return &Pacer{every: every, polls: map[*func()]struct{}{}}
}

// Pace runs the polls of the targets running now, in no particular order,
// on the calling goroutine, and returns when they are done. Each target
// reads its own clock.
func (p *Pacer) Pace() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for f := range p.polls {
		(*f)()
	}
}

// add makes poll run at each Pace until the returned function is called,
// which returns once no Pace runs poll any more.
func (p *Pacer) add(poll func()) (remove func()) {
	f := &poll
	p.mu.Lock()
	p.polls[f] = struct{}{}
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		delete(p.polls, f)
		p.mu.Unlock()
	}
}

// early is how long before a probe's turn a poll may send it: half the
// time between polls, so that a turn falls to the poll nearest it.
func (p *Pacer) early(interval time.Duration) time.Duration {
	if p == nil {
		return min(selfPace, interval) / 2
	}
	return p.every / 2
}

// pace runs poll at each of pacer's Paces, or without one every selfPace
// or interval, whichever is shorter, until ctx ends or failed delivers an
// error, which it returns.
func pace(ctx context.Context, pacer *Pacer, interval time.Duration, failed <-chan error, poll func()) error {
	if pacer != nil {
		remove := pacer.add(poll)
		defer remove()
		select {
		case <-ctx.Done():
			return nil
		case err := <-failed:
			return err
		}
	}
	tick := time.NewTicker(min(selfPace, interval))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-failed:
			return err
		case <-tick.C:
			poll()
		}
	}
}

// A turns says when a target's probes are due: every interval from the
// first poll, each sent by the first poll at most early before it. A
// target that falls a whole interval behind (its polls stopped) starts
// again from the poll that finds it so.
type turns struct {
	interval, early time.Duration
	next            time.Time
}

// due reports whether a probe is due at now, and if so moves on to the
// next turn.
func (t *turns) due(now time.Time) bool {
	if !t.next.IsZero() && now.Before(t.next.Add(-t.early)) {
		return false
	}
	if t.next.IsZero() || now.Sub(t.next) >= t.interval {
		t.next = now
	}
	t.next = t.next.Add(t.interval)
	return true
}
