package probe

import "net/netip"

// DefaultReflectors is the reflector list a Pool uses when its configuration
// names none: well-known anycast public DNS resolvers, which answer ICMP
// echo from everywhere, sit close to most networks and are built to take
// traffic.
//
// The order matters: a Pool starts with the first PoolConfig.Active
// addresses and keeps the rest as spares. The list therefore starts with one
// IPv4 address per operator, so that the first reflectors share neither an
// operator nor an address family's reachability; IPv6 addresses come last, so
// a router without IPv6 only meets them as spares (they fail there and are
// passed over).
//
// It is meant for real routers only. Tests must never use it: they probe
// fake targets, or addresses of the documentation ranges (192.0.2.0/24,
// 2001:db8::/32).
var DefaultReflectors = []netip.Addr{
	// One IPv4 address per operator.
	netip.MustParseAddr("1.1.1.1"),        // Cloudflare
	netip.MustParseAddr("8.8.8.8"),        // Google
	netip.MustParseAddr("9.9.9.9"),        // Quad9
	netip.MustParseAddr("208.67.222.222"), // OpenDNS (Cisco)
	netip.MustParseAddr("94.140.14.14"),   // AdGuard
	// The operators' second IPv4 addresses.
	netip.MustParseAddr("1.0.0.1"),
	netip.MustParseAddr("8.8.4.4"),
	netip.MustParseAddr("149.112.112.112"),
	netip.MustParseAddr("208.67.220.220"),
	netip.MustParseAddr("94.140.15.15"),
	// IPv6.
	netip.MustParseAddr("2606:4700:4700::1111"),
	netip.MustParseAddr("2001:4860:4860::8888"),
	netip.MustParseAddr("2620:fe::fe"),
	netip.MustParseAddr("2620:119:35::35"),
	netip.MustParseAddr("2a10:50c0::ad1:ff"),
	netip.MustParseAddr("2606:4700:4700::1001"),
	netip.MustParseAddr("2001:4860:4860::8844"),
	netip.MustParseAddr("2620:fe::9"),
	netip.MustParseAddr("2620:119:53::53"),
	netip.MustParseAddr("2a10:50c0::ad2:ff"),
}
