// Package egress holds the network issue's acceptance tests: real jail
// sandboxes behind the host firewall, the DNS filter and the egress proxy,
// talking to a test Internet (internal/testenv/inet) inside a network
// namespace the test makes. They need root and run in CI.
package egress
