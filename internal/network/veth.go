package network

import (
	"crypto/sha256"
	"encoding/hex"
	"net/netip"
)

const (
	// HostNamePrefix starts the name of every sandbox veth's host end. The
	// firewall matches it as a wildcard, so an interface with this prefix
	// is isolated even before (or after) its per-sandbox pieces exist.
	HostNamePrefix = "asb-"

	// PeerName is the name of the veth end inside a sandbox's namespace.
	PeerName = "eth0"
)

// VethName returns the host-end name for sandbox id: HostNamePrefix and
// the first 11 hex digits of the id's SHA-256, 15 characters (IFNAMSIZ-1).
func VethName(id string) string {
	sum := sha256.Sum256([]byte(id))
	return HostNamePrefix + hex.EncodeToString(sum[:])[:15-len(HostNamePrefix)]
}

// VethConfig describes a sandbox's routed veth.
type VethConfig struct {
	// SandboxID is recorded as the host end's alias, which is how
	// HostVeths maps links back to sandboxes after a restart.
	SandboxID string
	// HostName is the host end's name; empty means VethName(SandboxID).
	// It must start with HostNamePrefix and be at most 15 bytes.
	HostName string
	// Addrs are the link's addresses, usually from a Pool.
	Addrs VethAddrs
	// MTU of both ends; 0 means 1500.
	MTU int
	// Firewall, if not nil, gets the sandbox's pieces (AddSandbox) with
	// the veth and loses them (RemoveSandbox) with it.
	Firewall *Firewall
}

// FirewallConfig is the host-side base isolation.
type FirewallConfig struct {
	// HostTCPPorts and HostUDPPorts are the host ports a sandbox may reach
	// on the host's own addresses (the DNS filter and the transparent
	// proxy, later). Empty by default: the host is unreachable.
	HostTCPPorts []uint16
	HostUDPPorts []uint16
	// Blocked are the IPv4 destinations no sandbox is forwarded to,
	// whatever its own rules say; nil means DefaultBlocked. An operator
	// opening part of a private range passes a list with that hole in it.
	Blocked []netip.Prefix
	// Redirects catch a sandbox's IPv4 traffic to a port, whatever the
	// destination address, and hand it to a port on the sandbox's gateway
	// address, where a host service listens (DNS to any resolver lands in
	// the DNS filter). The host accepts these redirected connections and
	// no others, so a direct connection to a ToPort is still dropped.
	Redirects []Redirect
	// LogGroup, if not 0, is the NFLOG group every dropped packet from a
	// sandbox is logged to (at most 20 a second per rule, bursts of 50),
	// with the reason (DropHost, DropIPv6, ...) as its prefix; a DropLog
	// reads them.
	LogGroup uint16
	// MaxConnsPerSandbox caps the conntrack entries of each sandbox's
	// connections through the host (forwarded, and redirected to the
	// gateway's DNS filter and proxy): a new connection beyond it is
	// dropped (logged as DropConns), so that one sandbox cannot fill the
	// host's conntrack table, which every sandbox and the host share.
	// 0: no cap.
	MaxConnsPerSandbox uint32
}

// Redirect sends a sandbox's traffic for Proto/Port to ToPort on its
// gateway address.
type Redirect struct {
	Proto  string // "tcp" or "udp"
	Port   uint16
	ToPort uint16 // must differ from Port: see NewFirewall
}

// The reasons a drop is logged with (its NFLOG prefix), one per kind of
// drop rule.
const (
	DropHost    = "host"    // to the host, on no allowed port and not redirected
	DropIPv6    = "ipv6"    // IPv6, which sandboxes do not have
	DropSandbox = "sandbox" // to another sandbox
	DropBlocked = "blocked" // to a Blocked range
	DropDefault = "default" // forwarded, but no rule of the sandbox allows it
	DropDenied  = "denied"  // a dropping prefix of the sandbox's rules
	DropConns   = "conns"   // a new connection beyond MaxConnsPerSandbox
)

// DefaultBlocked are the IPv4 ranges forwarding from a sandbox never
// reaches by default: this-network, RFC 1918, CGNAT, loopback, link-local
// (the metadata address 169.254.169.254 included), IETF protocol
// assignments, multicast and reserved/broadcast. The sandbox pool is within
// 10/8; another pool prefix must be added by the caller.
var DefaultBlocked = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("240.0.0.0/4"),
}

// SandboxRules are a sandbox's own forwarding rules (SetRules), tried in
// order: the first whose IPv4 prefix contains a packet's destination
// accepts or drops it; a packet none contains is dropped.
type SandboxRules []PrefixRule

// PrefixRule accepts (Accept) or drops the packets to Prefix.
type PrefixRule struct {
	Prefix netip.Prefix
	Accept bool
}
