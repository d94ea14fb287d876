package cli

import (
	"io"
	"os"
	"os/signal"

	"golang.org/x/sys/unix"
)

// terminal is the local terminal on standard input, for sandbox shell.
type terminal struct {
	fd    int
	saved unix.Termios // the mode to restore
}

// openTerminal returns the terminal r is, or errNotTerminal.
func openTerminal(r io.Reader) (*terminal, error) {
	f, ok := r.(*os.File)
	if !ok {
		return nil, errNotTerminal
	}
	fd := int(f.Fd())
	saved, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, errNotTerminal
	}
	return &terminal{fd: fd, saved: *saved}, nil
}

// size returns the window size in columns and rows.
func (t *terminal) size() (cols, rows int, err error) {
	ws, err := unix.IoctlGetWinsize(t.fd, unix.TIOCGWINSZ)
	if err != nil {
		return 0, 0, err
	}
	return int(ws.Col), int(ws.Row), nil
}

// makeRaw switches the terminal to raw mode, as cfmakeraw(3) does.
func (t *terminal) makeRaw() error {
	raw := t.saved
	raw.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	raw.Oflag &^= unix.OPOST
	raw.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	raw.Cflag &^= unix.CSIZE | unix.PARENB
	raw.Cflag |= unix.CS8
	raw.Cc[unix.VMIN] = 1
	raw.Cc[unix.VTIME] = 0
	return unix.IoctlSetTermios(t.fd, unix.TCSETS, &raw)
}

// restore puts back the mode the terminal had when it was opened.
func (t *terminal) restore() error {
	return unix.IoctlSetTermios(t.fd, unix.TCSETS, &t.saved)
}

// notifyResize sends on ch (without blocking) at every SIGWINCH until the
// returned function is called.
func (t *terminal) notifyResize(ch chan<- struct{}) (stop func()) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, unix.SIGWINCH)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-sig:
				select {
				case ch <- struct{}{}:
				default:
				}
			}
		}
	}()
	return func() {
		signal.Stop(sig)
		close(done)
	}
}
