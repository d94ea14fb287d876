package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	processpb "github.com/agent-sandbox/agent-sandbox/gen/process"
)

// PTYOptions configures Sandbox.PTY.
type PTYOptions struct {
	// Cols and Rows are the initial window size; zero means 80 by 24.
	Cols, Rows int
	// User runs the shell as this user; "" means envd's default user.
	User string
	// Cwd is the working directory; "" means the default workdir or home.
	Cwd string
	// Envs are added to the environment. TERM=xterm-256color,
	// LANG=C.UTF-8 and LC_ALL=C.UTF-8 are set unless Envs overrides them.
	Envs map[string]string
}

// PTY is an interactive login shell ("/bin/bash -i -l") on a
// pseudo-terminal in the sandbox. Write sends keystrokes, Output yields
// what the terminal prints, Resize follows the local window, and Wait
// returns the shell's exit code.
//
// Output must be read until EOF: the PTY does not buffer, so an unread
// Output stalls the stream, and Wait with it.
type PTY struct {
	sb     *Sandbox
	pid    uint32
	out    *io.PipeReader
	cancel context.CancelFunc // ends the output stream
	done   chan struct{}      // closed when the output stream has ended

	// Written before done is closed, read after.
	exitCode int
	err      error
}

// PTY starts an interactive shell. The output stream lives until the shell
// exits, ctx is canceled or Close is called; a deadline on ctx is sent to
// envd, which kills the shell when it passes. Canceling ctx alone does not
// kill the shell; call Kill for that.
func (s *Sandbox) PTY(ctx context.Context, opts PTYOptions) (*PTY, error) {
	cols, rows := opts.Cols, opts.Rows
	if cols <= 0 || rows <= 0 {
		cols, rows = 80, 24
	}
	envs := map[string]string{"TERM": "xterm-256color", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
	maps.Copy(envs, opts.Envs)
	cfg := &processpb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-i", "-l"}, Envs: envs}
	if opts.Cwd != "" {
		cfg.Cwd = proto.String(opts.Cwd)
	}
	req := connect.NewRequest(&processpb.StartRequest{Process: cfg, Pty: ptySize(cols, rows)})
	setUser(req.Header(), opts.User)
	req.Header().Set("Keepalive-Ping-Interval", keepaliveSeconds)

	streamCtx, cancel := context.WithCancel(ctx)
	stream, err := s.process.Start(streamCtx, req)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("starting shell in sandbox %s: %w", s.ID, envdError(err))
	}
	pid, err := receiveStart(stream)
	if err != nil {
		stream.Close()
		cancel()
		return nil, fmt.Errorf("starting shell in sandbox %s: %w", s.ID, err)
	}
	pr, pw := io.Pipe()
	p := &PTY{sb: s, pid: pid, out: pr, cancel: cancel, done: make(chan struct{}), exitCode: -1}
	go p.pump(stream, pw)
	return p, nil
}

// pump copies the output stream into pw until the end event or an error.
func (p *PTY) pump(stream interface {
	startStream
	Close() error
}, pw *io.PipeWriter) {
	defer close(p.done)
	defer stream.Close()
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if b := ev.GetData().GetPty(); len(b) > 0 {
			if _, err := pw.Write(b); err != nil {
				// Close was called; stop.
				p.err = fmt.Errorf("shell %d: output closed", p.pid)
				pw.Close()
				return
			}
		}
		if end := ev.GetEnd(); end != nil {
			p.exitCode = int(end.GetExitCode())
			pw.Close()
			return
		}
	}
	err := stream.Err()
	if err == nil {
		err = errors.New("output stream ended without an end event")
	}
	p.err = fmt.Errorf("shell %d: %w", p.pid, envdError(err))
	pw.CloseWithError(p.err)
}

// PID returns the shell's process ID inside the sandbox.
func (p *PTY) PID() uint32 { return p.pid }

// Output returns the terminal's output. It reaches EOF when the shell
// exits, and fails if the stream breaks first.
func (p *PTY) Output() io.Reader { return p.out }

// Write sends b to the terminal as typed input. It implements io.Writer.
func (p *PTY) Write(b []byte) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), controlTimeout)
	defer cancel()
	_, err := p.sb.process.SendInput(ctx, connect.NewRequest(&processpb.SendInputRequest{
		Process: selector(p.pid),
		Input:   &processpb.ProcessInput{Input: &processpb.ProcessInput_Pty{Pty: b}},
	}))
	if err != nil {
		return 0, fmt.Errorf("writing to shell %d: %w", p.pid, envdError(err))
	}
	return len(b), nil
}

// Resize sets the terminal's window size.
func (p *PTY) Resize(ctx context.Context, cols, rows int) error {
	_, err := p.sb.process.Update(ctx, connect.NewRequest(&processpb.UpdateRequest{
		Process: selector(p.pid),
		Pty:     ptySize(cols, rows),
	}))
	if err != nil {
		return fmt.Errorf("resizing shell %d: %w", p.pid, envdError(err))
	}
	return nil
}

// Kill kills the shell with SIGKILL. A shell that has already exited gives
// an error matching ErrNotFound.
func (p *PTY) Kill(ctx context.Context) error { return p.sb.killProcess(ctx, p.pid) }

// Wait waits for the output stream to end and returns the shell's exit code
// (-1 if a signal killed it). The error is set when the stream ended for
// another reason than the shell's exit.
func (p *PTY) Wait() (int, error) {
	<-p.done
	return p.exitCode, p.err
}

// Close stops receiving output and releases the stream. It does not kill
// the shell. It is safe to call more than once.
func (p *PTY) Close() error {
	p.cancel()
	p.out.Close()
	<-p.done
	return nil
}

func ptySize(cols, rows int) *processpb.PTY {
	return &processpb.PTY{Size: &processpb.PTY_Size{Cols: uint32(max(cols, 1)), Rows: uint32(max(rows, 1))}}
}
