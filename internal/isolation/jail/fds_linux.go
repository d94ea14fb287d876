package jail

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// closeInheritedFds closes every descriptor above last that would survive
// an exec: init's and the envd stage's inheritance from the server beyond
// what it hands them (0 to last), which would otherwise pass on to envd and
// to every process in the sandbox. A server inherits descriptors without
// close-on-exec from whatever started it (a shell's or a supervisor's pipe,
// say), and os/exec passes those to its children along with ExtraFiles.
//
// Descriptors that are close-on-exec are left alone: they cannot cross an
// exec, and the Go runtime opens its own (the netpoller's) that way, which
// is why this is not a blind close_range(last+1, ~0).
func closeInheritedFds(last int) error {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return fmt.Errorf("listing inherited descriptors: %w", err)
	}
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd <= last {
			continue
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil {
			continue // the directory's own descriptor, closed by now
		}
		if flags&unix.FD_CLOEXEC == 0 {
			if err := unix.Close(fd); err != nil {
				return fmt.Errorf("closing inherited descriptor %d: %w", fd, err)
			}
		}
	}
	return nil
}
