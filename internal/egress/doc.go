// Package egress decides what a sandbox may reach on the network and
// enforces it at DNS (DESIGN §6). It has no system side effects: the veth,
// nftables and transparent-proxy wiring that put it in a sandbox's path live
// elsewhere.
//
// # Policy
//
// The operator's Ceiling (server config) bounds every sandbox. By default it
// is an allowlist: nothing is reachable except DefaultAllowDomains (package
// registries). An operator may instead make it Open: every public IPv4
// address and every name not denied. A sandbox's Rules come from the E2B
// fields allow_internet_access, network.allowOut and network.denyOut
// (ParseRules), with network.rules (header rules, below). Both lists accept CIDRs, IPs, exact domains and "*." wildcard
// domains; domains in denyOut are our extension (E2B documents CIDR/IP only),
// enforced like allowOut domains at the name. NewPolicy combines the two
// into a Policy; the zero Policy denies everything.
//
// A name (DNS query, HTTP Host, TLS SNI) is decided by the first of:
//
//  1. a ceiling DenyDomains entry denies it;
//  2. a sandbox allowOut domain matching it allows it, if that entry
//     counts: the ceiling permits widening (Open, or SandboxMayWiden in
//     allowlist mode) or allows the name itself;
//  3. allow_internet_access: false denies it, registries included;
//  4. a sandbox denyOut domain matching it denies it;
//  5. a ceiling AllowDomains entry allows it;
//  6. an Open ceiling allows it; otherwise it is denied ("ceiling:allowlist").
//
// So the operator's ceiling wins over everything, a counting allowOut
// entry wins over denyOut and allow_internet_access: false (E2B: "allowed
// entries always take precedence over denied entries", and
// allow_internet_access: false "behaves the same as denyOut 0.0.0.0/0"),
// and our denyOut domains decide the names no allow entry names. In
// allowlist mode a sandbox can only narrow unless the operator set
// SandboxMayWiden. An IP literal given as a name is decided as an address.
//
// An address, whether the sandbox connects to it directly (AllowAddr) or
// an allowed name resolved to it (AllowAnswer), is decided by the first of
// these steps; step 4 and the first half of step 9 are for answers only,
// which so need no CIDR rule of their own:
//
//  1. a ceiling DenyCIDRs entry denies it;
//  2. if it lies in a private range (RFC 1918, CGNAT 100.64/10, loopback,
//     link-local 169.254/16 with the metadata address, 0/8, 192.0.0/24,
//     multicast, 240/4, IPv6 unspecified, loopback, fc00::/7, fe80::/10,
//     ff00::/8, NAT64 and 6to4 prefixes) or in a ceiling ReservedCIDRs prefix
//     (the host's addresses, the sandbox pools), it is allowed only by a
//     ceiling AllowCIDRs entry that contains it and lies inside that range
//     — so a ceiling 0.0.0.0/0 never opens 169.254.169.254, while 10.1.0.0/16
//     opens that part of 10/8; sandbox rules never open them;
//  3. a sandbox allowOut CIDR/IP containing it allows it if the entry
//     counts (the ceiling permits widening, or a ceiling AllowCIDRs entry
//     contains the address too);
//  4. an IPv4 answer for a name that a counting allowOut domain names is
//     allowed: denyOut ["0.0.0.0/0"] with allowOut ["api.example.com"]
//     reaches that name and nothing else, as E2B documents;
//  5. allow_internet_access: false denies it;
//  6. a sandbox denyOut CIDR/IP containing it denies it;
//  7. a ceiling AllowCIDRs entry allows it;
//  8. an IPv6 address is denied (IPv6 needs an explicit CIDR rule);
//  9. an answer of an allowed name is allowed; an Open ceiling allows it;
//     otherwise it is denied.
//
// Policy.Forwarding gives the firewall the same order for the traffic it
// judges by address alone.
//
// The port is carried for the audit trail but is not part of any rule.
//
// Names are matched in lower case without the trailing dot; non-ASCII names
// are rejected (write xn-- forms). "*.example.com" matches a.example.com and
// a.b.example.com but not example.com itself: list both to get both. Exact
// entries win over wildcards for the rule named in a Decision.
//
// # DNS
//
// Server answers a sandbox's queries over UDP and TCP on sockets the caller
// binds (inside the sandbox's namespace, later). Per query it reads the
// current Policy from a getter, so a policy replaced live applies to the
// next query. A denied name gets NXDOMAIN — not REFUSED, which makes stub
// resolvers try other servers and report a temporary failure that package
// managers retry — with an RFC 8914 Extended DNS Error "Blocked" naming the
// rule when the client speaks EDNS. No SOA is included, so the denial is not
// cached and a later policy change takes effect at once. An allowed name is
// forwarded upstream with a fresh ID and our own EDNS record; in the answer,
// each A/AAAA record whose address AllowAnswer denies (DNS rebinding to a
// private or host address, or IPv6 by default) is removed and the rest are
// kept: an answer left with no addresses is an empty NOERROR. SVCB/HTTPS
// records are removed too, since their address hints would bypass that
// check, and the upstream's additional section is dropped. Oversized UDP
// answers are truncated (TC) so the client retries over TCP.
//
// Resolver does the same check-resolve-filter for the host side (the
// transparent proxy dials only addresses it resolved itself).
//
// Every decision is sent to an Audit: one EventDNS or EventResolve per query
// and one EventDNSAnswer per removed address. Ring is a bounded per-sandbox
// Audit read with a cursor.
//
// # Proxy
//
// The host redirects a sandbox's TCP connections to ports 80 and 443 to its
// Proxy, which reads the original destination (OriginalDst) and the first
// bytes: the SNI of a TLS ClientHello (parsed by crypto/tls) or the Host of
// an HTTP/1 request head. A name decides, even when the original address
// would be allowed: the proxy resolves it itself as Resolver does and dials
// only the addresses AllowAnswer keeps, on the original port, so cached or
// forged answers, rebinding and direct-IP connections carrying an allowed
// name reach nothing else. A connection without a name (other protocols, no
// SNI, nothing sent within HandshakeTimeout) or with an IP literal is
// decided by AllowAddr on its original address. The bytes read (at most
// 64 KiB) are forwarded unchanged, and TLS is not terminated, except for a
// name with header rules (below). A denied HTTP request gets 403 naming
// the rule, an unreachable allowed one 502; other connections are closed.
// Each connection is one EventProxy.
//
// A connection is decided once, on its first request or ClientHello:
// later requests on a kept-alive HTTP connection, or a Host inside TLS
// that differs from the SNI, reach the same address unchecked. The proxy
// bounds which addresses are reached, not which sites those addresses
// serve: domain fronting, or Encrypted ClientHello, on a shared front end
// still works.
//
// # Header rules
//
// A sandbox's Rules also hold E2B's network.rules: per domain pattern
// (exact, or "*." and a suffix; exact wins, then the longest wildcard),
// headers to set on the sandbox's requests (Policy.HeaderRule), so that a
// credential reaches an API while code in the sandbox cannot read it. A
// rule grants no access. The proxy intercepts only an allowed connection
// whose Host or SNI has a rule that sets something: it parses the HTTP/1
// requests, over TLS after terminating it with a certificate for the name
// from the sandbox's CA (NewCA: derived from a server secret and the
// sandbox's ID, its key kept here, its certificate installed in the
// sandbox by the manager), sets the rule's headers as the policy has them
// at each request, refuses a request for another Host (421), and forwards
// over TLS of its own, verifying the server for the name against
// ProxyConfig.UpstreamRoots. Everything else about a request passes as
// sent. Without a CA a TLS connection with rules is refused, not passed on
// without its headers.
//
// Bounds: queries over 4096 bytes are dropped, at most MaxInflight UDP
// queries and MaxConns TCP connections are served at once (the rest are
// dropped or closed), every upstream exchange has a Timeout, idle TCP
// connections close after 10s, and each list of rules holds at most 1000
// entries. An intercepted connection bounds request heads to 64 KiB,
// response heads to 1 MiB, its idle time to 90s and its upstream
// connections to 2; a CA keeps at most 256 certificates.
package egress
