// Package security holds the security issue's acceptance tests: attacks
// run from inside real sandboxes (behind the host firewall and the egress
// gateway, with a test Internet from internal/testenv/inet), as the
// sandbox's user and as its root, each checked for containment: every
// case in jails with and without user namespaces, the escape and resource
// cases in VMs too. The test binary, copied into the sandboxes as
// /usr/bin/probe, performs the attacks; the test judges what it reports
// and what the host shows afterwards, and logs a table of every case. The
// tests need root (and QEMU and the guest kernel for the VMs) and run in
// CI.
package security
