package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/agent-sandbox/agent-sandbox/client"
)

var errNotTerminal = errors.New(`standard input is not a terminal (to run a command without one, use "agent-sandbox sandbox exec")`)

var sandboxShellCommand = &command{
	name:    "sandbox shell",
	args:    "ID",
	summary: "open an interactive shell in a sandbox",
	detail: `Open an interactive login shell (bash) on a pseudo-terminal in a sandbox.
The local terminal is switched to raw mode, so keys such as Ctrl-C go to the
sandbox, and restored on exit; window size changes are passed on. The
command exits with the shell's exit code. Standard input must be a terminal.`,
	env:          true,
	interspersed: true,
	setup: func(fs *flag.FlagSet) func(context.Context, []string, streams) error {
		server := addServerFlags(fs)
		user := fs.String("user", "", "log in as this `USER` (default: the sandbox's default user)")
		cwd := fs.String("cwd", "", "start in this `DIR` (default: the user's home)")
		return func(ctx context.Context, args []string, std streams) error {
			if len(args) != 1 {
				return errors.New("want exactly one sandbox ID")
			}
			term, err := openTerminal(std.stdin)
			if err != nil {
				return err
			}
			c, err := server.client()
			if err != nil {
				return err
			}
			sb, err := c.Connect(ctx, args[0], client.ConnectOptions{})
			if err != nil {
				return explain(c, err)
			}
			cols, rows, err := term.size()
			if err != nil {
				return err
			}
			if err := term.makeRaw(); err != nil {
				return err
			}
			defer term.restore()
			resized := make(chan struct{}, 1)
			defer term.notifyResize(resized)()
			code, err := shell(ctx, sb, client.PTYOptions{Cols: cols, Rows: rows, User: *user, Cwd: *cwd},
				std.stdin, std.stdout, resized, term.size)
			if err != nil {
				return err
			}
			return exitError(code)
		}
	},
}

// shell runs an interactive shell in sb: in is typed into it, its output
// goes to out, and every signal on resized resends the window size.
func shell(ctx context.Context, sb *client.Sandbox, opts client.PTYOptions, in io.Reader, out io.Writer,
	resized <-chan struct{}, size func() (cols, rows int, err error)) (int, error) {
	p, err := sb.PTY(ctx, opts)
	if err != nil {
		return 0, err
	}
	defer p.Close()
	// The copy ends when in does. For a terminal that is never: the
	// goroutine stays blocked in Read until the program exits.
	// Typing into an exited shell fails; there is nothing to report.
	go io.Copy(p, in)

	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case <-done:
				return
			case <-resized:
				if cols, rows, err := size(); err == nil {
					_ = p.Resize(ctx, cols, rows) // the next resize tries again
				}
			}
		}
	}()

	_, copyErr := io.Copy(out, p.Output())
	code, err := p.Wait()
	if err = errors.Join(err, copyErr); err != nil {
		// The stream broke, not the shell: do not leave it behind.
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = p.Kill(kctx) // best effort
		return 0, fmt.Errorf("shell in sandbox %s: %w", sb.ID, err)
	}
	return code, nil
}
