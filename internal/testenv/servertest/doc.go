// Package servertest runs real agent-sandbox serve processes for tests:
// the server built from this tree, a data dir of its own seeded with hard
// links to the base template the SDK suite built, the host lock awaited
// before each start, and the process started, stopped and killed by PID.
// test/recovery and test/cluster use it.
package servertest
