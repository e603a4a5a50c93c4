package uml

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

func TestModulePaths(t *testing.T) {
	dir := t.TempDir()
	dep := "kernel/net/sched/sch_cake.ko:\n" +
		"kernel/net/xfrm/xfrm_user.ko: kernel/net/xfrm/xfrm_algo.ko\n" +
		"kernel/net/xfrm/xfrm_algo.ko: kernel/crypto/a.ko\n" +
		"kernel/crypto/a.ko:\n" +
		"kernel/drivers/net/ifb-x.ko.xz:\n"
	if err := os.WriteFile(filepath.Join(dir, "modules.dep"), []byte(dep), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		names   []string
		want    []string
		wantErr string
	}{
		{names: []string{"sch_cake"}, want: []string{"kernel/net/sched/sch_cake.ko"}},
		{names: []string{"xfrm_user", "xfrm_algo", "sch_cake"},
			want: []string{"kernel/crypto/a.ko", "kernel/net/xfrm/xfrm_algo.ko", "kernel/net/xfrm/xfrm_user.ko", "kernel/net/sched/sch_cake.ko"}},
		{names: []string{"ifb_x"}, want: []string{"kernel/drivers/net/ifb-x.ko.xz"}},
		{names: []string{"sch-cake"}, want: []string{"kernel/net/sched/sch_cake.ko"}},
		{names: []string{"sch_nope"}, wantErr: `no module "sch_nope"`},
	} {
		t.Run(strings.Join(tc.names, ","), func(t *testing.T) {
			got, err := ModulePaths(dir, tc.names)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, w := range tc.want {
				want = append(want, filepath.Join(dir, w))
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

func TestInitScriptQuotes(t *testing.T) {
	s := initScript(Config{WorkDir: "/w d", Env: []string{"A=it's"}}, "/r", []string{"/m/x.ko"}, []string{"sh", "-c", "echo 'hi' $X"})
	for _, want := range []string{
		`insmod '/m/x.ko'`,
		`ln -s /proc/self/fd /dev/fd`,
		`export 'A=it'\''s'`,
		`cd '/w d'`,
		`'sh' '-c' 'echo '\''hi'\'' $X' > '/r/uml-stdout'`,
		`echo $? > '/r/uml-status'`,
	} {
		if !strings.Contains(s, want) {
			t.Errorf("init script lacks %q:\n%s", want, s)
		}
	}
}

// TestGuestEnv: init, and so the command, gets guestEnv from the kernel's
// command line; a caller's GODEBUG adds to guestEnv's, its other variables
// come as they are.
func TestGuestEnv(t *testing.T) {
	got := callerEnv([]string{"A=1", "GODEBUG=x=1"})
	want := []string{"A=1", "GODEBUG=x=1"}
	if i := slices.IndexFunc(guestEnv, func(e string) bool { return strings.HasPrefix(e, "GODEBUG=") }); i >= 0 {
		want[1] = guestEnv[i] + ",x=1"
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("callerEnv (-want +got)\n%s", diff)
	}
	args := kernelArgs(Config{Mem: "1G"}, "/r/uml-init")
	for _, e := range guestEnv {
		if !slices.Contains(args, e) {
			t.Errorf("kernel args lack %q: %q", e, args)
		}
	}
	if runtime.GOARCH != "amd64" {
		return
	}
	if !slices.ContainsFunc(guestEnv, func(e string) bool { return strings.HasPrefix(e, "GLIBC_TUNABLES=glibc.cpu.hwcaps=-AVX,") }) {
		t.Errorf("guestEnv on x86-64 = %q, want glibc's AVX off", guestEnv)
	}
	// Go's: everything off, then back on only what keeps to the XMM
	// registers.
	godebug := guestEnv[slices.IndexFunc(guestEnv, func(e string) bool { return strings.HasPrefix(e, "GODEBUG=") })]
	settings := strings.Split(strings.TrimPrefix(godebug, "GODEBUG="), ",")
	if settings[0] != "cpu.all=off" {
		t.Errorf("GODEBUG = %q, want cpu.all=off first", godebug)
	}
	for _, o := range settings[1:] {
		if !strings.HasSuffix(o, "=on") || strings.Contains(o, "avx") || strings.Contains(o, "fma") || strings.Contains(o, "vpclmul") {
			t.Errorf("GODEBUG = %q: %q turns on more than XMM's instructions", godebug, o)
		}
	}
}

// TestKernelArgsInterfaces: each host interface becomes a vector interface
// over a raw socket, in order, with a MAC address of its own that is the
// same at every boot.
func TestKernelArgsInterfaces(t *testing.T) {
	args := kernelArgs(Config{Mem: "1G", Interfaces: []string{"vcli", "vsrv"}}, "/r/uml-init")
	want := []string{"vec0:transport=raw,ifname=vcli,depth=128,mac=02:75:6d:6c:00:00", "vec1:transport=raw,ifname=vsrv,depth=128,mac=02:75:6d:6c:00:01"}
	if got := args[len(args)-2:]; !slices.Equal(got, want) {
		t.Errorf("kernel args end %q, want %q", got, want)
	}
	if args := kernelArgs(Config{Mem: "1G"}, "/r/uml-init"); slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "vec") }) {
		t.Errorf("kernel args without interfaces: %q", args)
	}
}

// TestLastCPU: the highest CPU of a set, -1 for none.
func TestLastCPU(t *testing.T) {
	var set unix.CPUSet
	if got := lastCPU(set); got != -1 {
		t.Errorf("lastCPU(empty) = %d, want -1", got)
	}
	set.Set(0)
	set.Set(3)
	set.Set(70)
	if got := lastCPU(set); got != 70 {
		t.Errorf("lastCPU({0, 3, 70}) = %d, want 70", got)
	}
}

// TestStartKernel: the child runs on one CPU, the last this process may
// use, under a seccomp filter (on x86-64: xstate_amd64.go), and this process
// keeps the CPUs it had and runs unfiltered.
func TestStartKernel(t *testing.T) {
	var before unix.CPUSet
	if err := unix.SchedGetaffinity(0, &before); err != nil {
		t.Skipf("skipping: the CPU affinity cannot be read here: %v", err)
	}
	last := lastCPU(before)
	cmd := exec.Command("sh", "-c", "grep -E '^(Cpus_allowed_list|Seccomp):' /proc/self/status")
	var out strings.Builder
	cmd.Stdout = &out
	if err := startKernel(cmd); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	seccomp := 0
	if runtime.GOARCH == "amd64" {
		seccomp = 2 // SECCOMP_MODE_FILTER
	}
	if want := fmt.Sprintf("Seccomp:\t%d\nCpus_allowed_list:\t%d\n", seccomp, last); out.String() != want {
		t.Errorf("the child ran with %q, want %q", out.String(), want)
	}
	var after unix.CPUSet
	if err := unix.SchedGetaffinity(0, &after); err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Errorf("this thread's CPUs changed: %d before, %d after", before.Count(), after.Count())
	}
	if b, err := os.ReadFile("/proc/thread-self/status"); err == nil && !strings.Contains(string(b), "Seccomp:\t0\n") {
		t.Errorf("this thread runs filtered:\n%s", b)
	}
}
