// Package egress holds the network issue's acceptance tests, and the
// browser's egress case (TestBrowserEgress: Chromium of the browser
// template, built into the shared test cache): real
// sandboxes of each backend (jail, vm and gvisor, internal/sandbox/sandboxtest)
// behind the host firewall, the DNS filter and the egress proxy, talking
// to a test Internet (internal/testenv/inet) inside a network namespace
// the test makes. They need root, QEMU and the guest kernel for the vm,
// runsc for gvisor, and run in CI.
package egress
