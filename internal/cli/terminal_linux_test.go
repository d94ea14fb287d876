package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

func TestTerminalRawAndRestore(t *testing.T) {
	ptmx, tty, err := pty.Open()
	testenv.Require(t, err == nil, fmt.Sprintf("test needs a pseudo-terminal: %v", err))
	defer ptmx.Close()
	defer tty.Close()
	if err := pty.Setsize(ptmx, &pty.Winsize{Cols: 99, Rows: 33}); err != nil {
		t.Fatal(err)
	}

	if _, err := openTerminal(strings.NewReader("")); !errors.Is(err, errNotTerminal) {
		t.Errorf("openTerminal(non-file) = %v", err)
	}
	term, err := openTerminal(tty)
	if err != nil {
		t.Fatal(err)
	}
	if cols, rows, err := term.size(); err != nil || cols != 99 || rows != 33 {
		t.Errorf("size() = %d, %d, %v; want 99, 33", cols, rows, err)
	}
	if err := term.makeRaw(); err != nil {
		t.Fatal(err)
	}
	raw, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if raw.Lflag&(unix.ECHO|unix.ICANON|unix.ISIG) != 0 || raw.Oflag&unix.OPOST != 0 {
		t.Errorf("raw mode left lflag %#x oflag %#x", raw.Lflag, raw.Oflag)
	}
	if err := term.restore(); err != nil {
		t.Fatal(err)
	}
	back, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if *back != term.saved {
		t.Error("restore did not bring back the saved mode")
	}
}

// TestSandboxShellCommand runs "sandbox shell" end to end with a
// pseudo-terminal as standard input.
func TestSandboxShellCommand(t *testing.T) {
	setup(t)
	ptmx, tty, err := pty.Open()
	testenv.Require(t, err == nil, fmt.Sprintf("test needs a pseudo-terminal: %v", err))
	defer ptmx.Close()
	defer tty.Close()
	if err := pty.Setsize(ptmx, &pty.Winsize{Cols: 101, Rows: 31}); err != nil {
		t.Fatal(err)
	}
	before, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, ptmx) // nothing echoes locally, but keep it drained
	if _, err := io.WriteString(ptmx, "stty size; exit 4\n"); err != nil {
		t.Fatal(err)
	}
	var stdout bytes.Buffer
	err = run(t.Context(), []string{"sandbox", "shell", "sb1"}, streams{stdin: tty, stdout: &stdout, stderr: io.Discard})
	var exit *ExitError
	if !errors.As(err, &exit) || exit.Code != 4 {
		t.Errorf("sandbox shell: %v, want exit code 4", err)
	}
	if !strings.Contains(stdout.String(), "31 101\r\n") {
		t.Errorf("output %q lacks the local window size", stdout.String())
	}
	after, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if *after != *before {
		t.Error("the terminal mode was not restored")
	}
}
