package egress

import "net/netip"

// privateRanges are the address ranges a sandbox never reaches unless an
// operator CIDR inside the range opens it (see the package doc). The
// documentation (TEST-NET) and benchmarking (198.18.0.0/15) ranges are
// deliberately absent: they are not routed on the internet, and test
// "internets" use them as public addresses.
var privateRanges = []struct {
	prefix netip.Prefix
	name   string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "this-network"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private"},
	{netip.MustParsePrefix("100.64.0.0/10"), "cgnat"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local"}, // incl. 169.254.169.254 metadata
	{netip.MustParsePrefix("172.16.0.0/12"), "private"},
	{netip.MustParsePrefix("192.0.0.0/24"), "ietf-protocol"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"}, // incl. 255.255.255.255
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("64:ff9b::/96"), "nat64"}, // embeds IPv4, private ones included
	{netip.MustParsePrefix("64:ff9b:1::/48"), "nat64"},
	{netip.MustParsePrefix("100::/64"), "discard"},
	{netip.MustParsePrefix("2002::/16"), "6to4"}, // embeds IPv4
	{netip.MustParsePrefix("fc00::/7"), "unique-local"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
}

// PrivateRange returns the private or reserved range holding a (already
// unmapped) and its name ("loopback", "link-local", "private", …): the
// ranges no sandbox reaches unless the operator opens them, and no
// server-side fetch reaches unless the operator allows the host (package
// fetch).
func PrivateRange(a netip.Addr) (netip.Prefix, string, bool) {
	for _, r := range privateRanges {
		if r.prefix.Contains(a) {
			return r.prefix, r.name, true
		}
	}
	return netip.Prefix{}, "", false
}
