package policies

// A Fixed policy always proposes the same rate, clamped into the direction's
// bounds. It is the baseline that the adaptive policies are compared against:
// the hand-tuned static shaper most users run today.
type Fixed struct {
	rate float64
}

var _ Policy = (*Fixed)(nil)

// NewFixed returns a policy that always proposes rate (in bit/s).
func NewFixed(rate float64) *Fixed {
	return &Fixed{rate: rate}
}

// Name returns "fixed".
func (*Fixed) Name() string { return "fixed" }

// Next proposes the fixed rate limited to in.Bounds, with ReasonFixed.
func (f *Fixed) Next(in Input) Proposal {
	return Proposal{Rate: in.Bounds.Clamp(f.rate), Reason: ReasonFixed}
}
