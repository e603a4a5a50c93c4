package policies

import (
	"math"
	"time"

	"github.com/autoshape/autoshape/estimator"
)

// ReasonYield hands the rate to CAKE's autorate-ingress: the controller
// stops writing rates for the direction, CAKE sets its own (15/16 of its
// capacity estimate), and the next rate the controller writes takes it back.
// Its Proposal's Rate is the rate CAKE starts from.
const ReasonYield Reason = "autorate"

// Supervise is the Budget policy as the supervisor of CAKE's
// autorate-ingress on download, the design's use of CAKE's capacity
// estimate (docs/sim-vs-lab.md, "Supervising the estimate"): CAKE owns the
// rate while the delay stays within the budget; on the budget's verdict the
// policy takes the rate over, at a learned margin under the estimate, and
// hands it back once the policy has not cut for handBackAfter, the traffic
// pressing against a rate CAKE would not exceed.
//
// The kernel shapes what this can be. CAKE updates its estimate only while
// it owns the rate (sch_cake.c measures the trains, averages them and sets
// its rate in one branch under autorate-ingress), so while the policy owns
// it the estimate stands at its value at the take-over, and a hand-back
// sets CAKE's rate, at the end of its next train, to 15/16 of that value,
// whatever the link does now. A hand-back is therefore safe only at a rate
// at or over that (CAKE cannot then raise the rate by more than the
// policy's own rise would), and the policy waits for it.
//
// Upload has no estimate (our shaper is upstream of the bottleneck): there
// Supervise is Budget.
type Supervise struct {
	b *Budget
	// margin is the learned fraction of the estimate that the link carried:
	// the rate that held the delay within the budget after a take-over, as
	// a share of the estimate at the take-over.
	margin float64
	// estimate is CAKE's estimate when it last owned the rate (the kernel
	// keeps it while the policy owns the rate), 0 before any.
	estimate float64
	takenAt  time.Time // the last take-over, zero once learned from
	cutAt    time.Time // the Budget policy's last cut
}

var _ Policy = (*Supervise)(nil)

// Supervision's constants. initialMargin is the margin before any
// take-over has measured one: the 90 % of line rate of manual tuning.
// learnAfter is how long after a take-over the rate the policy holds is
// taken as the link's (the Budget policy's drain and refractory time);
// handBackAfter how long the Budget policy must not have cut before a
// hand-back: a few of its refractory times.
const (
	initialMargin = 0.9
	learnAfter    = 2 * time.Second
	handBackAfter = 2 * time.Second
)

// NewSupervise returns a Supervise policy with the Budget policy's config.
func NewSupervise(cfg BudgetConfig) (*Supervise, error) {
	b, err := NewBudget(cfg)
	if err != nil {
		return nil, err
	}
	return &Supervise{b: b, margin: initialMargin}, nil
}

// Name returns "supervise".
func (s *Supervise) Name() string { return "supervise" }

// Margin returns the learned margin under CAKE's estimate.
func (s *Supervise) Margin() float64 { return s.margin }

// Next runs the Budget policy on every call, so that it keeps its state
// whoever owns the rate, and decides who owns the rate next. CAKE owns it
// while the observation carries a live estimate (the controller passes the
// estimate only while autorate-ingress is on).
func (s *Supervise) Next(in Input) Proposal {
	p := s.b.Next(in)
	o := in.Obs
	if o.Direction != estimator.Down {
		return p
	}
	if cuts(p.Reason) {
		s.cutAt = in.Now
	}
	if o.CapacityEstimate > 0 {
		s.estimate = o.CapacityEstimate
		if p.Rate < in.Rate && cuts(p.Reason) {
			// Take over: at the learned margin under the estimate, or
			// lower where the Budget policy measured less.
			s.takenAt = in.Now
			return Proposal{Rate: in.Bounds.Clamp(math.Min(p.Rate, s.margin*s.estimate)), Reason: p.Reason}
		}
		return Proposal{Rate: in.Rate, Reason: ReasonYield}
	}
	if !s.takenAt.IsZero() && in.Now.Sub(s.takenAt) >= learnAfter && s.estimate > 0 {
		// The rate the Budget policy holds the delay within the budget at
		// is the link's capacity as our shaper sees it: learn its share of
		// the estimate, unless the delay says it is still draining.
		if o.Delta-o.Serialisation <= s.b.cfg.Hold {
			s.margin += (math.Min(in.Rate/s.estimate, 1) - s.margin) / 2
		}
		s.takenAt = time.Time{}
	}
	// Hand back where CAKE, at 15/16 of the estimate it kept, would not set
	// the rate above the policy's: after a spell without cuts, the traffic
	// pressing against the rate.
	if s.estimate > 0 && in.Now.Sub(s.cutAt) >= handBackAfter && s.b.pressed(o) &&
		s.estimate*15/16 <= in.Rate && (p.Reason == ReasonProbe || p.Reason == ReasonHold) {
		return Proposal{Rate: in.Rate, Reason: ReasonYield}
	}
	return p
}

// cuts reports whether a reason lowers the rate because of the link: a
// verdict of the Budget policy that the rate is over what the link carries.
func cuts(r Reason) bool {
	switch r {
	case ReasonBloat, ReasonEase, ReasonDrop:
		return true
	}
	return false
}
