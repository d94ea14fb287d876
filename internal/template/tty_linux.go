package template

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// terminalWidth reports whether w is a terminal, and its width.
func terminalWidth(w io.Writer) (bool, int) {
	f, ok := w.(*os.File)
	if !ok {
		return false, 0
	}
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return false, 0
	}
	if ws.Col == 0 {
		return true, 80
	}
	return true, int(ws.Col)
}
