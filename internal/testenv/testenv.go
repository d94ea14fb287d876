// Package testenv holds helpers that make tests say why they skip. Tests that
// need root run in CI (which is root) and skip with a reason elsewhere; in CI
// (CI=true) a missing requirement fails the test instead, so a suite never
// passes by silently skipping its real work.
package testenv

import (
	"errors"
	"os"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/hostlock"
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

// LockFirewall holds the host lock on sandbox networking (hostlock) until t
// ends, waiting for it if a server or another test holds it. The firewall's
// rules match every sandbox interface on the host, so tests in different
// packages (run in parallel by go test) that install it must take turns,
// and none may run under a live server. Call it first, so that it is
// released after the test's own cleanup.
func LockFirewall(t testing.TB) {
	t.Helper()
	release, err := hostlock.Acquire(hostlock.Path, "go test "+t.Name(), false)
	if errors.Is(err, hostlock.ErrHeld) {
		t.Logf("waiting for the host lock on sandbox networking: %v", err)
		release, err = hostlock.Acquire(hostlock.Path, "go test "+t.Name(), true)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
}
