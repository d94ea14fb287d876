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
//	chain input   (hook input, filter, policy accept)
//	    iifname "asb-*" ct state established,related accept   # host-initiated
//	    iifname "asb-*" tcp dport <HostTCPPorts> accept        # DNS filter, proxy (later)
//	    iifname "asb-*" udp dport <HostUDPPorts> accept
//	    iifname "asb-*" drop                                   # every host address
//	chain forward (hook forward, filter, policy accept)
//	    iifname "asb-*" jump from_sandbox
//	    oifname "asb-*" ct state established,related accept
//	    oifname "asb-*" drop                                   # nothing else in
//	chain from_sandbox
//	    meta nfproto ipv6 drop
//	    oifname "asb-*" drop                                   # other sandboxes
//	    ip daddr <Blocked> drop                                # DefaultBlocked
//	    iifname vmap @sandboxes                                # asb-x : jump sb-asb-x
//	    drop                                                   # deny-all egress
//	chain sb-asb-x                                             # one per sandbox
//	    ip daddr <allowed prefix> accept ...                   # SetAllowed
//
// EnsureBase creates the table or rewrites its base chains in one
// transaction, keeping the per-sandbox chains and map elements of
// surviving sandboxes. AddSandbox (called by AttachVeth when the config
// names a Firewall) adds an empty sb- chain and its map element in one
// transaction; SetAllowed replaces the chain's rules atomically, which is
// where CIDR allow rules go; RemoveSandbox undoes AddSandbox; Delete
// removes the table. Since the fixed denials come first, no per-sandbox
// rule opens the host, another sandbox, a Blocked range or IPv6. Accept
// verdicts here do not override another table's drop (nftables evaluates
// every table's base chains), so a host firewall that drops forwarded
// traffic must let the sandboxes' through.
package network
