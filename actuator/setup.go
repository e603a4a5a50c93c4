package actuator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/florianl/go-tc"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// A Backend names a shaping backend.
type Backend string

// Backends.
const (
	CAKE Backend = "cake"
	HTB  Backend = "htb"
)

// ParseBackend checks a backend name.
func ParseBackend(s string) (Backend, error) {
	switch b := Backend(strings.ToLower(s)); b {
	case CAKE, HTB:
		return b, nil
	}
	return "", fmt.Errorf("unknown backend %q (known: cake, htb)", s)
}

// DefaultIFB is the IFB name sqm-scripts uses for an interface: "ifb4" and
// the interface's name, cut to the kernel's 15 characters.
func DefaultIFB(iface string) string {
	name := "ifb4" + iface
	if len(name) > unix.IFNAMSIZ-1 {
		name = name[:unix.IFNAMSIZ-1]
	}
	return name
}

// SetupConfig says what shaping to create.
type SetupConfig struct {
	// Iface is the WAN interface: its egress is the upload shaper.
	Iface string
	// IFB is the interface that carries the WAN's ingress for the download
	// shaper; empty means DefaultIFB(Iface).
	IFB string
	// Backend is CAKE or HTB.
	Backend Backend
	// Up and Down are the rates in bit/s.
	Up, Down uint64
	// Framing is applied in both directions.
	Framing Framing
	// Cake holds CAKE's further options; the download side also gets
	// "ingress" unless Cake.Ingress says otherwise.
	Cake CakeOptions
	// NetNS is a network namespace handle to work in, 0 for the current one.
	NetNS int
}

// Validate reports the first problem with c before anything is touched.
func (c SetupConfig) Validate() error {
	switch {
	case c.Iface == "":
		return errors.New("no interface given")
	case len(c.Iface) > unix.IFNAMSIZ-1:
		return fmt.Errorf("interface name %q is longer than %d characters", c.Iface, unix.IFNAMSIZ-1)
	case len(c.ifb()) > unix.IFNAMSIZ-1:
		return fmt.Errorf("IFB name %q is longer than %d characters", c.ifb(), unix.IFNAMSIZ-1)
	case c.ifb() == c.Iface:
		return fmt.Errorf("IFB name %q is the interface itself", c.ifb())
	case c.Up == 0 || c.Down == 0:
		return errors.New("rates must be positive")
	}
	if _, err := ParseBackend(string(c.Backend)); err != nil {
		return err
	}
	if c.Backend == CAKE {
		if _, err := cakeAttrs(c.Up, c.Framing, c.Cake); err != nil {
			return err
		}
	}
	return nil
}

func (c SetupConfig) ifb() string {
	if c.IFB != "" {
		return c.IFB
	}
	return DefaultIFB(c.Iface)
}

// A Link is the shaping of one WAN interface in both directions: the upload
// shaper on the interface's root, the download shaper on its IFB's root. It
// remembers what it created, so Remove takes away exactly that.
type Link struct {
	iface, ifb string
	netns      int
	conn       *tc.Tc
	nl         *netlink.Handle
	up, down   *ifaceShaper
	// mu serialises the two shapers' use of the shared connections.
	mu sync.Mutex

	// What Setup created, for Remove.
	createdIFB, createdIngress, createdUp, createdDown bool
}

// open connects to the kernel's traffic control and link netlink in the
// given namespace (0: the current one).
func open(netns int) (*tc.Tc, *netlink.Handle, error) {
	conn, err := tc.Open(&tc.Config{NetNS: netns})
	if err != nil {
		return nil, nil, fmt.Errorf("failed to open traffic control netlink: %w", err)
	}
	h, err := openLinkHandle(netns)
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	return conn, h, nil
}

// openLinkHandle opens a link netlink handle in the given namespace (0: the
// current one). It asks for NETLINK_ROUTE alone: without a family the
// library also opens XFRM and NETFILTER sockets, which a kernel without
// xfrm_user (many OpenWrt images) refuses with "protocol not supported".
func openLinkHandle(netns int) (*netlink.Handle, error) {
	var (
		h   *netlink.Handle
		err error
	)
	if netns != 0 {
		h, err = netlink.NewHandleAt(nsHandle(netns), unix.NETLINK_ROUTE)
	} else {
		h, err = netlink.NewHandle(unix.NETLINK_ROUTE)
	}
	if err != nil {
		return nil, fmt.Errorf("failed to open link netlink: %w", err)
	}
	return h, nil
}

