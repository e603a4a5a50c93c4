package lab_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/autoshape/autoshape/actuator"
	"github.com/autoshape/autoshape/config"
	"github.com/autoshape/autoshape/estimator"
	"github.com/autoshape/autoshape/lab"
	"github.com/autoshape/autoshape/probe"
	"github.com/autoshape/autoshape/sim"
)

// TestWriteDaemonConfig: the daemon's configuration for a lab run is one the
// daemon accepts, with the run's budget, framing and backend, the policy
// asked for (the daemon's default without one), timestamps to the lab's
// reflectors, and the bounds returned.
func TestWriteDaemonConfig(t *testing.T) {
	down, err := sim.ParseSchedule("20mbit@0s,5mbit@5s")
	if err != nil {
		t.Fatal(err)
	}
	up, err := sim.ParseSchedule("5mbit")
	if err != nil {
		t.Fatal(err)
	}
	var refl []netip.Addr
	for i := range lab.Reflectors {
		refl = append(refl, netip.AddrFrom4([4]byte{10, 91, 4, byte(i + 1)}))
	}
	top := &lab.Topology{ReflectorAddrs: refl}
	for _, policy := range []string{"", "classic"} {
		t.Run("policy "+policy, func(t *testing.T) {
			cfg := lab.RunConfig{Capacity: [2]*sim.Trace{down, up}, Duration: 12 * time.Second, Budget: 7 * time.Millisecond,
				Bottleneck: lab.BottleneckOptions{ATM: true, Overhead: 10}, Backend: actuator.CAKE}
			dir := t.TempDir()
			path, bases, err := lab.WriteDaemonConfig(top, cfg, dir, policy)
			if err != nil {
				t.Fatalf("WriteDaemonConfig() failed: %v", err)
			}
			c, err := config.Load(path)
			if err != nil {
				t.Fatalf("the daemon refuses the lab's configuration: %v", err)
			}
			l := c.Links[0]
			wantPolicy := config.PolicyBudget
			if policy != "" {
				wantPolicy = config.PolicyName(policy)
			}
			switch {
			case l.Interface != lab.RtrWAN || l.Backend != actuator.CAKE || l.Budget != cfg.Budget || l.Policy != wantPolicy:
				t.Errorf("link %+v", l)
			case l.Framing.LinkLayer != actuator.ATM || l.Framing.Overhead != 10:
				t.Errorf("framing %+v, want ATM with 10 bytes of overhead", l.Framing)
			case l.Method != probe.Timestamp || len(l.Reflectors) != len(refl) || l.Reflectors[0] != refl[0]:
				t.Errorf("probes %v to %v, want timestamps to %v", l.Method, l.Reflectors, refl)
			case !c.RemoveOnExit || c.MetricsListen != "" || c.Decisions == "":
				t.Errorf("config %+v: want shaping removed on exit, no metrics server, a decision file", c)
			}
			// The mean of 5 s at 20 and 7 s at 5 Mbit/s, in whole kbit/s.
			if bases[estimator.Down] != 11250e3 {
				t.Errorf("download base %v, want 11250 kbit/s", bases[estimator.Down])
			}
			for _, d := range estimator.Directions {
				if b := l.Directions[d].Bounds; b.Base != bases[d] || b.Min > b.Base || b.Base > b.Max {
					t.Errorf("%v bounds %+v, base returned %v", d, b, bases[d])
				}
			}
		})
	}
}
