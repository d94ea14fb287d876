package guest

import (
	"os"
	"os/signal"

	"golang.org/x/sys/unix"
)

// DropSignals has a sandbox's init catch and drop the signals that would
// end a Go program by default: only the host ends a sandbox (and in a VM,
// PID 1 ending panics the guest's kernel). Caught, not ignored, so that
// envd, which init starts, does not inherit SIG_IGN.
func DropSignals() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, unix.SIGHUP, unix.SIGINT, unix.SIGTERM, unix.SIGQUIT,
		unix.SIGUSR1, unix.SIGUSR2, unix.SIGPIPE, unix.SIGALRM, unix.SIGVTALRM, unix.SIGPROF)
	go func() {
		for range sigs {
		}
	}()
}
