// Package lab is the namespace testbed: real packets through the real
// kernel over an emulated bloated link. Four network namespaces in a row,
//
//	cli ── rtr ── isp ── srv
//
// cli is the home network's host, rtr the router autoshape runs on (its WAN
// interface faces isp), isp holds the bottleneck of each direction (HTB with
// a deep bfifo on its egress towards rtr for the download, towards srv for
// the upload: a forwarding hop, so that TCP small queues of the senders do
// not keep the queue short as they would on a sender's own interface), and
// srv holds the reflector addresses and the load endpoints.
//
// A run (Run) puts a scheme on rtr's WAN: unshaped; static:FRACTION (HTB at
// a fraction of the mean capacity, through autoshape's actuator);
// autoshape[:CONFIG] (`autoshape run` in rtr, its rates from its decision
// file); classic (the same daemon with policy = "classic"); or exec:COMMAND,
// any other controller for a side-by-side comparison. For exec the lab sets
// HTB up as for static, with the line's framing, at the base rates the daemon
// would start from, then runs `sh -c COMMAND` in rtr in a process group of
// its own, its output in command.log in its directory (kept with
// LINKLAB_KEEP=1), with this environment:
//
//	LINKLAB_DOWN_IFACE   the download shaper's interface (the IFB, ifb4wan0)
//	LINKLAB_UP_IFACE     the upload shaper's interface (rtr's WAN, wan0)
//	LINKLAB_REFLECTORS   srv's reflector addresses, space separated
//	LINKLAB_DOWN_MIN_KBIT, LINKLAB_DOWN_BASE_KBIT, LINKLAB_DOWN_MAX_KBIT
//	LINKLAB_UP_MIN_KBIT, LINKLAB_UP_BASE_KBIT, LINKLAB_UP_MAX_KBIT
//	                     the bounds in kbit/s (the shaping starts at base)
//	LINKLAB_BUDGET_MS    the run's latency budget in ms
//	LINKLAB_DIR          the command's working directory
//
// Its rates are read from each shaper (the root CAKE qdisc, or the HTB class
// under the root) every 100 ms. A
// command that exits with an error during the run fails the run; at the end
// its process group gets SIGTERM, SIGKILL 5 s later, and the shaping is
// removed.
//
// The lab sets its namespaces up with iproute2 (it is a test instrument;
// the product itself never runs ip or tc) and needs root.
package lab

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"time"
)

// DefaultPrefix starts the names of the lab's namespaces.
const DefaultPrefix = "aslab-"

// Interface names inside the namespaces.
const (
	CliLAN  = "lan0" // cli's side of cli–rtr
	RtrLAN  = "lan1" // rtr's side of cli–rtr
	RtrWAN  = "wan0" // rtr's WAN: what autoshape shapes
	ISPDown = "dn0"  // isp's side of rtr–isp: the download bottleneck's egress
	ISPUp   = "up0"  // isp's side of isp–srv: the upload bottleneck's egress
	SrvNet  = "net0" // srv's side of isp–srv
)

// Reflectors is how many reflector addresses srv holds.
const Reflectors = 6

// A Topology is a built lab: its namespaces and addresses.
type Topology struct {
	Prefix             string
	Cli, Rtr, ISP, Srv string // namespace names
	// Wire is a split lab's host namespace that joins cli and srv to the
	// kernel that holds rtr and isp (BuildHosts); empty otherwise.
	Wire string

	CliAddr, RtrLANAddr netip.Addr
	RtrWANAddr, ISPAddr netip.Addr
	SrvAddr             netip.Addr // srv's address for the load endpoints
	ReflectorAddrs      []netip.Addr
}

