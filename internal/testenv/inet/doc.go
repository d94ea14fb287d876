// Package inet gives egress tests an "internet" that obeys the project's
// network rule: tests send traffic only to loopback or into network
// namespaces they created themselves. Start builds a namespace standing in
// for the internet, so a test (or the sandboxes it starts) can reach
// "public" names and addresses while every packet stays on the host.
//
// The namespace is joined to the host by a routed veth (host end "inet-"
// and 8 hex digits: not the sandbox prefix "asb-", so the sandbox firewall
// treats it as an uplink). The link is a /30 (by default a free one in
// 198.19.0.0/16, leaving 198.18.0.0/16 to other tests); each site and
// Extra address is held in the namespace as a /32 and the host gets a /32
// route for it via the far end, so exactly those addresses are rerouted
// and nothing else on the host changes. Extra addresses (the metadata
// address, a private address) are there so a test can show that the
// firewall, not a missing route, keeps a sandbox from them.
//
// The servers run in the test process as goroutines whose sockets were
// created inside the namespace:
//
//	DNS   far end :53, UDP and TCP: A records for Sites, an empty NOERROR
//	      for their other types, NXDOMAIN for any other name; each name
//	      asked is recorded (Internet.Queries)
//	HTTP  every address :80:  GET /             "site=<Host> local=<ip:port>"
//	                          GET /bytes?n=N    N bytes, for throughput
//	                          GET /digest?header=NAME
//	                                            "sha256=<hex>" of the header's
//	                                            values (joined by newlines), 404
//	                                            without it: a test learns what a
//	                                            header said without its value
//	                                            reaching the client
//	                          POST /sink        reads the body, answers its length
//	      and the same on AltHTTPPort (8080), a port the sandbox firewall
//	      does not redirect to the egress proxy
//	HTTPS every address :443: the same, with a certificate for every site
//	      name and address signed by a CA made for this Internet (CACert)
//	echo  every address :7, TCP and UDP
//	ping  answered by the kernel
//
// Tests that share an address take turns: Start holds a host-wide lock per
// address (files in os.TempDir()) until the test ends, so tests in
// different packages, which go test runs in parallel, do not fight over
// routes. Everything is undone in t.Cleanup, also when the test fails.
//
// Only Linux has network namespaces; elsewhere Start skips the test.
package inet
