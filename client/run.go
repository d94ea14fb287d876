package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	processpb "github.com/agent-sandbox/agent-sandbox/gen/process"
)

// stdinChunk is the most stdin Run forwards in one SendInput call.
const stdinChunk = 32 << 10

// RunOptions configures Sandbox.Run.
type RunOptions struct {
	// User runs the command as this user; "" means envd's default user.
	User string
	// Cwd is the working directory; "" means the default workdir or the
	// user's home.
	Cwd string
	// Envs are added to the sandbox-wide environment (and win over it).
	Envs map[string]string
	// Stdout and Stderr receive the command's output as it arrives; nil
	// discards it.
	Stdout, Stderr io.Writer
	// Stdin, when set, is copied to the command's standard input, which is
	// closed at EOF. When nil the command's stdin is /dev/null. Run does
	// not wait for a Read on Stdin that is still blocked when the command
	// ends.
	Stdin io.Reader
}

// Run runs cmd with "/bin/bash -l -c" in the sandbox and waits for it to
// end. It returns the command's exit code (-1 if a signal killed it); a
// command that ran and failed is not an error. The error is for a command
// that could not be started or watched to its end, or for output that
// could not be written.
//
// A deadline on ctx is sent to envd, which kills the command when it
// passes. If ctx is canceled, Run kills the command before returning.
func (s *Sandbox) Run(ctx context.Context, cmd string, opts RunOptions) (int, error) {
	code, err := s.run(ctx, cmd, opts)
	if err != nil {
		return code, fmt.Errorf("running command in sandbox %s: %w", s.ID, err)
	}
	return code, nil
}

// Start starts cmd with "/bin/bash -l -c" in the sandbox and returns its
// PID once it runs, without waiting for it: a background command. Its
// output is discarded and opts.Stdin must be nil. A deadline on ctx is the
// command's lifetime: envd kills it when the deadline passes, although
// Start has returned long before.
func (s *Sandbox) Start(ctx context.Context, cmd string, opts RunOptions) (uint32, error) {
	if opts.Stdin != nil {
		return 0, fmt.Errorf("starting command in sandbox %s: a background command takes no stdin", s.ID)
	}
	streamCtx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the output stream; envd keeps the process
	stream, pid, err := s.start(streamCtx, cmd, opts)
	if err != nil {
		return 0, fmt.Errorf("starting command in sandbox %s: %w", s.ID, err)
	}
	stream.Close()
	return pid, nil
}

// start starts cmd and reads its start event.
func (s *Sandbox) start(ctx context.Context, cmd string, opts RunOptions) (*connect.ServerStreamForClient[processpb.StartResponse], uint32, error) {
	cfg := &processpb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", cmd}, Envs: opts.Envs}
	if opts.Cwd != "" {
		cfg.Cwd = proto.String(opts.Cwd)
	}
	req := connect.NewRequest(&processpb.StartRequest{Process: cfg, Stdin: proto.Bool(opts.Stdin != nil)})
	setUser(req.Header(), opts.User)
	req.Header().Set("Keepalive-Ping-Interval", keepaliveSeconds)
	stream, err := s.process.Start(ctx, req)
	if err != nil {
		return nil, 0, envdError(err)
	}
	pid, err := receiveStart(stream)
	if err != nil {
		stream.Close()
		return nil, 0, err
	}
	return stream, pid, nil
}

func (s *Sandbox) run(ctx context.Context, cmd string, opts RunOptions) (int, error) {
	streamCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, pid, err := s.start(streamCtx, cmd, opts)
	if err != nil {
		return -1, err
	}
	defer stream.Close()
	if opts.Stdin != nil {
		go s.copyStdin(streamCtx, pid, opts.Stdin)
	}

	stdout, stderr := &sink{w: opts.Stdout}, &sink{w: opts.Stderr}
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if d := ev.GetData(); d != nil {
			stdout.write(d.GetStdout())
			stderr.write(d.GetStderr())
		}
		if end := ev.GetEnd(); end != nil {
			if !end.GetExited() && atDeadline(ctx) {
				return -1, fmt.Errorf("process %d: killed by envd at the deadline: %w", pid, context.DeadlineExceeded)
			}
			// The trailer follows; the result is known.
			return int(end.GetExitCode()), errors.Join(stdout.err, stderr.err)
		}
	}
	err = stream.Err()
	if err == nil {
		err = errors.New("output stream ended without an end event")
	}
	if ctx.Err() != nil {
		// Canceled by the caller: the command must not outlive Run.
		kctx, kcancel := context.WithTimeout(context.WithoutCancel(ctx), controlTimeout)
		defer kcancel()
		// Best effort: the error to report is ctx's.
		_ = s.killProcess(kctx, pid)
		return -1, fmt.Errorf("process %d: %w", pid, ctx.Err())
	}
	return -1, fmt.Errorf("process %d: %w", pid, envdError(err))
}

// deadlineSlack is how early envd's kill at a command's deadline may
// reach Run: Connect sends the deadline as a timeout in whole
// milliseconds, which envd counts from when the request reached it.
const deadlineSlack = 50 * time.Millisecond

// atDeadline reports whether ctx's deadline has passed or is within
// deadlineSlack: a command that envd killed then was ended by the
// deadline, which Run reports as such, not as a signal's exit code.
func atDeadline(ctx context.Context) bool {
	d, ok := ctx.Deadline()
	return ok && time.Until(d) < deadlineSlack
}

// startStream is what Start and Connect return.
type startStream interface {
	Receive() bool
	Msg() *processpb.StartResponse
	Err() error
}

// receiveStart reads the first event, which must be start{pid}.
func receiveStart(stream startStream) (uint32, error) {
	if !stream.Receive() {
		err := stream.Err()
		if err == nil {
			err = errors.New("output stream ended before the start event")
		}
		return 0, envdError(err)
	}
	start := stream.Msg().GetEvent().GetStart()
	if start == nil {
		return 0, errors.New("first event of the output stream is not a start event")
	}
	return start.GetPid(), nil
}

// copyStdin forwards r to the process's stdin and closes it when r ends.
// SendInput errors end the copy silently: they mean the process has
// exited or Run returned.
func (s *Sandbox) copyStdin(ctx context.Context, pid uint32, r io.Reader) {
	buf := make([]byte, stdinChunk)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			_, serr := s.process.SendInput(ctx, connect.NewRequest(&processpb.SendInputRequest{
				Process: selector(pid),
				Input:   &processpb.ProcessInput{Input: &processpb.ProcessInput_Stdin{Stdin: buf[:n]}},
			}))
			if serr != nil {
				return
			}
		}
		if err != nil {
			// EOF, or a reader that failed: either way there is no more.
			_, _ = s.process.CloseStdin(ctx, connect.NewRequest(&processpb.CloseStdinRequest{Process: selector(pid)}))
			return
		}
	}
}

// sink writes output to w, remembers the first write error and then
// discards the rest, so the command's end is still observed.
type sink struct {
	w   io.Writer
	err error
}

func (s *sink) write(p []byte) {
	if len(p) == 0 || s.w == nil || s.err != nil {
		return
	}
	if _, err := s.w.Write(p); err != nil {
		s.err = fmt.Errorf("writing output: %w", err)
	}
}