// Build creates the namespaces under prefix (removing any a crashed run
// left with the same prefix), wires them and turns forwarding on in rtr and
// isp. On error nothing is left behind.
func Build(prefix string) (*Topology, error) {
	return build(prefix, func(t *Topology) error {
		for _, ns := range t.Namespaces() {
			if err := addNS(ns); err != nil {
				return err
			}
		}
		steps := [][]string{
			{"-n", t.Cli, "link", "add", CliLAN, "type", "veth", "peer", "name", RtrLAN, "netns", t.Rtr},
			{"-n", t.Rtr, "link", "add", RtrWAN, "type", "veth", "peer", "name", ISPDown, "netns", t.ISP},
			{"-n", t.ISP, "link", "add", ISPUp, "type", "veth", "peer", "name", SrvNet, "netns", t.Srv},
			{"-n", t.Cli, "addr", "add", "10.91.1.2/24", "dev", CliLAN},
			{"-n", t.Rtr, "addr", "add", "10.91.1.1/24", "dev", RtrLAN},
			{"-n", t.Rtr, "addr", "add", "10.91.2.1/24", "dev", RtrWAN},
			{"-n", t.ISP, "addr", "add", "10.91.2.2/24", "dev", ISPDown},
			{"-n", t.ISP, "addr", "add", "10.91.3.1/24", "dev", ISPUp},
			{"-n", t.Srv, "addr", "add", "10.91.3.2/24", "dev", SrvNet},
		}
		steps = append(steps, t.reflectorSteps()...)
		steps = append(steps, upSteps([][2]string{{t.Cli, CliLAN}, {t.Rtr, RtrLAN}, {t.Rtr, RtrWAN}, {t.ISP, ISPDown}, {t.ISP, ISPUp}, {t.Srv, SrvNet}})...)
		steps = append(steps,
			[]string{"-n", t.Cli, "route", "add", "default", "via", "10.91.1.1"},
			[]string{"-n", t.Rtr, "route", "add", "default", "via", "10.91.2.2"},
			[]string{"-n", t.ISP, "route", "add", "10.91.1.0/24", "via", "10.91.2.1"},
			[]string{"-n", t.ISP, "route", "add", "10.91.4.0/24", "via", "10.91.3.2"},
			[]string{"-n", t.Srv, "route", "add", "default", "via", "10.91.3.1"},
		)
		if err := ipSteps(steps); err != nil {
			return err
		}
		return t.forward()
	})
}

// build names a lab under prefix (newTopology) and wires it with wire; on
// error it removes whatever wire made.
func build(prefix string, wire func(*Topology) error) (*Topology, error) {
	t, err := newTopology(prefix)
	if err != nil {
		return nil, err
	}
	if err := wire(t); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

// newTopology checks prefix, removes what a crashed run left under it and
// names the lab's namespaces and addresses; it creates nothing.
func newTopology(prefix string) (*Topology, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("the lab needs root: it creates network namespaces")
	}
	if err := CheckPrefix(prefix); err != nil {
		return nil, err
	}
	if _, err := RemoveStale(prefix); err != nil {
		return nil, err
	}
	t := &Topology{Prefix: prefix, Cli: prefix + "cli", Rtr: prefix + "rtr", ISP: prefix + "isp", Srv: prefix + "srv",
		CliAddr: netip.MustParseAddr("10.91.1.2"), RtrLANAddr: netip.MustParseAddr("10.91.1.1"),
		RtrWANAddr: netip.MustParseAddr("10.91.2.1"), ISPAddr: netip.MustParseAddr("10.91.2.2"),
		SrvAddr: netip.MustParseAddr("10.91.3.2")}
	for i := range Reflectors {
		t.ReflectorAddrs = append(t.ReflectorAddrs, netip.AddrFrom4([4]byte{10, 91, 4, byte(i + 1)}))
	}
	return t, nil
}

// addNS creates a namespace with its loopback up.
func addNS(ns string) error {
	if err := ipRun("netns", "add", ns); err != nil {
		return err
	}
	return ipRun("-n", ns, "link", "set", "lo", "up")
}

// reflectorSteps put the reflector addresses on srv's loopback.
func (t *Topology) reflectorSteps() [][]string {
	var steps [][]string
	for _, a := range t.ReflectorAddrs {
		steps = append(steps, []string{"-n", t.Srv, "addr", "add", a.String() + "/32", "dev", "lo"})
	}
	return steps
}

// upSteps bring each (namespace, interface) up without super-packets: a
// short shaper queue would drop 64 KB at a time (veth does no GRO unless
// asked to).
func upSteps(links [][2]string) [][]string {
	var steps [][]string
	for _, l := range links {
		steps = append(steps, []string{"-n", l[0], "link", "set", "dev", l[1], "gso_max_segs", "1", "up"})
	}
	return steps
}

// ipSteps runs ip with each step's arguments, up to the first failure.
func ipSteps(steps [][]string) error {
	for _, s := range steps {
		if err := ipRun(s...); err != nil {
			return err
		}
	}
	return nil
}

// forward turns forwarding on in rtr and isp.
func (t *Topology) forward() error {
	for _, ns := range []string{t.Rtr, t.ISP} {
		if err := nsRun(ns, "sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward"); err != nil {
			return err
		}
	}
	return nil
}

