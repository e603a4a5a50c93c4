// Package uml runs a command inside a User-mode Linux kernel: Debian's
// user-mode-linux package, a Linux 6.1 kernel that runs as an ordinary
// process and has CAKE, fq_codel, netem, veth and IFB as modules. It gives
// the tests and the lab a kernel with CAKE on machines whose own kernel has
// none.
//
// The kernel boots with the host's file system as its read-only root, so
// every host binary (the test binaries, linklab, autoshape, iproute2) runs
// inside unchanged. An init script written by Run mounts proc, sysfs,
// devtmpfs and a tmpfs on /run (where `ip netns` keeps its names and TMPDIR
// points), mounts the run's directory read-write from the host at the same
// path, loads the modules asked for (with their dependencies), runs the
// command and writes its exit status into the run's directory, then halts.
// The command's standard output comes back through a file in that
// directory; its standard error and the kernel's console stream to
// Config.Stderr while it runs.
package uml

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Kernel is the User-mode Linux kernel's binary, as Debian installs it.
const Kernel = "/usr/bin/linux.uml"

// ModulesRoot holds the kernel's modules, one directory per kernel release.
const ModulesRoot = "/usr/lib/uml/modules"

// Packages are the Debian packages Install installs: the kernel and
// insmod.
var Packages = []string{"user-mode-linux", "kmod"}

// LabModules are the modules the tests and the lab need: IPv6, the shapers
// (CAKE, HTB, fq_codel, TBF), netem for the path's delay, the ingress
// redirect (ingress, u32, mirred), veth and IFB. xfrm_user is deliberately
// not among them: the kernel then has no XFRM netlink, as many OpenWrt
// images without IPsec.
var LabModules = []string{
	"ipv6", "sch_cake", "sch_fq_codel", "sch_htb", "sch_tbf", "sch_netem", "sch_ingress",
	"cls_u32", "cls_matchall", "act_mirred", "veth", "ifb",
}

// Config is one boot of the kernel.
type Config struct {
	// Modules are loaded, each after its dependencies, before the command
	// runs: names as in "sch_cake".
	Modules []string
	// Mem is the kernel's memory (default "1G").
	Mem string
	// Dir is a host directory that the command can write, at the same path
	// inside (created if missing). Empty: a temporary directory, removed
	// afterwards.
	Dir string
	// WorkDir is the command's working directory (default: this process's
	// working directory; the host's file system is read-only inside).
	WorkDir string
	// Env is added to the command's environment (PATH, HOME and TMPDIR are
	// set already; TMPDIR is on a tmpfs; on x86-64 so are GODEBUG and
	// GLIBC_TUNABLES, which a GODEBUG here adds to: xstate_amd64.go).
	Env []string
	// NetNS is the host network namespace the kernel starts in (empty: this
	// process's); Interfaces are host interfaces there, up, that the kernel
	// reaches as vec0, vec1, … in that order, over raw sockets: packets
	// that the host sends on them arrive on the vector interface inside, and
	// the reverse.
	NetNS      string
	Interfaces []string
	// Stdout receives the command's standard output after it ends; Stderr
	// the command's standard error and the kernel's console as they come.
	// Nil discards.
	Stdout, Stderr io.Writer
}

// Installed reports whether the kernel and its modules are present.
func Installed() error {
	if _, err := os.Stat(Kernel); err != nil {
		return fmt.Errorf("no User-mode Linux kernel (%s): install Debian's %s", Kernel, strings.Join(Packages, " "))
	}
	if _, err := modulesDir(); err != nil {
		return err
	}
	if _, err := exec.LookPath("insmod"); err != nil {
		return errors.New("no insmod: install Debian's kmod")
	}
	return nil
}

// Install installs the kernel with apt-get when it is missing (root only).
func Install(stderr io.Writer) error {
	missing := Installed()
	if missing == nil {
		return nil
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w (needs root to install)", missing)
	}
	for _, args := range [][]string{{"update", "-qq"}, append([]string{"install", "-y", "-qq"}, Packages...)} {
		cmd := exec.Command("apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		cmd.Stdout, cmd.Stderr = stderr, stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("apt-get %s: %w", strings.Join(args, " "), err)
		}
	}
	return Installed()
}

// modulesDir is the one release directory under ModulesRoot.
func modulesDir() (string, error) {
	ents, err := os.ReadDir(ModulesRoot)
	if err != nil {
		return "", fmt.Errorf("no User-mode Linux modules: %w", err)
	}
	var dirs []string
	for _, e := range ents {
		if e.IsDir() {
			dirs = append(dirs, filepath.Join(ModulesRoot, e.Name()))
		}
	}
	if len(dirs) != 1 {
		return "", fmt.Errorf("want one kernel release under %s, found %d", ModulesRoot, len(dirs))
	}
	return dirs[0], nil
}

