package actuator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

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
	// "ingress" and "autorate-ingress" unless Cake.Ingress and
	// Cake.AutorateIngress say otherwise (the upload side never gets
	// autorate-ingress).
	Cake CakeOptions
	// NetNS is a network namespace handle to work in, 0 for the current one.
	NetNS int
	// Replace lets Setup replace a root qdisc on the interface or on its
	// IFB that autoshape did not create (sqm-scripts', say). Without it
	// Setup changes nothing there and fails with a *ForeignQdiscError.
	// What it replaces is gone for good: Remove leaves the kernel's default
	// root in its place.
	Replace bool
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
// shaper on the interface's root, the download shaper on its IFB's root.
// After Setup, Remove takes away what carries autoshape's mark (owner.go);
// after Attach it removes nothing.
type Link struct {
	iface, ifb string
	conn       *tcConn
	nl         *netlink.Handle
	up, down   *ifaceShaper
	// mu serialises the two shapers' use of the shared connections.
	mu sync.Mutex

	// own: the shaping is autoshape's (Setup, RemoveShaping), so Remove
	// removes what carries its mark.
	own bool
	// addedRedirect: Setup added the ingress redirect, to an IFB that
	// need not be autoshape's.
	addedRedirect bool
}

// open connects to the kernel's traffic control and link netlink in the
// given namespace (0: the current one).
func open(netns int) (*tcConn, *netlink.Handle, error) {
	conn, err := dialTC(netns)
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

// Setup creates the shaping cfg describes. It first looks at the roots of
// the interface and of an existing IFB: one that autoshape did not create
// makes it fail with a *ForeignQdiscError before anything is changed,
// unless cfg.Replace; one that it did create (left by a crash) is replaced.
// On any later failure it removes what it had created and returns the
// error: nothing is left half-configured.
func Setup(cfg SetupConfig) (l *Link, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	conn, h, err := open(cfg.NetNS)
	if err != nil {
		return nil, err
	}
	l = &Link{iface: cfg.Iface, ifb: cfg.ifb(), conn: conn, nl: h, own: true}
	upRoot, downRoot, err := l.look(cfg.Replace)
	if err != nil {
		l.Close()
		return nil, err
	}
	defer func() {
		if err != nil {
			if rerr := l.Remove(); rerr != nil {
				err = fmt.Errorf("%w (and rolling back failed: %v)", err, rerr)
			}
			l = nil
		}
	}()

	upBackend, downBackend := l.backends(cfg)
	if err := l.createRoot(cfg.Iface, upBackend, cfg.Up, upRoot); err != nil {
		return l, err
	}
	if _, err := ensureIFB(h, l.ifb); err != nil {
		return l, fmt.Errorf("failed to set up IFB %q: %w", l.ifb, kernelErr(err))
	}
	added, err := redirectIngress(h, cfg.Iface, l.ifb)
	l.addedRedirect = added
	if err != nil {
		return l, fmt.Errorf("failed to redirect %q's ingress to %q: %w", cfg.Iface, l.ifb, kernelErr(err))
	}
	if err := l.createRoot(l.ifb, downBackend, cfg.Down, downRoot); err != nil {
		return l, err
	}
	l.up = &ifaceShaper{name: cfg.Iface, nl: h, b: upBackend, mu: &l.mu, rate: cfg.Up}
	l.down = &ifaceShaper{name: l.ifb, nl: h, b: downBackend, mu: &l.mu, rate: cfg.Down}
	return l, nil
}

// look reads the roots of the interface and of the IFB (the zero rootQdisc
// when the IFB does not exist yet) and checks that Setup may go on: a root
// that autoshape did not create is an error without replace, and the IFB's
// name must not be taken by another kind of link.
func (l *Link) look(replace bool) (up, down rootQdisc, err error) {
	idx, err := ifindex(l.nl, l.iface)
	if err != nil {
		return up, down, err
	}
	if up, err = readRoot(l.conn, idx); err != nil {
		return up, down, fmt.Errorf("failed to read the qdiscs of %q: %w", l.iface, kernelErr(err))
	}
	if err := checkForeign(l.iface, up, replace); err != nil {
		return up, down, err
	}
	link, err := l.nl.LinkByName(l.ifb)
	switch {
	case errors.As(err, new(netlink.LinkNotFoundError)):
		return up, down, nil
	case err != nil:
		return up, down, linkErr("read IFB", l.ifb, err)
	case link.Type() != "ifb":
		return up, down, fmt.Errorf("failed to use %q as an IFB: it is a %s link", l.ifb, link.Type())
	}
	if down, err = readRoot(l.conn, uint32(link.Attrs().Index)); err != nil {
		return up, down, fmt.Errorf("failed to read the qdiscs of %q: %w", l.ifb, kernelErr(err))
	}
	return up, down, checkForeign(l.ifb, down, replace)
}

// checkForeign returns a *ForeignQdiscError for a root on the named
// interface that autoshape did not create, unless replace.
func checkForeign(name string, r rootQdisc, replace bool) error {
	if r.isDefault() || r.isOwn() || replace {
		return nil
	}
	return &ForeignQdiscError{Iface: name, Kind: r.Kind, Handle: r.Handle}
}

// backends builds the two directions' backends for cfg.
func (l *Link) backends(cfg SetupConfig) (up, down backend) {
	if cfg.Backend == HTB {
		return newHTB(l.conn, cfg.Framing), newHTB(l.conn, cfg.Framing)
	}
	// The download shaper sits behind the bottleneck: CAKE counts its
	// drops against the rate (ingress), and estimates the capacity from
	// what arrives (autorate-ingress) until a rate is written.
	on := true
	downOpts := cfg.Cake
	if downOpts.Ingress == nil {
		downOpts.Ingress = &on
	}
	if downOpts.AutorateIngress == nil {
		downOpts.AutorateIngress = &on
	}
	upOpts := cfg.Cake
	// Upload CAKE is in front of the bottleneck: what it sees is what the
	// LAN sends, not the link's capacity.
	upOpts.AutorateIngress = nil
	return newCake(l.conn, cfg.Framing, upOpts), newCake(l.conn, cfg.Framing, downOpts)
}

// createRoot creates b's shaping on the named interface, whose root was
// found to be was. autoshape's own root of b's kind that holds b's framing
// is changed in place, so that a second `autoshape shape` never leaves the
// link unshaped; another own root is removed first; anyone else's (which
// look let through only to be replaced) is replaced.
func (l *Link) createRoot(name string, b backend, bps uint64, was rootQdisc) error {
	idx, err := ifindex(l.nl, name)
	if err != nil {
		return err
	}
	if was.isOwn() && was.Kind == b.Kind() {
		done, err := b.updateOwn(idx, bps)
		if err != nil {
			return fmt.Errorf("failed to update %s shaping on %q: %w", b.Kind(), name, err)
		}
		if done {
			return nil
		}
	}
	if was.isOwn() {
		if err := l.removeOwnRoot(name); err != nil {
			return err
		}
	}
	replace := !was.isDefault() && !was.isOwn()
	if err := b.Create(idx, bps, replace); err != nil {
		return fmt.Errorf("failed to create %s shaping on %q: %w", b.Kind(), name, err)
	}
	return nil
}

// Attach finds shaping that something else created (OpenWrt's sqm-scripts
// makes CAKE or HTB on the WAN and on ifb4<wan>) and returns a Link that only
// changes the rates of the two root qdiscs it found, and only while they
// are there; Remove then removes nothing.
func Attach(iface, ifb string, netns int) (*Link, error) {
	if ifb == "" {
		ifb = DefaultIFB(iface)
	}
	conn, h, err := open(netns)
	if err != nil {
		return nil, err
	}
	l := &Link{iface: iface, ifb: ifb, conn: conn, nl: h}
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

// detect returns a backend for the root qdisc on the named interface, bound
// to that qdisc's handle.
func (l *Link) detect(name string) (backend, error) {
	idx, err := ifindex(l.nl, name)
	if err != nil {
		return nil, err
	}
	root, err := readRoot(l.conn, idx)
	if err != nil {
		return nil, fmt.Errorf("failed to read the qdiscs of %q: %w", name, kernelErr(err))
	}
	switch {
	case root.isDefault():
		return nil, fmt.Errorf("%q has only the kernel's default root qdisc (%s), nothing to attach to: %w", name, root, ErrNoQdisc)
	case root.Kind == "cake":
		c := newCake(l.conn, Framing{}, CakeOptions{})
		c.handle = root.Handle
		return c, nil
	case root.Kind == "htb":
		h := newHTB(l.conn, Framing{})
		h.root = root.Handle
		return h, nil
	}
	return nil, fmt.Errorf("%q's root qdisc is %s, not cake or htb: %w", name, root, ErrNoQdisc)
}

// Up returns the upload shaper (the WAN's egress).
func (l *Link) Up() Shaper { return l.up }

// Down returns the download shaper (the IFB).
func (l *Link) Down() Shaper { return l.down }

// Remove deletes what carries autoshape's mark (owner.go) after Setup, in
// reverse order, and closes the link: its root qdiscs on the interface and
// on the IFB, the ingress redirect to the IFB when that is autoshape's or
// Setup added the redirect, and the IFB when it is autoshape's. Whatever
// else is there is left as it is. After Attach it removes nothing.
func (l *Link) Remove() error {
	var errs []error
	if l.own {
		errs = append(errs, l.removeDown())
		errs = append(errs, l.removeOwnRoot(l.iface))
	}
	l.own, l.addedRedirect = false, false
	errs = append(errs, l.Close())
	return errors.Join(errs...)
}

// removeDown removes the download side: autoshape's root on the IFB, the
// redirect to it, and the IFB itself if autoshape's. A missing IFB has
// nothing to remove.
func (l *Link) removeDown() error {
	link, err := l.nl.LinkByName(l.ifb)
	switch {
	case errors.As(err, new(netlink.LinkNotFoundError)):
		return nil
	case err != nil:
		return linkErr("read IFB", l.ifb, err)
	}
	var errs []error
	errs = append(errs, l.removeOwnRoot(l.ifb))
	own := isOwnIFB(link)
	if own || l.addedRedirect {
		if err := removeRedirect(l.nl, l.iface, link.Attrs().Index); err != nil && !errors.Is(err, ErrLinkGone) {
			errs = append(errs, fmt.Errorf("failed to remove %q's ingress redirect: %w", l.iface, err))
		}
	}
	if own {
		if err := deleteIFB(l.nl, l.ifb); err != nil {
			errs = append(errs, fmt.Errorf("failed to delete IFB %q: %w", l.ifb, err))
		}
	}
	return errors.Join(errs...)
}

// removeOwnRoot deletes the named interface's root qdisc if autoshape
// created it.
func (l *Link) removeOwnRoot(name string) error {
	idx, err := ifindex(l.nl, name)
	if err != nil {
		return err
	}
	root, err := readRoot(l.conn, idx)
	if err != nil {
		return fmt.Errorf("failed to read the qdiscs of %q: %w", name, kernelErr(err))
	}
	if !root.isOwn() {
		return nil
	}
	var b backend = newHTB(l.conn, Framing{})
	if root.Kind == "cake" {
		b = newCake(l.conn, Framing{}, CakeOptions{})
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

// RemoveShaping removes, from a later process, what autoshape created on
// iface and its IFB (`autoshape shape`, or a daemon that crashed): what
// carries autoshape's mark, as Link.Remove after Setup does. Shaping that
// autoshape did not create (sqm-scripts' roots and ifb4<iface>) stays.
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
	l := &Link{iface: iface, ifb: ifb, conn: conn, nl: h, own: true}
	return l.Remove()
}

// ifaceShaper is the Shaper of one interface's root qdisc. It keeps the
// interface's index, and looks the name up again after a call that failed
// (and Check after every look), so that a PPPoE reconnect, which makes the
// interface anew under a new index, is followed.
type ifaceShaper struct {
	mu   *sync.Mutex // the Link's: both shapers share its connections
	name string
	nl   *netlink.Handle
	b    backend
	// rate is the last rate the kernel held after SetRate (at first
	// Setup's): Check makes a deleted root again at it.
	rate uint64
	// idx is the interface's index as last looked up, 0 before.
	idx uint32
}

// withIndex runs op with the interface's index. After op fails it looks the
// index up again and, when the interface has a new one, runs op once more:
// the kernel tells a stale index in more ways than one (ENODEV when it is
// gone, EINVAL when another interface took it), and failures are rare.
func (s *ifaceShaper) withIndex(op func(idx uint32) error) error {
	if s.idx != 0 {
		err := op(s.idx)
		if err == nil {
			return nil
		}
		idx, lerr := ifindex(s.nl, s.name)
		if lerr != nil {
			s.idx = 0
			return lerr
		}
		if idx == s.idx {
			return err
		}
		s.idx = idx
		return op(idx)
	}
	idx, err := ifindex(s.nl, s.name)
	if err != nil {
		return err
	}
	s.idx = idx
	return op(idx)
}

var (
	_ Shaper  = (*ifaceShaper)(nil)
	_ Yielder = (*ifaceShaper)(nil)
)

// SetRate writes the rate when the kernel holds another (see
// backend.SetRate).
func (s *ifaceShaper) SetRate(_ context.Context, bps uint64) (Change, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ch Change
	err := s.withIndex(func(idx uint32) error {
		var err error
		ch, err = s.setRate(idx, bps)
		return err
	})
	return ch, err
}

// setRate is SetRate on ifindex idx.
func (s *ifaceShaper) setRate(idx uint32, bps uint64) (Change, error) {
	ch := Change{Iface: s.name, Kind: s.b.Kind(), To: bps}
	from, wrote, err := s.b.SetRate(idx, bps)
	ch.From, ch.Wrote = from, wrote
	if err != nil {
		return ch, fmt.Errorf("failed to change the %s rate on %q: %w", s.b.Kind(), s.name, err)
	}
	s.rate = bps
	return ch, nil
}

// Yield hands the rate to CAKE's autorate-ingress, starting from bps (see
// Yielder); the HTB backend has none and gives an error.
func (s *ifaceShaper) Yield(_ context.Context, bps uint64) (Change, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.b.(*cake)
	if !ok {
		return Change{}, fmt.Errorf("failed to turn autorate-ingress on, on %q: the %s backend has none", s.name, s.b.Kind())
	}
	err := s.withIndex(func(idx uint32) error { return c.yield(idx, bps) })
	if err != nil {
		return Change{}, fmt.Errorf("%q: %w", s.name, err)
	}
	s.rate = bps
	return Change{Iface: s.name, Kind: s.b.Kind(), To: bps, Wrote: true}, nil
}

// Stats reads the shaper's counters.
func (s *ifaceShaper) Stats(context.Context) (Stats, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var st Stats
	err := s.withIndex(func(idx uint32) error {
		var err error
		if st, err = s.b.Stats(idx); err != nil {
			return fmt.Errorf("failed to read %s stats on %q: %w", s.b.Kind(), s.name, err)
		}
		return nil
	})
	return st, err
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
