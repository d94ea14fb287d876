package envd

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestCloexecFrom checks the fallback harden takes where close_range
// refuses CLOSE_RANGE_CLOEXEC (gVisor): a descriptor from first on is
// marked, one below is left alone.
func TestCloexecFrom(t *testing.T) {
	var fds [2]int
	for i := range fds {
		fd, err := unix.Open("/dev/null", unix.O_RDONLY, 0) // inheritable
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		fds[i] = fd
	}
	lo, hi := min(fds[0], fds[1]), max(fds[0], fds[1])
	if err := cloexecFrom(hi); err != nil {
		t.Fatal(err)
	}
	for fd, want := range map[int]bool{lo: false, hi: true} {
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got := flags&unix.FD_CLOEXEC != 0; got != want {
			t.Errorf("descriptor %d close-on-exec: %v, want %v", fd, got, want)
		}
	}
}
