package lab

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// Exclusive takes a host-wide lock that serialises lab measurements: two
// labs loading the same CPUs at once disturb each other's timing (go test
// runs packages in parallel). It blocks until the lock is free and returns
// the function that releases it.
func Exclusive() (release func(), err error) {
	path := filepath.Join(os.TempDir(), "autoshape-lab.lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lab lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lab lock %s: %w", path, err)
	}
	return func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
