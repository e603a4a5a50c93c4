package policies

import (
	"math"
	"time"
)

// blindSpell is what a direction's shaper passed in one stall: the bits it
// passed and the seconds over which they were counted.
type blindSpell struct {
	since, last  time.Time
	passed, time float64
}

// Blind keeps a loaded direction's rate, while no probe is answered, no
// higher than what its shaper passed since the stall began, once that is
// well under the rate.
//
// A stall with traffic flowing is most often a queue longer than the probes'
// deadline (a second) on the probes' path: the samples that would show it
// are lost, and the delay is at its worst exactly when nothing measures it.
// The senders behind a queue that long are clocked by what the link
// delivers (their acknowledgements come back at that pace), so what our
// shaper passes over a second is about what the link carries, however far
// over it the rate stands; the rest of the rate only lets their bursts
// through into the link's queue. Held there, it keeps that queue as long as
// the stall lasts: in the simulator on the Verizon EVDO pair, both
// directions loaded, the upload's rate stood at 0.47 Mbit/s for 13 s of
// stall while the link carried 0.12, and the delay grew to 4.7 s
// (docs/frontier.md, "A rate held while blind").
//
// What passed is taken over at least blindFor, as acknowledgement-clocked
// traffic comes in bursts. The rate falls only when what passed is under
// blindShare of it, so a shaper that was itself the limit (it passed its
// rate, whatever stopped the answers) keeps its rate, and only when it is
// over blindIdle of it, so a link that carried nothing (an outage: nothing
// to measure, and nothing queued behind our shaper to release) keeps it
// too.
func (b *Budget) Blind(in Input, since time.Time) Proposal {
	hold := Proposal{Rate: in.Rate, Reason: ReasonStall}
	s := &b.blind
	if !since.Equal(s.since) {
		*s = blindSpell{since: since, last: in.Now}
		return hold
	}
	dt := math.Min(math.Max(in.Now.Sub(s.last).Seconds(), 0), 1)
	s.last = in.Now
	s.passed += in.Obs.Achieved * dt
	s.time += dt
	if s.time < blindFor.Seconds() {
		return hold
	}
	mean := s.passed / s.time
	if mean <= blindIdle*in.Rate || mean >= blindShare*in.Rate {
		return hold
	}
	return Proposal{Rate: mean, Reason: ReasonBlind}
}

// blindFor is the least time over which Blind takes what passed;
// blindShare of the rate is what a shaper that was the limit passes at the
// least (its count over a second is within a few per cent of its rate);
// blindIdle of it is what a link that carries next to nothing passes (the
// controller's idle load).
const (
	blindFor   = time.Second
	blindShare = 0.9
	blindIdle  = 0.05
)
