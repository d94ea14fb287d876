package process

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	pb "github.com/agent-sandbox/agent-sandbox/gen/process"
	"github.com/agent-sandbox/agent-sandbox/internal/envd/identity"
)

var (
	// errExited is returned when acting on a process that has already exited.
	errExited = errors.New("process has exited")
	// errStdinClosed is the reference envd's text for input to a process
	// started with stdin: false, or whose stdin was closed.
	errStdinClosed = errors.New("stdin not enabled or closed")
	// errNoTTY and errHasTTY are returned for input or resizes that do not
	// match how the process was started.
	errNoTTY  = errors.New("tty not assigned to process")
	errHasTTY = errors.New("tty assigned to process, input must be sent as pty, not stdin")
)

// proc is one command started by Start. It belongs to the Service, not to
// the stream that started it; a goroutine waits for it, reaps it and
// publishes its end, and one goroutine per output pumps data to subscribers.
type proc struct {
	pid     uint32
	tag     *string
	config  *pb.ProcessConfig // as requested, for List
	started time.Time
	log     *slog.Logger
	cmd     *exec.Cmd

	// tty is the PTY master, nil for pipe processes. It is written by input
	// and resized concurrently with the pump reading it; it is closed (with
	// the other outputs) only after the output has been drained.
	tty *os.File

	stdinMu sync.Mutex // guards stdin (the pointer, not writes to it)
	stdin   *os.File   // write end of the stdin pipe; nil when disabled or closed

	mu     sync.Mutex // guards exited, subs and end
	exited bool       // the child has exited (it may still be an unreaped zombie)
	subs   map[*subscription]struct{}
	end    *pb.ProcessEvent_EndEvent
	done   chan struct{} // closed once end is set and no data will follow

	outputs  []output
	pumps    sync.WaitGroup
	draining atomic.Bool // the child has exited; pumps read only what is left
	exitAt   time.Time   // when the child exited; written before draining is set
}

// spec is everything startProc needs: a command with Path, Args, Env and
// Dir already resolved, and how to wire it up.
type spec struct {
	cmd     *exec.Cmd
	user    *identity.User
	config  *pb.ProcessConfig
	tag     *string
	pty     *pb.PTY // nil for a pipe process
	stdin   bool    // keep a stdin pipe (ignored for PTYs)
	timeout time.Duration
}

// startProc starts the command in sp. The returned proc is not yet being
// waited for or read from: the caller subscribes and registers it first,
// then calls begin, so no early output or exit can be missed.
func startProc(sp spec, log *slog.Logger) (_ *proc, err error) {
	p := &proc{
		tag:    sp.tag,
		config: sp.config,
		cmd:    sp.cmd,
		subs:   map[*subscription]struct{}{},
		done:   make(chan struct{}),
	}
	var childEnds, ourEnds []*os.File // closed after start, and on failure
	defer func() {
		for _, f := range childEnds {
			f.Close()
		}
		if err != nil {
			for _, f := range ourEnds {
				f.Close()
			}
		}
	}()

	cmd := sp.cmd
	if sp.pty != nil {
		master, slave, err := openPTY(sp.pty.GetSize().GetCols(), sp.pty.GetSize().GetRows())
		if err != nil {
			return nil, fmt.Errorf("opening pty: %w", err)
		}
		childEnds, ourEnds = append(childEnds, slave), append(ourEnds, master)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
		p.tty = master
		p.outputs = []output{{f: master, kind: kindPTY, chunk: ptyChunk}}
	} else {
		// Our own pipes rather than cmd.StdoutPipe: exec.Cmd.Wait closes
		// those right after the child exits, losing output still buffered
		// in them; we read until EOF or until the drain gives up.
		for _, kind := range []outputKind{kindStdout, kindStderr} {
			r, w, err := os.Pipe()
			if err != nil {
				return nil, fmt.Errorf("creating %s pipe: %w", kind, err)
			}
			childEnds, ourEnds = append(childEnds, w), append(ourEnds, r)
			p.outputs = append(p.outputs, output{f: r, kind: kind, chunk: pipeChunk})
		}
		cmd.Stdout, cmd.Stderr = childEnds[0], childEnds[1]
		if sp.stdin {
			r, w, err := os.Pipe()
			if err != nil {
				return nil, fmt.Errorf("creating stdin pipe: %w", err)
			}
			childEnds, ourEnds = append(childEnds, r), append(ourEnds, w)
			cmd.Stdin = r
			p.stdin = w
		} // else exec.Cmd connects stdin to /dev/null
	}
	if err := setProcAttrs(cmd, sp.user, sp.pty != nil); err != nil {
		return nil, fmt.Errorf("preparing process attributes: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting process '%s': %w", commandLine(sp.config), err)
	}
	p.pid = uint32(cmd.Process.Pid)
	p.started = time.Now()
	p.log = log.With("pid", p.pid)
	return p, nil
}

