package envd

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// harden is the first thing envd does. It makes envd non-dumpable: its
// /proc/<pid>/mem, environ, fd and the rest then need CAP_SYS_PTRACE,
// which nothing in a sandbox holds, so root in the sandbox cannot read or
// write envd's memory (its code, the access token) while sharing its uid
// and capabilities. The commands envd starts are dumpable again: execve
// resets the flag when the credentials do not change across it.
//
// It also marks every descriptor above stderr close-on-exec: whatever envd
// was handed stays envd's and never reaches a command it starts, which
// gets only the descriptors envd gives it.
func harden() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("making envd non-dumpable: %w", err)
	}
	err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
		// Kernels before 5.11, and gVisor's, refuse the flag or the call.
		err = cloexecFrom(3)
	}
	if err != nil {
		return fmt.Errorf("marking inherited descriptors close-on-exec: %w", err)
	}
	return nil
}

// cloexecFrom marks every open descriptor from first on close-on-exec,
// one by one.
func cloexecFrom(first int) error {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return err
	}
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd < first {
			continue
		}
		// The directory's own descriptor is closed by now: EBADF.
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil && !errors.Is(err, unix.EBADF) {
			return fmt.Errorf("descriptor %d: %w", fd, err)
		}
	}
	return nil
}
