package daemon

import (
	"errors"

	"go.uber.org/zap"

	"github.com/autoshape/autoshape/actuator"
)

// A shapingWatch logs what Link.Check finds: one WARN line when a drift
// (or a failure to check) appears, none while it stays, and one again when
// it comes back after it was gone.
type shapingWatch struct {
	log  *zap.Logger
	last map[string]bool
}

// report logs what is new in drifts and err since the last report, and
// says whether the check made or attached to a root.
func (w *shapingWatch) report(drifts []actuator.Drift, err error) (changed bool) {
	seen := map[string]bool{}
	for _, d := range drifts {
		changed = changed || d.Changed
		k := d.String()
		seen[k] = true
		if w.last[k] {
			continue
		}
		fields := []zap.Field{zap.String("dev", d.Dev), zap.String("found", d.Found), zap.String("action", d.Done)}
		if d.Err != nil {
			fields = append(fields, zap.Error(d.Err))
		}
		w.log.Warn("the shaping changed behind autoshape's back", fields...)
	}
	if err != nil {
		k := "error: " + err.Error()
		seen[k] = true
		switch {
		case w.last[k]:
		case errors.Is(err, actuator.ErrLinkGone):
			w.log.Warn("the interface is gone: waiting for it to come back", zap.Error(err))
		default:
			w.log.Warn("failed to check the shaping: checking again later", zap.Error(err))
		}
	}
	w.last = seen
	return changed
}
