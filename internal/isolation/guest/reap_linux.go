package guest

import (
	"errors"
	"fmt"
	"strconv"

	"golang.org/x/sys/unix"
)

// ReapUntil waits for every child of the calling init (orphans are
// re-parented to it) until pid exits, and returns pid's wait status.
func ReapUntil(pid int) (unix.WaitStatus, error) {
	for {
		var ws unix.WaitStatus
		got, err := unix.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("waiting for children: %w", err)
		}
		if got == pid && (ws.Exited() || ws.Signaled()) {
			return ws, nil
		}
	}
}

// ExitStatus says how a process that ended with ws ended.
func ExitStatus(ws unix.WaitStatus) string {
	switch {
	case ws.Exited():
		return "exit status " + strconv.Itoa(ws.ExitStatus())
	case ws.Signaled():
		return "killed by signal " + unix.SignalName(ws.Signal())
	}
	return fmt.Sprintf("wait status %#x", uint32(ws))
}
