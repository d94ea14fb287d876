// Package recovery holds the tests of a real `agent-sandbox serve`, built
// from this tree, that is killed, or whose sandboxes end by themselves.
// TestServerCrashRecovery kills the server with SIGKILL
// while its sandboxes run, some of them die while it is down, and the
// restarted server must adopt the survivors and clean up after the dead,
// leaving nothing on the host once everything is stopped; it runs on the
// jail and on the vm backend, and what differs between them (where a
// sandbox lives on the host, which process it lives in) is one table
// (host_linux_test.go). TestCrashKeepsSnapshotsAndVolumes checks that
// snapshots, volumes and a sandbox paused to disk outlive a SIGKILL.
// TestVMEnds has VMs end by a guest kernel panic, an OOM kill of QEMU,
// QEMU killed and a timeout, and checks what the API says of each.
// The tests need root and run in CI (`make test-recovery`, after the SDK
// suite, whose base template they reuse).
package recovery
