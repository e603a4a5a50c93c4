package uml

import (
	"fmt"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/cpu"
	"golang.org/x/sys/unix"
)

// Debian's kernel (6.1) keeps each guest thread's floating-point registers
// in a buffer of a fixed size, the x87, SSE and AVX state (832 bytes), and
// moves them to and from the host with ptrace's PTRACE_GETREGSET and
// PTRACE_SETREGSET for NT_X86_XSTATE when the host answers the first. The
// host kernel accepts a SETREGSET only of its whole XSAVE size, which is
// larger wherever the CPU has AVX-512 or AMX (11,072 bytes on the Xeons with
// AMX that CI and development ran on in December 2026): every SETREGSET then
// fails with EFAULT, and the kernel panicked at its first process
// ("userspace - ptrace set fp regs failed, errno = 14"). Later kernels size
// the buffer from the host; Debian's 6.1 has no option for it.
//
// So the kernel starts under a seccomp filter that fails exactly those two
// requests (ENODEV: what a host without XSAVE answers). The kernel then
// takes the path it has for such hosts: PTRACE_GETFPREGS and
// PTRACE_SETFPREGS, the 512-byte FXSAVE area (x87, MXCSR and the 128-bit
// XMM registers), whatever the host's size.
//
// That path keeps nothing past the XMM registers. A program that loaded
// XMM1, the upper halves of YMM1 and ZMM1, ZMM17 and the mask register K2
// and read them back found all of them whole after a busy loop of 0.2 s,
// and all but XMM1 lost after 100 system calls or 64 page faults, inside
// the kernel so started on such a Xeon (on the host: all whole;
// testdata/vecregs.c, with the commands that run it). Compiled code keeps
// nothing in vector registers across a call, so system calls cost it
// nothing; a page fault, though, can come in the middle of any loop over
// memory: insmod, with glibc's AVX-512 functions, had every module refused
// ("Invalid parameters"), and none with them off. guestEnv keeps the
// guest's programs off those registers, in Go (GODEBUG) and glibc
// (GLIBC_TUNABLES): they run their SSE code instead.

// NT_X86_XSTATE is the ELF note type of the x86 XSAVE register set
// (linux/elf.h); x/sys/unix does not name it.
const ntX86Xstate = 0x202

// xstateFilter is the seccomp program: on x86-64, ptrace(PTRACE_GETREGSET
// or PTRACE_SETREGSET, pid, NT_X86_XSTATE, …) fails with ENODEV; every
// other system call passes. seccomp_data: nr at 0, arch at 4, args from
// 16, 8 bytes each (the low half first on x86-64).
func xstateFilter() ([]unix.SockFilter, error) {
	const (
		offNr, offArch, offArg0, offArg2 = 0, 4, 16, 32
	)
	allow := bpf.RetConstant{Val: unix.SECCOMP_RET_ALLOW}
	deny := bpf.RetConstant{Val: unix.SECCOMP_RET_ERRNO | uint32(unix.ENODEV)}
	raw, err := bpf.Assemble([]bpf.Instruction{
		bpf.LoadAbsolute{Off: offArch, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.AUDIT_ARCH_X86_64, SkipFalse: 7},
		bpf.LoadAbsolute{Off: offNr, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.SYS_PTRACE, SkipFalse: 5},
		bpf.LoadAbsolute{Off: offArg0, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.PTRACE_GETREGSET, SkipTrue: 1},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.PTRACE_SETREGSET, SkipFalse: 2},
		bpf.LoadAbsolute{Off: offArg2, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: ntX86Xstate, SkipTrue: 1},
		allow,
		deny,
	})
	if err != nil {
		return nil, err
	}
	prog := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		prog[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	return prog, nil
}

// denyXstate puts the calling thread, and the processes it starts from now
// on, under xstateFilter. The thread must be locked and must end with its
// goroutine: no other goroutine may run on it afterwards.
func denyXstate() error {
	prog, err := xstateFilter()
	if err != nil {
		return err
	}
	// A filter needs no_new_privs or CAP_SYS_ADMIN; setting it keeps the
	// call valid for both (and the kernel is no set-user-ID program).
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&fprog)), 0, 0); err != nil {
		return fmt.Errorf("seccomp filter for the kernel's ptrace of NT_X86_XSTATE: %w", err)
	}
	return nil
}

// guestEnv is the environment that keeps the guest's programs off the
// registers the kernel does not keep (see above). Go binaries built for
// GOAMD64=v3 or higher use AVX whatever it says; the project builds none.
var guestEnv = []string{
	"GODEBUG=" + goCPU(),
	"GLIBC_TUNABLES=glibc.cpu.hwcaps=-AVX,-AVX2,-AVX512F,-AVX512CD,-AVX512BW,-AVX512DQ,-AVX512VL",
}

// goCPU is the guest's GODEBUG for Go: every optional instruction set off
// (cpu.all=off), then on again those that keep to the general and the XMM
// registers, where the host has them. An allowlist, so that a vector
// extension that a later Go learns to use stays off as well. Both readers
// of these settings, the runtime and golang.org/x/sys/cpu, know every name
// here; an unknown name, or an "on" for what the CPU lacks, would have
// every Go program inside print a warning.
func goCPU() string {
	s := "cpu.all=off"
	for _, f := range []struct {
		name string
		has  bool
	}{
		{"sse3", cpu.X86.HasSSE3}, {"ssse3", cpu.X86.HasSSSE3}, {"sse41", cpu.X86.HasSSE41},
		{"sse42", cpu.X86.HasSSE42}, {"popcnt", cpu.X86.HasPOPCNT}, {"aes", cpu.X86.HasAES},
		{"pclmulqdq", cpu.X86.HasPCLMULQDQ}, {"erms", cpu.X86.HasERMS}, {"adx", cpu.X86.HasADX},
		{"bmi1", cpu.X86.HasBMI1}, {"bmi2", cpu.X86.HasBMI2},
	} {
		if f.has {
			s += ",cpu." + f.name + "=on"
		}
	}
	return s
}
