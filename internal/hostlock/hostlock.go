// Package hostlock is the host-wide lock on sandbox networking. The
// firewall table, the address pool and the host ends of the sandboxes'
// veths exist once per host: a second server (or a test building its own
// firewall) would rewrite the first one's rules under its running
// sandboxes and take their leftovers for its own. So one process at a
// time holds the lock: a server for as long as it runs, a test for its
// duration.
package hostlock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Path is the lock file, on tmpfs: the lock matters only while its holder
// runs, and the kernel drops it when the holder exits.
const Path = "/run/agent-sandbox/network.lock"

// ErrHeld is returned (wrapped) by Acquire without wait when another
// process holds the lock.
var ErrHeld = errors.New("sandbox networking on this host is in use")

// Acquire takes the lock at path for owner, a description of the caller
// that a refused caller is shown. With wait it blocks until the lock is
// free; without, it fails at once with ErrHeld. release gives it back.
func Acquire(path, owner string, wait bool) (release func(), err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("creating the host lock's directory: %w", err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening the host lock: %w", err)
	}
	how := syscall.LOCK_EX
	if !wait {
		how |= syscall.LOCK_NB
	}
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w by %s", ErrHeld, strings.TrimSpace(string(holder)))
		}
		return nil, fmt.Errorf("taking the host lock: %w", err)
	}
	// Only the holder writes the file, so a refused caller reads the
	// current holder.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(fmt.Sprintf("pid %d (%s)\n", os.Getpid(), owner)), 0)
	}
	return func() { f.Close() }, nil
}
