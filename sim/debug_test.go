package sim

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/autoshape/autoshape/controller"
	"github.com/autoshape/autoshape/estimator"
	"github.com/autoshape/autoshape/policies"
)

func TestDebugRun(t *testing.T) {
	spec := os.Getenv("SIMDBG")
	if spec == "" {
		t.Skip("set SIMDBG")
	}
	tr, err := LoadTrace(spec)
	if err != nil {
		t.Fatal(err)
	}
	dir := estimator.Down
	cfg := Config{Down: tr}
	if os.Getenv("SIMUP") != "" {
		cfg = Config{Up: tr}
		dir = estimator.Up
	}
	if d := os.Getenv("SIMDUR"); d != "" {
		cfg.Duration, _ = time.ParseDuration(d)
	}
	name := os.Getenv("SIMSCHEME")
	if name == "" {
		name = "autoshape"
	}
	ss, _ := Schemes([]string{name}, policies.BudgetConfig{}, policies.DefaultClassicConfig())
	every := int64(500)
	debugHook = func(now int64, m *Model, c *controller.Controller) {
		if now%every != 0 {
			return
		}
		p := m.paths[dir]
		o := c.Observation(dir)
		fmt.Printf("t=%6.1f cap=%6.2f rate=%6.2f ach=%6.2f est=%6.2f delta=%6.1f bloat=%v bq=%6.0fms sq=%5.1fms load=%.2f cw=%.0f\n",
			float64(now)/1000, p.trace.RateAt(now, 100)/1e6, p.rate/1e6, o.Achieved/1e6, o.CapacityEstimate/1e6,
			float64(o.Delta)/1e6, o.Bloat, p.wait, p.shaperDelay(), o.Load, p.flows[0].cwnd/1500)
	}
	res, err := Run(cfg, ss[0])
	debugHook = nil
	fmt.Printf("%+v\n", res)
}
