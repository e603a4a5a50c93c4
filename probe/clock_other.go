//go:build !linux

package probe

import "time"

// kernelTicker: only Linux has timerfd.
func kernelTicker(time.Duration) (<-chan time.Time, func(), bool) { return nil, nil, false }
