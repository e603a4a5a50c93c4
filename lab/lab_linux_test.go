//go:build linux

package lab

import (
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/autoshape/autoshape/sim"
)

func buildLab(t *testing.T) *Topology {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: builds network namespaces")
	}
	release, err := Exclusive()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	top, err := Build("astl-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := top.Close(); err != nil {
			t.Error(err)
		}
	})
	return top
}

// TestBuildRemovesStaleAndCleansUp: a namespace a crashed run left under
// the prefix is removed at the start, and Close leaves none behind.
func TestBuildRemovesStaleAndCleansUp(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: builds network namespaces")
	}
	if out, err := exec.Command("ip", "netns", "add", "astl-stale").CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	top, err := Build("astl-")
	if err != nil {
		exec.Command("ip", "netns", "del", "astl-stale").Run()
		t.Fatal(err)
	}
	if exists("astl-stale") {
		t.Error("the stale namespace is still there")
	}
	if err := top.Close(); err != nil {
		t.Fatal(err)
	}
	out, _ := exec.Command("ip", "netns", "list").Output()
	if strings.Contains(string(out), "astl-") {
		t.Errorf("namespaces left behind:\n%s", out)
	}
	if _, err := Build("no/slash"); err == nil {
		t.Error("a prefix with a slash was accepted")
	}
}

// download moves bytes from srv to cli over TCP for d and returns the
// goodput in bit/s measured at cli after the first half second.
func download(t *testing.T, top *Topology, d time.Duration) float64 {
	t.Helper()
	var ln net.Listener
	if err := InNS(top.Srv, func() (err error) {
		ln, err = net.Listen("tcp", top.SrvAddr.String()+":0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 64<<10)
		c.SetWriteDeadline(time.Now().Add(d + 2*time.Second))
		for {
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	}()
	var conn net.Conn
	if err := InNS(top.Cli, func() (err error) {
		conn, err = net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, 64<<10)
	var n int64
	start := time.Now()
	var from time.Time
	for {
		k, err := conn.Read(buf)
		if time.Since(start) >= 500*time.Millisecond {
			if from.IsZero() {
				from = time.Now()
			}
			n += int64(k)
		}
		if err != nil {
			if err != io.EOF && !os.IsTimeout(err) {
				t.Fatal(err)
			}
			break
		}
	}
	return float64(n) * 8 / time.Since(from).Seconds()
}

// TestLabCarriesTrafficThroughTheBottleneck: TCP from srv to cli goes
// through rtr and isp, at the download bottleneck's rate; after a rate
// change, at the new rate.
func TestLabCarriesTrafficThroughTheBottleneck(t *testing.T) {
	top := buildLab(t)
	capacity, err := sim.ParseSchedule("8mbit")
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewBottleneck(top.ISP, ISPDown, capacity, BottleneckOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if g := download(t, top, 3*time.Second); g < 6e6 || g > 8.5e6 {
		t.Errorf("goodput through an 8 Mbit/s bottleneck: %.2f Mbit/s", g/1e6)
	}
	if err := b.SetRate(3e6); err != nil {
		t.Fatal(err)
	}
	if g := download(t, top, 3*time.Second); g < 2e6 || g > 3.3e6 {
		t.Errorf("goodput through a 3 Mbit/s bottleneck: %.2f Mbit/s", g/1e6)
	}
	out, _ := exec.Command("tc", "-n", top.ISP, "-s", "qdisc", "show", "dev", ISPDown).CombinedOutput()
	if !strings.Contains(string(out), "bfifo") || !strings.Contains(string(out), "limit 500000b") {
		t.Errorf("the bottleneck's queue is not a 500 ms bfifo at 8 Mbit/s:\n%s", out)
	}
}

// TestBottleneckFollowsSchedule: the rate steps with the schedule, and the
// kernel holds it.
func TestBottleneckFollowsSchedule(t *testing.T) {
	top := buildLab(t)
	capacity, err := sim.ParseSchedule("8mbit@0s,2mbit@500ms")
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewBottleneck(top.ISP, ISPDown, capacity, BottleneckOptions{ATM: true, Overhead: 44})
	if err != nil {
		t.Fatal(err)
	}
	if b.Rate() != 8e6 {
		t.Errorf("starting rate %d, want 8 Mbit/s", b.Rate())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 900*time.Millisecond)
	defer cancel()
	if err := b.Follow(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	if b.Rate() != 2e6 {
		t.Errorf("rate after the step %d, want 2 Mbit/s", b.Rate())
	}
	out, _ := exec.Command("tc", "-n", top.ISP, "class", "show", "dev", ISPDown).CombinedOutput()
	if !strings.Contains(string(out), "rate 2Mbit") || !strings.Contains(string(out), "overhead 44") || !strings.Contains(string(out), "linklayer atm") {
		t.Errorf("the kernel holds:\n%s", out)
	}
}

// TestLoadBloatsAndProbeSeesIt: idle, the independent probe sees well under
// a millisecond each way; under four CUBIC downloads into a 500 ms buffer,
// the download delay grows to hundreds of milliseconds while the upload's
// stays small, and the receivers count the bottleneck's rate.
func TestLoadBloatsAndProbeSeesIt(t *testing.T) {
	top := buildLab(t)
	down, _ := sim.ParseSchedule("8mbit")
	up, _ := sim.ParseSchedule("4mbit")
	if _, err := NewBottleneck(top.ISP, ISPDown, down, BottleneckOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := NewBottleneck(top.ISP, ISPUp, up, BottleneckOptions{}); err != nil {
		t.Fatal(err)
	}
	p, err := StartProbe(top)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	idle := len(p.Samples())
	load, err := StartLoad(top, true, 4, "")
	if err != nil {
		p.Stop()
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	from := load.Received()
	time.Sleep(3 * time.Second)
	goodput := float64(load.Received()-from) * 8 / 3
	if err := load.Stop(); err != nil {
		t.Errorf("load: %v", err)
	}
	if err := p.Stop(); err != nil {
		t.Errorf("probe: %v", err)
	}
	s := p.Samples()
	if idle < 15 || len(s) < 80 {
		t.Fatalf("%d probe samples idle, %d in all: want about 20 a second", idle, len(s))
	}
	med := func(s []ProbeSample, down bool) time.Duration {
		var v []time.Duration
		for _, x := range s {
			if !x.Lost {
				v = append(v, map[bool]time.Duration{true: x.Down, false: x.Up}[down])
			}
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	if d := med(s[:idle], true); d > 5*time.Millisecond {
		t.Errorf("idle download delay %v", d)
	}
	loaded := s[idle+30:]
	if d := med(loaded, true); d < 100*time.Millisecond {
		t.Errorf("download delay under load %v, want hundreds of ms", d)
	}
	if d := med(loaded, false); d > 10*time.Millisecond {
		t.Errorf("upload delay while only downloading %v", d)
	}
	if goodput < 6.5e6 || goodput > 8.5e6 {
		t.Errorf("download goodput %.2f Mbit/s through an 8 Mbit/s bottleneck", goodput/1e6)
	}
	t.Logf("goodput %.2f Mbit/s, loaded delay down %v up %v", goodput/1e6, med(loaded, true), med(loaded, false))
}
