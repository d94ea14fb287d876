package sandbox

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/agent-sandbox/agent-sandbox/gen/process"
)

// ExecError is a command Exec ran that exited non-zero.
type ExecError struct {
	Args   []string
	Code   int
	Stderr string
}

// ExitCode is the command's exit code.
func (e *ExecError) ExitCode() int { return e.Code }

func (e *ExecError) Error() string {
	return fmt.Sprintf("%s exited %d: %s", e.Args[0], e.Code, strings.TrimSpace(e.Stderr))
}

// Exec runs args (no shell) in running sandbox id through its envd, as the
// template's user with env added to the environment, and returns what it
// wrote to stdout once it exits 0; an *ExecError when it exits otherwise.
// It is how the server's own features (the computer-use executor) act in
// a sandbox; what they run is theirs, never a client's command line.
func (m *Manager) Exec(ctx context.Context, id string, env map[string]string, args ...string) ([]byte, error) {
	if len(args) == 0 {
		return nil, errors.New("exec: no command")
	}
	e, err := m.envd(ctx, id)
	if err != nil {
		return nil, err
	}
	out, err := e.output(ctx, env, args...)
	var ee *ExecError
	if err != nil && !errors.As(err, &ee) {
		return nil, fmt.Errorf("running %s in sandbox %s: %w", args[0], id, err)
	}
	return out, err
}

// output runs args (no shell) through e as e's user with env added to the
// environment, and returns what it wrote to stdout once it exits 0; an
// *ExecError when it exits otherwise.
func (e envdConn) output(ctx context.Context, env map[string]string, args ...string) ([]byte, error) {
	stream, err := e.client.Start(ctx, startRequest(e.user, e.token, &process.ProcessConfig{Cmd: args[0], Args: args[1:], Envs: env}))
	if err != nil {
		return nil, err
	}
	defer stream.Close()
	var stdout, stderr bytes.Buffer
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if d := ev.GetData(); d != nil {
			stdout.Write(d.GetStdout())
			stderr.Write(d.GetStderr())
		}
		if end := ev.GetEnd(); end != nil {
			if code := exitCode(end); code != 0 {
				return nil, &ExecError{Args: args, Code: code, Stderr: stderr.String()}
			}
			return stdout.Bytes(), nil
		}
	}
	return nil, cmp.Or(stream.Err(), errors.New("no end event"))
}
