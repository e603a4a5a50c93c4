package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestLoggerSplitsByLevel: the daemon's INFO and DEBUG lines go to stdout
// and its WARN and ERROR lines to stderr (procd's daemon.info and
// daemon.err), at the configured level and at the one a reload sets.
func TestLoggerSplitsByLevel(t *testing.T) {
	for _, tt := range []struct {
		level, reload string
		out, errOut   []string
	}{
		{level: "info", out: []string{"info"}, errOut: []string{"warn", "error"}},
		{level: "debug", out: []string{"debug", "info"}, errOut: []string{"warn", "error"}},
		{level: "warn", errOut: []string{"warn", "error"}},
		{level: "info", reload: "debug", out: []string{"debug", "info"}, errOut: []string{"warn", "error"}},
		{level: "debug", reload: "error", errOut: []string{"error"}},
	} {
		t.Run(tt.level+"/"+tt.reload, func(t *testing.T) {
			var out, errOut bytes.Buffer
			log, lvl := newLevelLogger(tt.level, &out, &errOut)
			if tt.reload != "" {
				if err := lvl.UnmarshalText([]byte(tt.reload)); err != nil {
					t.Fatal(err)
				}
			}
			log.Debug("debug")
			log.Info("info")
			log.Warn("warn")
			log.Error("error")
			if diff := cmp.Diff(tt.out, messages(t, out.String())); diff != "" {
				t.Errorf("stdout (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.errOut, messages(t, errOut.String())); diff != "" {
				t.Errorf("stderr (-want +got):\n%s", diff)
			}
		})
	}
}

// messages returns the "msg" of each JSON line, checking that its level
// is the message.
func messages(t *testing.T, s string) []string {
	t.Helper()
	var msgs []string
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		if line == "" {
			continue
		}
		var l struct{ Level, Msg string }
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("not a JSON line: %q: %v", line, err)
		}
		if l.Level != l.Msg {
			t.Errorf("%q logged at level %q", l.Msg, l.Level)
		}
		msgs = append(msgs, l.Msg)
	}
	return msgs
}