// begin starts the goroutines that pump output, enforce timeout (when > 0)
// and wait for the exit. onEnd runs once the end event is published.
func (p *proc) begin(timeout time.Duration, onEnd func(*proc)) {
	for _, o := range p.outputs {
		p.pumps.Add(1)
		go p.pump(o)
	}
	go p.wait(timeout, onEnd)
}

// wait enforces the lifetime, reaps the child, drains its output and
// publishes the end event.
func (p *proc) wait(timeout time.Duration, onEnd func(*proc)) {
	var timer *time.Timer
	if timeout > 0 {
		// The lifetime comes from the Start request but outlives it: the
		// process dies when it elapses even if the client went away.
		timer = time.AfterFunc(timeout, func() {
			err := p.signal(syscall.SIGKILL)
			switch {
			case errors.Is(err, errExited):
			case err != nil:
				p.log.Warn("killing process at end of its timeout", "timeout", timeout, "error", err)
			default:
				p.log.Info("killed process at end of its timeout", "timeout", timeout)
			}
		})
	}

	// Learn of the exit without reaping, so that until exited is set the pid
	// (and process group id) cannot be reused and signal stays safe.
	if err := waitExit(int(p.pid)); err != nil {
		p.log.Warn("waiting for process exit", "error", err)
	}
	p.mu.Lock()
	p.exited = true
	p.mu.Unlock()
	if timer != nil {
		timer.Stop()
	}
	waitErr := p.cmd.Wait() // reaps the child

	p.stdinMu.Lock()
	if p.stdin != nil {
		p.stdin.Close()
		p.stdin = nil
	}
	p.stdinMu.Unlock()

	p.startDrain()
	p.pumps.Wait()
	for _, o := range p.outputs {
		go discard(o.f)
	}

	end := endEvent(p.cmd.ProcessState, waitErr)
	p.mu.Lock()
	p.end = end
	p.mu.Unlock()
	close(p.done)
	p.log.Info("process ended", "status", end.GetStatus(), "exit_code", end.GetExitCode())
	onEnd(p)
}

// endEvent describes how the process ended, in the reference's terms:
// exit code -1 for a signal, status like "exit status 1" or "signal:
// killed", and error (the same text) only when the wait reported one.
func endEvent(ps *os.ProcessState, waitErr error) *pb.ProcessEvent_EndEvent {
	end := &pb.ProcessEvent_EndEvent{ExitCode: -1}
	if ps != nil {
		end.ExitCode = int32(ps.ExitCode())
		end.Exited = ps.Exited()
		end.Status = ps.String()
	}
	if waitErr != nil {
		msg := waitErr.Error()
		end.Error = &msg
		if ps == nil {
			end.Status = msg
		}
	}
	return end
}

// hasExited reports whether the child has exited.
func (p *proc) hasExited() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exited
}

// signal sends sig to the process and its process group (Start puts every
// command in a group of its own), so that killing `bash -c '…'` also kills
// what it started instead of leaving it behind with our pipes open. It
// fails with errExited once the child has exited.
func (p *proc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited {
		return errExited
	}
	return signalGroup(int(p.pid), sig)
}

// writeStdin writes b to the stdin pipe.
func (p *proc) writeStdin(b []byte) error {
	if p.tty != nil {
		return errHasTTY
	}
	p.stdinMu.Lock()
	w := p.stdin
	p.stdinMu.Unlock()
	if w == nil {
		return errStdinClosed
	}
	// Written outside stdinMu: a write to a child that does not read can
	// block, and closing the pipe (CloseStdin, exit) must still unblock it.
	if _, err := w.Write(b); err != nil {
		if errors.Is(err, os.ErrClosed) {
			return errStdinClosed
		}
		return fmt.Errorf("writing to stdin of process %d: %w", p.pid, err)
	}
	return nil
}

// closeStdin closes the stdin pipe so the process reads EOF. Closing an
// already closed or disabled stdin is not an error.
func (p *proc) closeStdin() error {
	if p.tty != nil {
		return errors.New("cannot close stdin of a PTY process, send Ctrl+D (0x04) instead")
	}
	p.stdinMu.Lock()
	defer p.stdinMu.Unlock()
	if p.stdin == nil {
		return nil
	}
	err := p.stdin.Close()
	p.stdin = nil
	return err
}

// writePTY writes b to the PTY, as if typed.
func (p *proc) writePTY(b []byte) error {
	if p.tty == nil {
		return errNoTTY
	}
	if _, err := p.tty.Write(b); err != nil {
		return fmt.Errorf("writing to tty of process %d: %w", p.pid, err)
	}
	return nil
}

// resize sets the PTY window size; the kernel sends SIGWINCH.
func (p *proc) resize(size *pb.PTY_Size) error {
	if p.tty == nil {
		return errNoTTY
	}
	return resizePTY(p.tty, size.GetCols(), size.GetRows())
}

// info is what List reports for p.
func (p *proc) info() *pb.ProcessInfo {
	return &pb.ProcessInfo{Config: p.config, Pid: p.pid, Tag: p.tag}
}
