package guest

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Confine restricts the calling process and whatever it executes: the
// capability bounding set drops to Docker's default set (keptCaps),
// no_new_privs is set if asked, and the seccomp deny list is loaded on
// every thread. Capabilities and no_new_privs are per thread: the caller
// must have locked its OS thread, and fork or exec from it.
func Confine(noNewPrivs bool) error {
	if err := dropCapabilities(); err != nil {
		return err
	}
	if noNewPrivs {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("setting no_new_privs: %w", err)
		}
	}
	return loadSeccomp()
}
