// Package gateway is the host side of every sandbox's network (DESIGN §6):
// the pieces that enforce a sandbox's egress policy from outside its
// namespace, where root in the sandbox cannot reach them.
//
// For each sandbox, Attach binds, on the sandbox's gateway address (the
// host end of its veth), the DNS filter (UDP and TCP) and the transparent
// proxy of package egress. The firewall (package network) redirects every
// DNS packet and every TCP connection to ports 80 and 443 that the sandbox
// sends, whatever the destination address, to those two ports of its own
// gateway, so a sandbox cannot pick another resolver or connect to an
// address it was not given. The policy's address rules (CIDRs and IPs) go
// into the sandbox's firewall chain for the traffic that is not redirected,
// and its bandwidth caps into tc on the host end.
//
// Each attached sandbox has its interception CA (egress.NewCA, derived
// from Config.CASecret and the sandbox's ID): its proxy terminates TLS
// with it for names with header rules, and EgressCA gives the manager
// the certificate to install in the sandbox; the key stays here.
//
// The policy is held per sandbox and swapped atomically by Update (PUT
// /sandboxes/{id}/network): the next DNS query and the next proxied
// connection see the new rules, and the firewall chain is replaced in one
// transaction. Connections already open are not cut.
//
// Every decision lands in the sandbox's audit ring: DNS queries and removed
// answers, proxied connections, and — when the firewall logs its drops to
// an NFLOG group that RecordDrops reads — packets the firewall dropped
// (UDP, ICMP, the host's ports, other sandboxes, blocked ranges).
package gateway
