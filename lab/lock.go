package lab

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

// The lock's state in this process: the file while held, and how many
// holders share it.
var (
	lockMu    sync.Mutex
	lockFile  *os.File
	lockCount int
)

// Exclusive takes a host-wide lock that serialises lab measurements: two
// labs loading the same CPUs at once disturb each other's timing (go test
// runs packages in parallel). It blocks until no other process holds the
// lock; within one process it may be taken again (nested helpers). It
// returns the function that releases it.
func Exclusive() (release func(), err error) {
	lockMu.Lock()
	defer lockMu.Unlock()
	if lockCount == 0 {
		path := filepath.Join(os.TempDir(), "autoshape-lab.lock")
		f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			return nil, fmt.Errorf("lab lock: %w", err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
			f.Close()
			return nil, fmt.Errorf("lab lock %s: %w", path, err)
		}
		lockFile = f
	}
	lockCount++
	var once sync.Once
	return func() {
		once.Do(func() {
			lockMu.Lock()
			defer lockMu.Unlock()
			if lockCount--; lockCount == 0 {
				syscall.Flock(int(lockFile.Fd()), syscall.LOCK_UN)
				lockFile.Close()
				lockFile = nil
			}
		})
	}, nil
}
