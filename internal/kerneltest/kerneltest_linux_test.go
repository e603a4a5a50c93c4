//go:build linux

package kerneltest

import (
	"os"
	"testing"
)

// TestHasQdisc: kinds every kernel here has are found (pfifo is built in;
// htb is on the host and loaded in User-mode Linux), and a kind no kernel
// has is not.
func TestHasQdisc(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: needs root to create a network namespace")
	}
	for kind, want := range map[string]bool{"pfifo": true, "htb": true, "nosuchqdisc": false} {
		got, err := HasQdisc(kind)
		if err != nil || got != want {
			t.Errorf("HasQdisc(%q) = %v, %v; want %v", kind, got, err, want)
		}
	}
	for _, kind := range []string{"cake", "fq_codel", "netem"} {
		got, err := HasQdisc(kind)
		if err != nil {
			t.Errorf("HasQdisc(%q): %v", kind, err)
		}
		t.Logf("%s: %v", kind, got)
		if RealKernel() && !got {
			t.Errorf("HasQdisc(%q) = false on a kernel that must have it", kind)
		}
	}
}
