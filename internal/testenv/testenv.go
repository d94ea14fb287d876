// Package testenv holds helpers that make tests say why they skip. Tests that
// need something of the host (root, user namespaces, mkfs.ext4, Debian's
// ipykernel, ...) run in CI, which provides it, and skip with a reason
// elsewhere; in CI (CI=true) a missing requirement fails the test instead, so
// a suite never passes by silently skipping its real work. A skip that is not
// a missing requirement (an architecture without the feature, -short, a fuzz
// input outside the target) says so in a comment "not a CI requirement",
// which TestSkipsAreRequirements checks.
package testenv

import (
	"errors"
	"os"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/hostlock"
)

// Require skips t, with reason, unless ok; under CI it fails t instead.
// reason says what the test needs and, where it helps, how to get it.
func Require(t testing.TB, ok bool, reason string) {
	t.Helper()
	if ok {
		return
	}
	if os.Getenv("CI") == "true" { // .ci/run sets it
		t.Fatalf("%s; CI must provide what the root tests need (scripts/install-deps.sh --test, run as root), so under CI=true this fails instead of skipping", reason)
	}
	t.Skip("skipping: " + reason)
}

// RequireRoot skips t unless the test runs as root; under CI it fails.
func RequireRoot(t testing.TB) {
	t.Helper()
	Require(t, os.Geteuid() == 0, "test needs root (it runs in CI, which is root)")
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
