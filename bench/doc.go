// Package bench is the benchmark harness behind `agent-sandbox bench`: it
// starts its own server (twice: with the warm pool and without) or uses
// one given by URL, drives it through the public Go client as an SDK would,
// and measures create→ready latency and throughput, the round trip of a
// command, file transfer through the router, kill latency and the host
// memory of idle sandboxes; then the same kinds of figure for the vm
// backend on servers of their own (--backend vm: create from a memory
// snapshot, from the warm pool and by a cold boot, the round trip, the host
// memory of idle VMs), each shown against the jail's figure of its kind;
// the vm servers' debug logs say how many samples were restored or served
// by the pool, and break the creates down into the server's steps; and
// for the gvisor backend (--backend gvisor: create without and with the
// pool, the round trip, the host memory of idle sandboxes). A CPU-bound
// and a syscall-bound micro-benchmark run inside sandboxes of each
// backend, to show what gVisor's platform and emulation cost each kind
// of code.
// Baselines are measured in the same run on the
// same host: the bare isolation floor (fork, new namespaces, exec of
// /bin/true), bwrap and runsc where installed, the host running the same
// command, and a loopback HTTP transfer. Every figure is measured; the
// report shows each with its ratio to its baseline and the target from the
// performance issues, as a table, JSON, or HTML with latency histograms.
// Issue 21's targets are bounds computed from the baselines of the same
// run (create→ready from the pool within the in-sandbox login shell and
// twice the floor, for instance); a target whose baseline was not measured
// is reported as not judged.
//
// A benchmark is not a test: Run fails only when it cannot measure, never
// because a figure misses its target.
package bench
