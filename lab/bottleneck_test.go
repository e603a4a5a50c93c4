package lab

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/autoshape/autoshape/sim"
)

// TestDeliveryCount: only spans with a queue at both ends count, against
// the rate held from the first; the overhead the rate counts is added per
// packet; a span under sim.ShortShare of the rate is short.
func TestDeliveryCount(t *testing.T) {
	t0 := time.Unix(1000, 0)
	look := func(ms int, bytes, packets, backlog, rate uint64) lineLook {
		return lineLook{at: t0.Add(time.Duration(ms) * time.Millisecond), bytes: bytes, packets: packets, backlog: backlog, rate: rate}
	}
	const q = 10 * 1514 // a queue
	for _, tc := range []struct {
		name     string
		overhead int
		looks    []lineLook
		want     sim.Delivery
	}{
		{
			name: "at its rate",
			// 8 Mbit/s for 50 ms: 50 000 bytes.
			looks: []lineLook{look(0, 0, 0, q, 8e6), look(50, 50000, 34, q, 8e6), look(100, 100000, 68, q, 8e6)},
			want:  sim.Delivery{QueuedS: 0.1, Share: 1},
		},
		{
			name:  "short in one span of two",
			looks: []lineLook{look(0, 0, 0, q, 8e6), look(50, 25000, 17, q, 8e6), look(100, 75000, 51, q, 8e6)},
			want:  sim.Delivery{QueuedS: 0.1, Share: 0.75, ShortS: 0.05},
		},
		{
			name: "no queue at one end: not counted",
			looks: []lineLook{look(0, 0, 0, 0, 8e6), look(50, 10000, 7, q, 8e6),
				look(100, 60000, 41, q, 8e6), look(150, 70000, 48, 1514, 8e6)},
			want: sim.Delivery{QueuedS: 0.05, Share: 1},
		},
		{
			name: "the rate held from the first look of a span",
			looks: []lineLook{look(0, 0, 0, q, 8e6), look(50, 50000, 34, q, 2e6),
				look(100, 62500, 42, q, 2e6)},
			want: sim.Delivery{QueuedS: 0.1, Share: 1},
		},
		{
			name:     "overhead per packet",
			overhead: 100,
			// 40 packets of 1150 bytes, 1250 on the line: 50 000.
			looks: []lineLook{look(0, 0, 0, q, 8e6), look(50, 46000, 40, q, 8e6)},
			want:  sim.Delivery{QueuedS: 0.05, Share: 1},
		},
		{
			name:  "counters that went back (a new qdisc) and a gap: not counted",
			looks: []lineLook{look(0, 90000, 60, q, 8e6), look(50, 100, 1, q, 8e6), {}, look(150, 50100, 35, q, 8e6)},
			want:  sim.Delivery{},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := deliveryCount{overhead: tc.overhead}
			var prev lineLook
			for _, l := range tc.looks {
				c.add(prev, l)
				prev = l
			}
			if diff := cmp.Diff(tc.want, *c.result(), cmpopts.EquateApprox(0, 1e-9)); diff != "" {
				t.Errorf("delivery (-want +got):\n%s", diff)
			}
		})
	}
}