// ModulePaths resolves module names to the files to insmod, dependencies
// first and each once, from the release's modules.dep.
func ModulePaths(dir string, names []string) ([]string, error) {
	f, err := os.Open(filepath.Join(dir, "modules.dep"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	deps, err := parseModulesDep(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.Name(), err)
	}
	byName := map[string]string{}
	for path := range deps {
		byName[moduleName(path)] = path
	}
	var out []string
	seen := map[string]bool{}
	var add func(path string)
	add = func(path string) {
		if seen[path] {
			return
		}
		seen[path] = true
		for _, d := range deps[path] {
			add(d)
		}
		out = append(out, filepath.Join(dir, path))
	}
	for _, n := range names {
		path, ok := byName[strings.ReplaceAll(n, "-", "_")]
		if !ok {
			return nil, fmt.Errorf("no module %q in %s", n, dir)
		}
		add(path)
	}
	return out, nil
}

// parseModulesDep reads modules.dep: "path: dep dep ..." per line.
func parseModulesDep(r io.Reader) (map[string][]string, error) {
	deps := map[string][]string{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		path, rest, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("line %d: no colon in %q", n, line)
		}
		deps[path] = strings.Fields(rest)
	}
	return deps, sc.Err()
}

// moduleName is a module's name from its path: "kernel/net/sched/sch_cake.ko"
// is sch_cake.
func moduleName(path string) string {
	base := filepath.Base(path)
	if i := strings.Index(base, ".ko"); i >= 0 {
		base = base[:i]
	}
	return strings.ReplaceAll(base, "-", "_")
}

// quote quotes s for sh.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// Files in the run's directory.
const (
	statusFile = "uml-status" // the command's exit status
	stdoutFile = "uml-stdout" // its standard output
	initFile   = "uml-init"   // the init script
)

// initScript is PID 1 inside the kernel.
func initScript(cfg Config, dir string, modules []string, argv []string) string {
	var b strings.Builder
	b.WriteString("#!/bin/sh\n")
	b.WriteString("mount -t proc proc /proc\nmount -t sysfs sys /sys\nmount -t devtmpfs dev /dev 2>/dev/null\n")
	// What udev would make: bash's process substitution needs /dev/fd.
	b.WriteString("[ -e /dev/fd ] || ln -s /proc/self/fd /dev/fd\n")
	b.WriteString("mount -t tmpfs -o size=256m tmpfs /run\nmkdir -p /run/tmp /run/netns\n")
	fmt.Fprintf(&b, "mount -t hostfs none %s -o %s || { echo 'uml: cannot mount the run directory' >&2; halt -f; }\n", quote(dir), quote(dir))
	for _, m := range modules {
		fmt.Fprintf(&b, "insmod %s || { echo %s > %s; halt -f; }\n", quote(m), quote("insmod failed: "+filepath.Base(m)), quote(filepath.Join(dir, statusFile)))
	}
	b.WriteString("ip link set lo up\n")
	b.WriteString("export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/usr/local/go/bin HOME=/root TMPDIR=/run/tmp\n")
	for _, e := range callerEnv(cfg.Env) {
		fmt.Fprintf(&b, "export %s\n", quote(e))
	}
	fmt.Fprintf(&b, "cd %s || { echo %s > %s; halt -f; }\n", quote(cfg.WorkDir), quote("no working directory "+cfg.WorkDir), quote(filepath.Join(dir, statusFile)))
	var q []string
	for _, a := range argv {
		q = append(q, quote(a))
	}
	fmt.Fprintf(&b, "%s > %s\n", strings.Join(q, " "), quote(filepath.Join(dir, stdoutFile)))
	fmt.Fprintf(&b, "echo $? > %s\nsync\nhalt -f\n", quote(filepath.Join(dir, statusFile)))
	return b.String()
}

// callerEnv is Config.Env as the script exports it: a GODEBUG there carries
// guestEnv's first, which it would otherwise replace (init has guestEnv from
// the kernel's command line; Go reads its settings left to right, the last
// winning).
func callerEnv(env []string) []string {
	ours := slices.IndexFunc(guestEnv, func(g string) bool { return strings.HasPrefix(g, "GODEBUG=") })
	if ours < 0 {
		return env
	}
	out := slices.Clone(env)
	for i, e := range out {
		if v, ok := strings.CutPrefix(e, "GODEBUG="); ok {
			out[i] = guestEnv[ours] + "," + v
		}
	}
	return out
}

// kernelArgs is the kernel's command line.
func kernelArgs(cfg Config, script string) []string {
	args := []string{"mem=" + cfg.Mem, "rootfstype=hostfs", "rootflags=/", "ro", "quiet",
		"init=" + script, "con=null", "con0=fd:0,fd:1"}
	// The kernel gives init the parameters it does not know, name=value,
	// as its environment: init and all it starts run with guestEnv.
	args = append(args, guestEnv...)
	for i, ifc := range cfg.Interfaces {
		args = append(args, fmt.Sprintf("vec%d:transport=raw,ifname=%s,depth=128,mac=%s", i, ifc, vectorMAC(i)))
	}
	return args
}

// vectorMAC is the MAC address of the kernel's vecN: the same at every
// boot, so that the host's neighbour entries for the addresses behind it
// stay right when a kernel takes over from the last (with a random one
// per boot, as the driver gives by default, the hosts sent the first
// seconds of a new kernel's traffic to the last one's address, and it was
// lost). Locally administered, unicast.
func vectorMAC(n int) string { return fmt.Sprintf("02:75:6d:6c:00:%02x", n) }

