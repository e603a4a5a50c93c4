package config

import (
	"io"

	"github.com/BurntSushi/toml"

	"github.com/autoshape/autoshape/actuator"
	"github.com/autoshape/autoshape/controller"
	"github.com/autoshape/autoshape/estimator"
)

// linkLayerNames are the link_layer values by actuator.LinkLayer.
var linkLayerNames = map[actuator.LinkLayer]string{actuator.Ethernet: "ethernet", actuator.ATM: "atm", actuator.PTM: "ptm"}

// Write writes cfg as the TOML that configures it: Parse reads it back as
// cfg, with the defaults Parse fills in made explicit. The lab and the
// tests build their configuration files with it.
func Write(w io.Writer, cfg Config) error {
	onExit := "base"
	if cfg.RemoveOnExit {
		onExit = "remove"
	}
	raw := rawConfig{StateFile: cfg.StateFile, OnExit: onExit,
		Log:     rawLog{Level: cfg.LogLevel, Decisions: cfg.Decisions, DecisionsMaxMB: cfg.DecisionsMaxMB},
		Metrics: rawMetric{Listen: &cfg.MetricsListen}}
	rate := func(bps float64) string {
		if bps == 0 {
			return ""
		}
		return controller.FormatRate(bps)
	}
	for _, l := range cfg.Links {
		mode := "setup"
		if l.Attach {
			mode = "attach"
		}
		rl := rawLink{Name: l.Name, Interface: l.Interface, IFB: l.IFB, Backend: string(l.Backend), Mode: mode, Replace: l.Replace,
			Budget: l.Budget.String(), Policy: string(l.Policy), Overhead: l.Framing.Overhead, MPU: int(l.Framing.MPU),
			LinkLayer: linkLayerNames[l.Framing.LinkLayer],
			Probe:     rawProbe{Method: l.Method.String(), Active: l.ActiveReflectors, Rate: l.ProbeRate}}
		if l.Budget == 0 {
			rl.Budget = ""
		}
		for _, a := range l.Reflectors {
			rl.Probe.Reflectors = append(rl.Probe.Reflectors, a.String())
		}
		for d, dst := range map[estimator.Direction]*rawDirection{estimator.Down: &rl.Download, estimator.Up: &rl.Upload} {
			dc := l.Directions[d]
			*dst = rawDirection{Min: rate(dc.Bounds.Min), Base: rate(dc.Bounds.Base), Max: rate(dc.Bounds.Max), Safe: rate(dc.Safe)}
			if l.Fixed[d] {
				dst.Adjust = new(bool)
			}
		}
		raw.Links = append(raw.Links, rl)
	}
	return toml.NewEncoder(w).Encode(raw)
}
