// Package recovery holds the crash-recovery test: a real `agent-sandbox
// serve`, built from this tree, is killed with SIGKILL while its sandboxes
// run, some of them die while it is down, and the restarted server must
// adopt the survivors and clean up after the dead, leaving nothing on the
// host once everything is stopped. It needs root and runs in CI (`make
// test-recovery`, after the SDK suite, whose base template it reuses).
package recovery