// Run boots the kernel, runs argv inside and returns its exit status. The
// error is non-nil only when the kernel could not run the command to its
// end (no kernel, a module that would not load, ctx ended).
func Run(ctx context.Context, cfg Config, argv ...string) (int, error) {
	if len(argv) == 0 {
		return -1, errors.New("no command to run")
	}
	if err := Installed(); err != nil {
		return -1, err
	}
	mdir, err := modulesDir()
	if err != nil {
		return -1, err
	}
	modules, err := ModulePaths(mdir, cfg.Modules)
	if err != nil {
		return -1, err
	}
	if cfg.Mem == "" {
		cfg.Mem = "1G"
	}
	if cfg.WorkDir == "" {
		if cfg.WorkDir, err = os.Getwd(); err != nil {
			return -1, err
		}
	}
	dir := cfg.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "uml-"); err != nil {
			return -1, err
		}
		defer os.RemoveAll(dir)
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return -1, err
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return -1, err
	}
	for _, f := range []string{statusFile, stdoutFile} {
		os.Remove(filepath.Join(dir, f))
	}
	script := filepath.Join(dir, initFile)
	if err := os.WriteFile(script, []byte(initScript(cfg, dir, modules, argv)), 0o755); err != nil {
		return -1, err
	}

	stderr := cfg.Stderr
	if stderr == nil {
		stderr = io.Discard
	}
	// UML keeps its memory in a file under TMPDIR; the host's /tmp is the
	// usual place.
	cmd := exec.Command(Kernel, kernelArgs(cfg, script)...)
	if cfg.NetNS != "" {
		// ip netns exec enters the namespace and execs the kernel: the
		// same process.
		cmd = exec.Command("ip", append([]string{"netns", "exec", cfg.NetNS, Kernel}, kernelArgs(cfg, script)...)...)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, stderr, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := startKernel(cmd); err != nil {
		return -1, fmt.Errorf("failed to start %s: %w", Kernel, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// How long the kernel waited for its host CPU: what the host's other
	// work added to this run's delays.
	watched := watchCPU(cmd.Process.Pid)
	select {
	case err = <-done:
	case <-ctx.Done():
		// The kernel's helper processes share its process group.
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		watched()
		return -1, fmt.Errorf("the User-mode Linux kernel was stopped: %w", ctx.Err())
	}
	fmt.Fprintf(stderr, "uml: %v\n", watched())
	// A halted kernel leaves helpers behind now and then.
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if cfg.Stdout != nil {
		if f, ferr := os.Open(filepath.Join(dir, stdoutFile)); ferr == nil {
			io.Copy(cfg.Stdout, f)
			f.Close()
		}
	}
	b, serr := os.ReadFile(filepath.Join(dir, statusFile))
	if serr != nil {
		return -1, fmt.Errorf("the User-mode Linux kernel ended (%v) without the command's exit status", err)
	}
	code, perr := strconv.Atoi(strings.TrimSpace(string(b)))
	if perr != nil {
		return -1, fmt.Errorf("inside the User-mode Linux kernel: %s", strings.TrimSpace(string(b)))
	}
	return code, nil
}

// Timeout is a generous bound for one boot that runs a test binary.
const Timeout = 20 * time.Minute

// startKernel starts cmd, the kernel, on one of the host's CPUs, the last
// this process may use, and under xstateFilter (xstate_amd64.go).
//
// The CPU: the kernel and the processes it forks for the guest's own
// (which inherit it) then hand the guest's one CPU to each other on one
// host CPU. Left to the host's scheduler, they ran on two CPUs of a 2-core
// machine in some boots, and there each switch between them cost so much
// more that the guest's CPU was 68-96 % busy with a static shaper at
// 10 Mbit/s, against 9-41 % in the others (5 boots of 16), and the added
// delay's p50 was 6.6-86 ms instead of 2-3 ms; pinned, 16 boots of 16 were
// 8-36 % busy (docs/sim-vs-lab.md, "The split lab"). Where the affinity
// cannot be read or set, cmd starts on any.
//
// Both are the state of a thread of its own, which the child inherits; that
// thread ends with its goroutine (it stays locked), and the runtime makes
// new threads from its template thread, not a locked one, so no other
// goroutine runs pinned or filtered.
func startKernel(cmd *exec.Cmd) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with this goroutine
		var set unix.CPUSet
		if unix.SchedGetaffinity(0, &set) == nil {
			if last := lastCPU(set); last >= 0 {
				var one unix.CPUSet
				one.Set(last)
				unix.SchedSetaffinity(0, &one)
			}
		}
		if err := denyXstate(); err != nil {
			errc <- err
			return
		}
		errc <- cmd.Start()
	}()
	return <-errc
}

// lastCPU is the highest CPU in set, -1 when it is empty.
func lastCPU(set unix.CPUSet) int {
	last := -1
	for i, n := 0, set.Count(); n > 0; i++ {
		if set.IsSet(i) {
			last, n = i, n-1
		}
	}
	return last
}
