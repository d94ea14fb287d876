// Package network gives each sandbox its own network namespace and reaches
// into it from the host.
//
// A Namespace is created with only its loopback interface up and is kept
// alive by a bind mount of its nsfs file at <runDir>/netns/<name> (the
// iproute2 convention, in a directory of our own), so that a restarted
// server can Open it again by name. The directory is made a shared mount on
// first use, as `ip netns add` does, so that unmounting a namespace also
// removes the copies that mount namespaces cloned since then still hold.
//
// Do runs a function on an OS thread that has entered the namespace, and
// Dial uses it to open a TCP connection from inside: the socket belongs to
// the sandbox's namespace for its whole life, so it reaches services bound
// only to the sandbox's 127.0.0.1 without any relay process. A process
// started by a function given to Do (exec.Cmd.Start) inherits the
// namespace, which is how the jail backend puts its init there.
//
// # Host
//
// Host is the one owner of all this for every isolation backend: the
// server builds one over its Pool and Firewall and hands it to each
// backend, which asks it for a sandbox's namespace, veth and lease
// (Setup), re-opens them after a restart (Adopt) and gives them back
// (Release, which needs nothing but the sandbox id). Prepare installs the
// firewall's base and restores the pool's leases once, before anything is
// adopted or started. A backend runs the sandbox inside the namespace (the
// jail's init; a VM's QEMU process with its tap), so the host side of the
// veth, where egress is enforced, is the same whatever the backend.
//
// # Veth and addresses
//
// AttachVeth gives a namespace a routed veth: the host end (VethName: the
// prefix "asb-" and 11 hex digits of the sandbox id's SHA-256, alias
// "agent-sandbox:<id>") holds the gateway address, the end inside (eth0)
// the sandbox address and a default route via the gateway; no bridge, no
// proxy ARP. On the host end only, IPv4 forwarding is enabled
// (per-interface: the global switch is left alone; the uplink must forward
// too), reverse-path filtering is strict (no spoofed sources) and
// redirects are off; IPv6 is disabled on both ends. DetachVeth deletes
// the host end (the end inside goes with it) and is idempotent.
//
// A Pool carves an IPv4 prefix (DefaultPoolPrefix 10.200.0.0/16, a
// parameter) into /30 links, one per sandbox id: .1 gateway, .2 sandbox.
// The pool is in memory; the kernel is its persistence: a surviving
// sandbox's namespace keeps its veth, so after a restart HostVeths reads
// the leases back from the host ends' aliases and addresses and
// Pool.Restore reserves them before anything new is allocated. A caller
// with a store of its own may Restore from that instead.
//
// # Firewall
//
// Firewall owns the nftables table inet agent_sandbox and touches nothing
// else. Sandbox interfaces are matched by the name prefix (iifname
// "asb-*"), so an interface is isolated from the moment it exists, before
// its per-sandbox pieces are added and after they are removed:
//
//	chain prerouting  (hook prerouting, nat, priority dstnat)
//	    meta nfproto ipv4 iifname "asb-*" <proto> dport <Port> redirect to :<ToPort>  # Redirects
//	chain input       (hook input, filter, policy accept)
//	    iifname "asb-*" ct state new iifname vmap @conn_limits # asb-x : jump ct-asb-x
//	    iifname "asb-*" ct state established,related accept   # let in before
//	    iifname "asb-*" tcp dport <HostTCPPorts> accept
//	    iifname "asb-*" udp dport <HostUDPPorts> accept
//	    iifname "asb-*" ct status dnat <proto> dport <ToPort> accept  # redirected only
//	    iifname "asb-*" meta nfproto ipv6 [log ipv6] drop
//	    iifname "asb-*" [log host] drop                        # every host address
//	chain forward     (hook forward, filter, policy accept)
//	    iifname "asb-*" ct state new iifname vmap @conn_limits
//	    iifname "asb-*" jump from_sandbox
//	    oifname "asb-*" ct state established,related accept
//	    oifname "asb-*" drop                                   # nothing else in
//	chain output      (hook output, filter, policy accept)
//	    oifname "asb-*" ct state established,related accept   # replies
//	    oifname "asb-*" drop                                   # no host process in
//	chain from_sandbox
//	    meta nfproto ipv6 [log ipv6] drop
//	    oifname "asb-*" [log sandbox] drop                     # other sandboxes
//	    ip daddr <Blocked> [log blocked] drop                  # DefaultBlocked
//	    iifname vmap @sandboxes                                # asb-x : jump sb-asb-x
//	    [log default] drop                                     # deny-all egress
//	chain sb-asb-x                                             # one per sandbox
//	    ip daddr <prefix> accept, or [log denied] drop ...     # SetRules, in order
//	chain ct-asb-x                                             # one per sandbox
//	    ct count over <MaxConnsPerSandbox> jump conns_over
//	chain conns_over
//	    [log conns] drop
//	chain postrouting (hook postrouting, nat, priority srcnat)
//	    meta nfproto ipv4 iifname "asb-*" oifname != "asb-*" masquerade
//
// A Redirect rewrites a sandbox's connection to any address (DNS to
// 8.8.8.8:53, say) to its gateway address and ToPort, where a host
// service listens; the input chain lets in connections that were
// redirected there, and a sandbox reaches the host only that way and on
// the Host ports. What a sandbox may send on leaves with the address of
// the host's outgoing interface, since nothing beyond the host routes
// back to the pool.
//
// The host sends a sandbox nothing but replies: the answers of its DNS
// filter and proxy on the gateway, the other end of an allowed Host port,
// ICMP errors about the sandbox's own packets (related). A connection the
// host would open to a sandbox address, from any process of any user, is
// dropped in output (connect fails with EPERM at once); the server reaches
// sandbox ports with Namespace.Dial, from inside, and never over the veth.
// ARP is not IP and passes; IPv6 is off on the veth.
//
// [log reason] stands for a rule before the drop, present when
// FirewallConfig.LogGroup is set, with the drop's match and `limit rate
// 20/second burst 50 packets log group <LogGroup> prefix "<reason>"`. It
// is a rule of its own because an exceeded limit ends its rule, which
// must not skip the drop. The reasons are the Drop* constants. Drops
// towards a sandbox are not logged: they are no sandbox's doing. The
// server owns the group (NFLOG has one reader per group) and reads it
// with a DropLog, which decodes each entry into a Drop: the reason, the
// sandbox's host interface, the protocol, addresses and destination port.
//
// The conntrack table is the host's, shared by every sandbox, and a
// sandbox fills it fast (a DNS query from a new source port is an entry
// for 30 s). MaxConnsPerSandbox caps each sandbox's entries: its ct- chain
// holds one connlimit rule (nft's "ct count"), reached from the input hook
// (DNS and the proxy, made local by the redirects) and from the forward
// hook alike, so one count covers both; a new connection beyond the cap
// is dropped, and once the sandbox's entries expire or close it connects
// again. The count is the rule's own, so the chain is written once, when
// the sandbox is added, and never replaced. TCP connections stop counting
// when they close, although the table keeps them in TIME_WAIT for two
// minutes: a sandbox that opens and closes connections fast is bounded by
// its bandwidth cap and the proxy, not by this cap.
//
// EnsureBase creates the table or rewrites its base chains in one
// transaction, keeping the per-sandbox chains and map elements of
// surviving sandboxes. AddSandbox (called by AttachVeth when the config
// names a Firewall) adds an empty sb- chain and its map element, and the
// ct- chain and its element when there is a cap, in one transaction;
// SetRules replaces the chain's rules atomically, which is
// where the sandbox's CIDR rules go, in their order; RemoveSandbox undoes AddSandbox; Delete
// removes the table. Since the fixed denials come first, no per-sandbox
// rule opens the host, another sandbox, a Blocked range or IPv6. Accept
// verdicts here do not override another table's drop (nftables evaluates
// every table's base chains), so a host firewall that drops forwarded
// traffic must let the sandboxes' through.
//
// # Bandwidth
//
// SetBandwidth caps a sandbox's traffic each way, on the host end only: a
// sandbox's root controls its own namespace, eth0's qdiscs included. Down
// (to the sandbox) is a tbf root qdisc on the host end. Up (from it) is
// shaped by redirecting everything the host end receives (ingress qdisc,
// u32 match-all, mirred) to an ifb device named like the host end with
// "ifb-" for "asb-", which has a tbf of its own; ifb hands packets back as
// received on the host end, so routing and the firewall see no difference.
// (Policing would need act_police, which not every kernel has.) Each
// bucket holds 10 ms at the cap (at least 64 KiB) with a 50 ms queue
// behind it. Forwarded traffic and traffic to or from the host's own
// services (the egress proxy) pass the same caps. DetachVeth deletes the
// ifb with the veth.
package network
