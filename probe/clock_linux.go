package probe

import (
	"os"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// kernelTicker returns a ticker on a timerfd, read by a goroutine of its
// own through the runtime's poller with a raw read: a system call through
// the syscall package would wake the runtime's monitor thread on every
// tick, which is what the timerfd is there to avoid. ok is false when the
// kernel refuses a timerfd.
func kernelTicker(d time.Duration) (c <-chan time.Time, stop func(), ok bool) {
	if d <= 0 {
		panic("probe: non-positive interval for NewTicker")
	}
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, nil, false
	}
	ts := unix.NsecToTimespec(d.Nanoseconds())
	if err := unix.TimerfdSettime(fd, 0, &unix.ItimerSpec{Interval: ts, Value: ts}, nil); err != nil {
		unix.Close(fd)
		return nil, nil, false
	}
	f := os.NewFile(uintptr(fd), "timerfd")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, nil, false
	}
	ch := make(chan time.Time, 1)
	go func() {
		var buf [8]byte // the count of expirations since the last read
		var errno unix.Errno
		read := func(fd uintptr) bool {
			_, _, errno = unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)))
			return errno != unix.EAGAIN && errno != unix.EINTR
		}
		for {
			// Read fails once the file is closed (stop).
			if err := rc.Read(read); err != nil || errno != 0 {
				return
			}
			select {
			case ch <- time.Now():
			default: // the last tick is still there: drop this one
			}
		}
	}()
	return ch, func() { f.Close() }, true
}
