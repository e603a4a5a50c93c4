package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"
)

// stateFile is what survives a restart: per link the rates reached and the
// reflectors that were active.
type stateFile struct {
	Version int                  `json:"version"`
	Saved   time.Time            `json:"saved"`
	Links   map[string]linkState `json:"links"`
}

type linkState struct {
	DownKbit   float64  `json:"down_kbit"`
	UpKbit     float64  `json:"up_kbit"`
	Reflectors []string `json:"reflectors,omitempty"`
}

// loadState reads the state file; a missing one is an empty state, a
// corrupt one is reported and ignored, never fatal.
func loadState(path string, log *zap.Logger) stateFile {
	st := stateFile{Version: 1, Links: map[string]linkState{}}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return st
	}
	var read stateFile
	if err == nil {
		err = json.Unmarshal(b, &read)
	}
	if err == nil && read.Version != 1 {
		err = fmt.Errorf("unknown version %d", read.Version)
	}
	if err != nil {
		log.Warn("ignoring the state file", zap.String("path", path), zap.Error(err))
		return st
	}
	if read.Links != nil {
		st.Links = read.Links
	}
	return st
}

// save writes the state, saved at now, atomically: a temporary file beside
// it, synced and renamed into place.
func (st stateFile) save(path string, now time.Time) error {
	st.Version = 1
	st.Saved = now.UTC()
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".state-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