// Setup creates the shaping cfg describes. On any failure it removes what it
// had created and returns the error: nothing is left half-configured.
func Setup(cfg SetupConfig) (l *Link, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	conn, h, err := open(cfg.NetNS)
	if err != nil {
		return nil, err
	}
	l = &Link{iface: cfg.Iface, ifb: cfg.ifb(), netns: cfg.NetNS, conn: conn, nl: h}
	defer func() {
		if err != nil {
			if rerr := l.Remove(); rerr != nil {
				err = fmt.Errorf("%w (and rolling back failed: %v)", err, rerr)
			}
			l = nil
		}
	}()
	if _, err := ifindex(h, cfg.Iface); err != nil {
		return l, err
	}

	upBackend, downBackend := l.backends(cfg)
	if err := l.createRoot(cfg.Iface, upBackend, cfg.Up, &l.createdUp); err != nil {
		return l, err
	}
	created, err := ensureIFB(h, l.ifb)
	l.createdIFB = created
	if err != nil {
		return l, fmt.Errorf("failed to set up IFB %q: %w", l.ifb, kernelErr(err))
	}
	if err := redirectIngress(h, cfg.Iface, l.ifb); err != nil {
		return l, fmt.Errorf("failed to redirect %q's ingress to %q: %w", cfg.Iface, l.ifb, kernelErr(err))
	}
	l.createdIngress = true
	if err := l.createRoot(l.ifb, downBackend, cfg.Down, &l.createdDown); err != nil {
		return l, err
	}
	l.up = &ifaceShaper{name: cfg.Iface, nl: h, b: upBackend, mu: &l.mu}
	l.down = &ifaceShaper{name: l.ifb, nl: h, b: downBackend, mu: &l.mu}
	return l, nil
}

// backends builds the two directions' backends for cfg.
func (l *Link) backends(cfg SetupConfig) (up, down backend) {
	if cfg.Backend == HTB {
		return newHTB(l.conn, cfg.Framing), newHTB(l.conn, cfg.Framing)
	}
	downOpts := cfg.Cake
	if downOpts.Ingress == nil {
		on := true
		downOpts.Ingress = &on
	}
	return l.newCake(cfg.Framing, cfg.Cake), l.newCake(cfg.Framing, downOpts)
}

// newCake returns a CAKE backend working in the link's namespace.
func (l *Link) newCake(f Framing, o CakeOptions) *cake {
	c := newCake(l.conn, f, o)
	c.netns = l.netns
	return c
}

// createRoot creates b's shaping on the named interface and records it.
func (l *Link) createRoot(name string, b backend, bps uint64, created *bool) error {
	idx, err := ifindex(l.nl, name)
	if err != nil {
		return err
	}
	if err := b.Create(idx, bps); err != nil {
		return fmt.Errorf("failed to create %s shaping on %q: %w", b.Kind(), name, err)
	}
	*created = true
	return nil
}

// Attach finds shaping that something else created (OpenWrt's sqm-scripts
// makes CAKE or HTB on the WAN and on ifb4<wan>) and returns a Link that only
// changes its rates; Remove then removes nothing.
func Attach(iface, ifb string, netns int) (*Link, error) {
	if ifb == "" {
		ifb = DefaultIFB(iface)
	}
	conn, h, err := open(netns)
	if err != nil {
		return nil, err
	}
	l := &Link{iface: iface, ifb: ifb, netns: netns, conn: conn, nl: h}
	for _, side := range []struct {
		name string
		dst  **ifaceShaper
	}{{iface, &l.up}, {ifb, &l.down}} {
		b, err := l.detect(side.name)
		if err != nil {
			l.Close()
			return nil, err
		}
		*side.dst = &ifaceShaper{name: side.name, nl: h, b: b, mu: &l.mu}
	}
	return l, nil
}

// detect returns a backend for the root qdisc on the named interface.
func (l *Link) detect(name string) (backend, error) {
	idx, err := ifindex(l.nl, name)
	if err != nil {
		return nil, err
	}
	kind, err := rootKind(l.conn, idx)
	if err != nil {
		return nil, fmt.Errorf("failed to read the qdiscs of %q: %w", name, kernelErr(err))
	}
	switch kind {
	case "cake":
		return l.newCake(Framing{}, CakeOptions{}), nil
	case "htb":
		return newHTB(l.conn, Framing{}), nil
	case "":
		return nil, fmt.Errorf("%q has no root qdisc to attach to: %w", name, ErrNoQdisc)
	}
	return nil, fmt.Errorf("%q's root qdisc is %s, not cake or htb: %w", name, kind, ErrNoQdisc)
}

// rootKind returns the kind of ifindex's root qdisc, "" when there is none
// (or only the kernel's default).
func rootKind(conn *tc.Tc, idx uint32) (string, error) {
	qs, err := conn.Qdisc().Get()
	if err != nil {
		return "", err
	}
	for _, q := range qs {
		if q.Ifindex == idx && q.Parent == tc.HandleRoot {
			switch q.Kind {
			case "noqueue", "pfifo_fast", "mq":
				return "", nil
			}
			return q.Kind, nil
		}
	}
	return "", nil
}

// Up returns the upload shaper (the WAN's egress).
func (l *Link) Up() Shaper { return l.up }

// Down returns the download shaper (the IFB).
func (l *Link) Down() Shaper { return l.down }

