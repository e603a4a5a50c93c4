package uml

import (
	"errors"
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestDenyXstate: under the filter, ptrace's XSAVE register set fails with
// ENODEV, for reading and writing, as on a host without XSAVE; the FXSAVE
// area (PTRACE_GETFPREGS) and the other register sets still come. It traces
// a child of its own, as the kernel traces its processes.
func TestDenyXstate(t *testing.T) {
	type result struct {
		xstateBefore, xstateGet, xstateSet, fpregs, prstatus error
		err                                                  error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the filtered thread ends with this goroutine
		var r result
		defer func() { done <- r }()
		cmd := exec.Command("sleep", "30")
		cmd.SysProcAttr = &syscall.SysProcAttr{Ptrace: true}
		if r.err = cmd.Start(); r.err != nil {
			return
		}
		pid := cmd.Process.Pid
		defer func() {
			cmd.Process.Kill()
			var ws unix.WaitStatus
			unix.Wait4(pid, &ws, 0, nil)
		}()
		var ws unix.WaitStatus
		if _, r.err = unix.Wait4(pid, &ws, 0, nil); r.err != nil {
			return
		}
		if !ws.Stopped() {
			r.err = errors.New("the traced child did not stop at its exec")
			return
		}
		buf := make([]byte, 64<<10)
		regset := func(req, note uintptr, n int) error {
			iov := unix.Iovec{Base: &buf[0]}
			iov.SetLen(n)
			return ptraceRaw(req, pid, note, uintptr(unsafe.Pointer(&iov)))
		}
		r.xstateBefore = regset(unix.PTRACE_GETREGSET, ntX86Xstate, len(buf))
		if r.err = denyXstate(); r.err != nil {
			return
		}
		r.xstateGet = regset(unix.PTRACE_GETREGSET, ntX86Xstate, len(buf))
		r.xstateSet = regset(unix.PTRACE_SETREGSET, ntX86Xstate, 832)
		r.fpregs = ptraceRaw(unix.PTRACE_GETFPREGS, pid, 0, uintptr(unsafe.Pointer(&buf[0])))
		r.prstatus = regset(unix.PTRACE_GETREGSET, 1 /* NT_PRSTATUS */, len(buf))
	}()
	r := <-done
	if errors.Is(r.err, unix.EPERM) {
		t.Skipf("skipping: no ptrace here (%v), so no User-mode Linux either", r.err)
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.xstateBefore != nil {
		t.Skipf("skipping: this host gives no XSAVE register set even unfiltered (%v), so the filter changes nothing here", r.xstateBefore)
	}
	for _, c := range []struct {
		name      string
		got, want error
	}{
		{"PTRACE_GETREGSET NT_X86_XSTATE", r.xstateGet, unix.ENODEV},
		{"PTRACE_SETREGSET NT_X86_XSTATE", r.xstateSet, unix.ENODEV},
		{"PTRACE_GETFPREGS", r.fpregs, nil},
		{"PTRACE_GETREGSET NT_PRSTATUS", r.prstatus, nil},
	} {
		if !errors.Is(c.got, c.want) && c.got != c.want {
			t.Errorf("%s under the filter: %v, want %v", c.name, c.got, c.want)
		}
	}
}

// ptraceRaw is ptrace(2) with any request.
func ptraceRaw(req uintptr, pid int, addr, data uintptr) error {
	if _, _, e := unix.Syscall6(unix.SYS_PTRACE, req, uintptr(pid), addr, data, 0, 0); e != 0 {
		return e
	}
	return nil
}
