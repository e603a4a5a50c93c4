package actuator

import "math"

// ATM cells carry 48 bytes of payload in 53 bytes on the wire.
const (
	atmCellPayload = 48
	atmCellBytes   = 53
)

// WireBytes returns how many bytes one IP packet of ipLen bytes takes on the
// link: plus the per-packet overhead, padded to whole ATM cells (53 bytes per
// 48 carried) or with PTM's 64/65 coding, and never less than the MPU.
func (f Framing) WireBytes(ipLen int) float64 {
	n := float64(ipLen + f.Overhead)
	if n < float64(f.MPU) {
		n = float64(f.MPU)
	}
	switch f.LinkLayer {
	case ATM:
		return math.Ceil(n/atmCellPayload) * atmCellBytes
	case PTM:
		return n * 65 / 64
	}
	return n
}
