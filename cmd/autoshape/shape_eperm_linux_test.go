//go:build linux

package main

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMain lets a test run the command line in a child process, as another
// user: with AUTOSHAPE_TEST_ARGS set, the test binary is autoshape.
func TestMain(m *testing.M) {
	if args := os.Getenv("AUTOSHAPE_TEST_ARGS"); args != "" {
		os.Exit(run(strings.Fields(args), os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// TestShapeWithoutPrivileges runs `autoshape shape` as nobody inside a test
// namespace: the kernel refuses, the message names CAP_NET_ADMIN, the exit
// status is 2, and nothing is left behind.
func TestShapeWithoutPrivileges(t *testing.T) {
	ns := testNS(t) // skips unless root
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("needs setpriv (util-linux) to drop privileges")
	}
	before := nsState(t, ns)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "autoshape.test")
	copyFile(t, os.Args[0], bin)

	cmd := exec.Command("ip", "netns", "exec", ns, "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
		"--inh-caps=-all", "--bounding-set=-all", bin)
	cmd.Env = append(os.Environ(), "AUTOSHAPE_TEST_ARGS=shape --iface wan0 --backend htb --up 10mbit --down 20mbit")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !asExit(err, &exit) || exit.ExitCode() != 2 {
		t.Errorf("shape as nobody: %v, want exit status 2; output:\n%s", err, out)
	}
	if !strings.Contains(string(out), "CAP_NET_ADMIN") {
		t.Errorf("shape as nobody printed %q, want a message naming CAP_NET_ADMIN", out)
	}
	if after := nsState(t, ns); after != before {
		t.Errorf("a refused shape left the namespace changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

func asExit(err error, target **exec.ExitError) bool {
	e, ok := err.(*exec.ExitError)
	if ok {
		*target = e
	}
	return ok
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}