// Remove deletes exactly what Setup created, in reverse order, and closes
// the link. After Attach it removes nothing.
func (l *Link) Remove() error {
	var errs []error
	if l.createdDown {
		errs = append(errs, l.removeRoot(l.ifb))
	}
	if l.createdIngress {
		if err := removeIngress(l.nl, l.iface); err != nil {
			errs = append(errs, fmt.Errorf("failed to remove %q's ingress redirect: %w", l.iface, err))
		}
	}
	if l.createdIFB {
		if err := deleteIFB(l.nl, l.ifb); err != nil {
			errs = append(errs, fmt.Errorf("failed to delete IFB %q: %w", l.ifb, err))
		}
	}
	if l.createdUp {
		errs = append(errs, l.removeRoot(l.iface))
	}
	l.createdDown, l.createdIngress, l.createdIFB, l.createdUp = false, false, false, false
	errs = append(errs, l.Close())
	return errors.Join(errs...)
}

func (l *Link) removeRoot(name string) error {
	idx, err := ifindex(l.nl, name)
	if err != nil {
		return err
	}
	kind, err := rootKind(l.conn, idx)
	if err != nil || kind == "" {
		return err
	}
	var b backend = newHTB(l.conn, Framing{})
	if kind == "cake" {
		b = l.newCake(Framing{}, CakeOptions{})
	}
	if err := b.Remove(idx); err != nil {
		return fmt.Errorf("failed to remove the root qdisc of %q: %w", name, err)
	}
	return nil
}

// Close releases the netlink connections without changing anything.
func (l *Link) Close() error {
	if l.nl != nil {
		l.nl.Close()
		l.nl = nil
	}
	if l.conn != nil {
		err := l.conn.Close()
		l.conn = nil
		return err
	}
	return nil
}

// RemoveShaping removes what `autoshape shape` creates on iface: the root
// qdiscs of iface and its IFB, the ingress redirect, and the IFB itself. It
// is the one-shot counterpart of Setup for a later process.
func RemoveShaping(iface, ifb string, netns int) error {
	if ifb == "" {
		ifb = DefaultIFB(iface)
	}
	conn, h, err := open(netns)
	if err != nil {
		return err
	}
	if _, err := ifindex(h, iface); err != nil {
		conn.Close()
		h.Close()
		return err
	}
	l := &Link{iface: iface, ifb: ifb, netns: netns, conn: conn, nl: h, createdUp: true}
	if link, err := h.LinkByName(ifb); err == nil && link.Type() == "ifb" {
		l.createdDown, l.createdIngress, l.createdIFB = true, true, true
	}
	return l.Remove()
}

// ifaceShaper is the Shaper of one interface's root qdisc. The interface is
// looked up by name at every call, so a PPPoE reconnect (a new ifindex) is
// followed.
type ifaceShaper struct {
	mu   *sync.Mutex // the Link's: both shapers share its connections
	name string
	nl   *netlink.Handle
	b    backend
}

var _ Shaper = (*ifaceShaper)(nil)

// SetRate reads the rate the kernel holds and writes only when it differs.
func (s *ifaceShaper) SetRate(_ context.Context, bps uint64) (Change, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := Change{Iface: s.name, Kind: s.b.Kind(), To: bps}
	idx, err := ifindex(s.nl, s.name)
	if err != nil {
		return ch, err
	}
	cur, err := s.b.Rate(idx)
	if err != nil {
		return ch, fmt.Errorf("failed to read the %s rate on %q: %w", s.b.Kind(), s.name, err)
	}
	ch.From = cur
	// The kernel holds whole bytes per second: a rate within a byte/s of
	// the held one is the held one.
	if cur+8 > bps && bps+8 > cur {
		return ch, nil
	}
	if err := s.b.SetRate(idx, bps); err != nil {
		return ch, fmt.Errorf("failed to change the %s rate on %q: %w", s.b.Kind(), s.name, err)
	}
	ch.Wrote = true
	return ch, nil
}

// Stats reads the shaper's counters.
func (s *ifaceShaper) Stats(context.Context) (Stats, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	idx, err := ifindex(s.nl, s.name)
	if err != nil {
		return Stats{}, err
	}
	st, err := s.b.Stats(idx)
	if err != nil {
		return Stats{}, fmt.Errorf("failed to read %s stats on %q: %w", s.b.Kind(), s.name, err)
	}
	return st, nil
}

// ErrLinkGone: the interface does not exist (now).
var ErrLinkGone = errors.New("no such interface")

// ifindex looks an interface up by name.
func ifindex(h *netlink.Handle, name string) (uint32, error) {
	link, err := h.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return 0, fmt.Errorf("interface %q: %w", name, ErrLinkGone)
		}
		return 0, fmt.Errorf("failed to look up interface %q: %w", name, kernelErr(err))
	}
	return uint32(link.Attrs().Index), nil
}

// kernelErr turns EPERM into a message naming the capability it takes.
func kernelErr(err error) error {
	if errors.Is(err, unix.EPERM) {
		return fmt.Errorf("%w: changing traffic control needs CAP_NET_ADMIN (run as root or grant the capability)", err)
	}
	return err
}

// IsPermission reports whether err comes from missing privileges.
func IsPermission(err error) bool {
	return errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES)
}

// Counters reads an interface's 64-bit byte counters (received and sent)
// in the given namespace (0: the current one).
func Counters(iface string, netns int) (rxBytes, txBytes uint64, err error) {
	h, err := openLinkHandle(netns)
	if err != nil {
		return 0, 0, err
	}
	defer h.Close()
	return linkCounters(h, iface)
}
