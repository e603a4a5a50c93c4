package sim

// cakeEstimator is CAKE's ingress capacity estimator as sch_cake.c computes it
// under autorate-ingress: for each arriving packet it keeps an average packet
// interval (rising fast, falling slowly); a packet arriving after a gap longer
// than that average closes a "train", whose rate over the train and gap feeds
// an average that rises fast (1/4) and falls slowly (1/256). CAKE would then
// set its own rate to 15/16 of that average (Scheme.AutorateIngress); with
// a controller, the controller reads the average (the kernel's
// CAPACITY_ESTIMATE statistic) and keeps the rate its own.
type cakeEstimator struct {
	lastPacket  float64 // ms
	avgInterval float64 // ms
	windowBegin float64 // ms
	windowBytes float64
	peak        float64 // bytes per second
	trains      int     // trains closed so far
}

// ewma is cake_ewma: avg moves by 1/2^shift of the way to sample.
func ewma(avg, sample float64, shift uint) float64 {
	return avg + (sample-avg)/float64(uint(1)<<shift)
}

// packet feeds one packet of n bytes arriving at t (ms).
func (c *cakeEstimator) packet(t, n float64) {
	interval := t - c.lastPacket
	if interval > 1000 {
		interval = 1000
	}
	shift := uint(8)
	if interval > c.avgInterval {
		shift = 2
	}
	c.avgInterval = ewma(c.avgInterval, interval, shift)
	c.lastPacket = t
	c.windowBytes += n
	if interval > c.avgInterval {
		if w := t - c.windowBegin; w > 0 {
			b := c.windowBytes * 1000 / w
			shift := uint(8)
			if b > c.peak {
				shift = 2
			}
			c.peak = ewma(c.peak, b, shift)
			c.trains++
		}
		c.windowBytes = 0
		c.windowBegin = t
	}
}

// arrivals feeds the packets the bottleneck sent in the step starting at now:
// its served-bytes counter went from start to end while it sent at perStep
// bytes per step from the start of the step.
func (c *cakeEstimator) arrivals(now int64, start, end, perStep int64) {
	if perStep <= 0 {
		return
	}
	for b := (start/PacketBytes + 1) * PacketBytes; b <= end; b += PacketBytes {
		c.packet(float64(now)+float64(b-start)/float64(perStep)*stepMs, PacketBytes)
	}
}

// bps returns the estimate in bit/s.
func (c *cakeEstimator) bps() float64 { return c.peak * 8 }

// stop is autorate-ingress turned off: the estimate keeps its value, and the
// train in progress is forgotten (sch_cake.c clears the window's bytes with
// every packet while the flag is off).
func (c *cakeEstimator) stop() { c.windowBytes = 0 }
