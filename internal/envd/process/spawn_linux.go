package process

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/agent-sandbox/agent-sandbox/internal/envd/identity"
)

// setProcAttrs makes cmd run as u, in a process group of its own (a new
// session with the PTY as controlling terminal for PTYs), so that signals
// and timeouts reach everything the command started.
func setProcAttrs(cmd *exec.Cmd, u *identity.User, withPTY bool) error {
	attr := &syscall.SysProcAttr{}
	if withPTY {
		attr.Setsid = true
		attr.Setctty = true
		attr.Ctty = 0 // the child's stdin, which is the PTY slave
	} else {
		attr.Setpgid = true
	}
	// An unprivileged envd (a developer's machine) cannot switch users, but
	// may still run commands as itself.
	if euid := os.Geteuid(); euid == 0 || uint32(euid) != u.UID {
		attr.Credential = &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: u.Groups}
	}
	cmd.SysProcAttr = attr
	return nil
}

// openPTY opens a PTY pair with the given window size. The master is
// returned in non-blocking mode so that read deadlines work on it.
func openPTY(cols, rows uint32) (master, slave *os.File, err error) {
	m, s, err := pty.Open()
	if err != nil {
		return nil, nil, err
	}
	defer m.Close() // replaced by the non-blocking duplicate below
	if err := pty.Setsize(m, &pty.Winsize{Cols: uint16(cols), Rows: uint16(rows)}); err != nil {
		s.Close()
		return nil, nil, fmt.Errorf("setting pty size: %w", err)
	}
	// pty.Open leaves the master in blocking mode (it calls Fd), where Go
	// cannot interrupt a read. A non-blocking duplicate is registered with
	// the runtime poller by os.NewFile.
	fd, err := unix.FcntlInt(m.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		s.Close()
		return nil, nil, fmt.Errorf("duplicating pty master: %w", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		s.Close()
		return nil, nil, fmt.Errorf("making pty master non-blocking: %w", err)
	}
	return os.NewFile(uintptr(fd), m.Name()), s, nil
}

// resizePTY sets the window size of the PTY whose master is f. It goes
// through SyscallConn rather than pty.Setsize, which would put f back into
// blocking mode.
func resizePTY(f *os.File, cols, rows uint32) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return fmt.Errorf("resizing pty: %w", err)
	}
	ws := &unix.Winsize{Col: uint16(cols), Row: uint16(rows)}
	var ioctlErr error
	if err := rc.Control(func(fd uintptr) {
		ioctlErr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, ws)
	}); err != nil {
		return fmt.Errorf("resizing pty: %w", err)
	}
	if ioctlErr != nil {
		return fmt.Errorf("resizing pty: %w", ioctlErr)
	}
	return nil
}

// waitExit blocks until the child pid has exited, leaving it unreaped (a
// zombie) so that exec.Cmd.Wait still collects its status.
func waitExit(pid int) error {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// signalGroup sends sig to pid and to the process group it leads. The
// process itself is signalled first and on its own, in case it has moved
// to another group.
func signalGroup(pid int, sig syscall.Signal) error {
	if err := unix.Kill(pid, sig); err != nil {
		return fmt.Errorf("signalling process %d: %w", pid, err)
	}
	if err := unix.Kill(-pid, sig); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("signalling process group %d: %w", pid, err)
	}
	return nil
}
