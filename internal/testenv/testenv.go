// Package testenv holds helpers that make tests say why they skip. Tests that
// need root run in CI (which is root) and skip with a reason elsewhere; in CI
// (CI=true) a missing requirement fails the test instead, so a suite never
// passes by silently skipping its real work.
package testenv

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// RequireRoot skips t unless the test runs as root; under CI it fails.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("test needs root, and CI must run as root")
	}
	t.Skip("skipping: test needs root (it runs in CI, which is root)")
}

// LockFirewall holds a host-wide lock on the sandbox firewall (the nftables
// table inet agent_sandbox) until t ends. Its rules match every sandbox
// interface on the host, so tests in different packages (run in parallel
// by go test) that install it must take turns. Call it first, so that it
// is released after the test's own cleanup.
func LockFirewall(t testing.TB) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "agent-sandbox-firewall-test.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatalf("opening the firewall test lock: %v", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatalf("locking the firewall test lock: %v", err)
	}
	t.Cleanup(func() { f.Close() }) // closing releases the lock
}
