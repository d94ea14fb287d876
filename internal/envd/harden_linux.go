package envd

import (
	"fmt"

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
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return fmt.Errorf("marking inherited descriptors close-on-exec: %w", err)
	}
	return nil
}