// CheckPrefix reports whether prefix can start the names of a lab's
// namespaces: 1 to 8 characters, no spaces or slashes.
func CheckPrefix(prefix string) error {
	if prefix == "" || strings.ContainsAny(prefix, "/ \t\n") || len(prefix) > 8 {
		return fmt.Errorf("lab prefix %q: want 1 to 8 characters, no spaces or slashes", prefix)
	}
	return nil
}

// Namespaces lists the lab's namespaces.
func (t *Topology) Namespaces() []string {
	if t.Wire != "" {
		return []string{t.Cli, t.Srv, t.Wire}
	}
	return []string{t.Cli, t.Rtr, t.ISP, t.Srv}
}

// Close deletes the namespaces (and with them every veth and qdisc in them).
func (t *Topology) Close() error {
	var errs []error
	for _, ns := range t.Namespaces() {
		if exists(ns) {
			if err := ipRun("netns", "del", ns); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// RemoveStale deletes every namespace whose name starts with prefix (what a
// crashed run left) and returns their names.
func RemoveStale(prefix string) ([]string, error) {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return nil, fmt.Errorf("ip netns list: %w", err)
	}
	var removed []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], prefix) {
			continue
		}
		if err := ipRun("netns", "del", f[0]); err != nil {
			return removed, err
		}
		removed = append(removed, f[0])
	}
	return removed, nil
}

func exists(ns string) bool {
	_, err := os.Stat("/run/netns/" + ns)
	return err == nil
}

func ipRun(args ...string) error { return run("ip", args...) }

// nsRun runs a command inside the namespace ns.
func nsRun(ns, name string, args ...string) error {
	return run("ip", append([]string{"netns", "exec", ns, name}, args...)...)
}

func run(name string, args ...string) error {
	var stderr bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// srvDelayIFB is the IFB in srv that carries its ingress through netem.
const srvDelayIFB = "dly0"

// netemLimit is netem's queue in packets: the delay's packets in flight at
// 1 Gbit/s and 100 ms, so that netem itself never drops.
const netemLimit = 10000

// SetRTT gives the path between rtr and srv a base round trip with netem,
// half each way: on srv's egress for the download, and for the upload on an
// IFB that takes srv's ingress. Both sit on srv's side of the bottlenecks,
// as the internet's delay sits beyond an access line, and every packet
// between rtr or cli and srv (the load, the reflectors' answers, the
// independent probe) crosses them. The host kernel has no netem: this needs
// the User-mode Linux kernel, with the whole lab inside it (the split lab,
// linklab run --kernel uml, puts the delay in isp instead: BuildRouter).
func (t *Topology) SetRTT(rtt time.Duration) error {
	if rtt <= 0 {
		return nil
	}
	half := fmt.Sprintf("%dus", (rtt / 2).Microseconds())
	if err := netemStep(run("tc", "-n", t.Srv, "qdisc", "replace", "dev", SrvNet, "root", "netem", "delay", half, "limit", fmt.Sprint(netemLimit))); err != nil {
		return err
	}
	return ingressDelay(t.Srv, SrvNet, srvDelayIFB, half)
}

// ingressDelay delays what arrives on dev in ns by d (netem's form) on an
// IFB named ifb that takes dev's ingress.
func ingressDelay(ns, dev, ifb, d string) error {
	steps := [][]string{
		{"ip", "-n", ns, "link", "add", ifb, "type", "ifb"},
		{"ip", "-n", ns, "link", "set", "dev", ifb, "up"},
		{"tc", "-n", ns, "qdisc", "replace", "dev", ifb, "root", "netem", "delay", d, "limit", fmt.Sprint(netemLimit)},
		{"tc", "-n", ns, "qdisc", "add", "dev", dev, "handle", "ffff:", "ingress"},
		{"tc", "-n", ns, "filter", "add", "dev", dev, "parent", "ffff:", "matchall",
			"action", "mirred", "egress", "redirect", "dev", ifb},
	}
	for _, s := range steps {
		if err := netemStep(run(s[0], s[1:]...)); err != nil {
			return err
		}
	}
	return nil
}

// netemStep names a missing netem in a step's error.
func netemStep(err error) error {
	if err != nil && (strings.Contains(err.Error(), "netem") || strings.Contains(err.Error(), "Unknown qdisc")) {
		return fmt.Errorf("a base round trip needs netem, which this kernel lacks (use linklab run --kernel uml): %w", err)
	}
	return err
}
