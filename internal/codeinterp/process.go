package codeinterp

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ProcessRuntime is a persistent interpreter process that speaks the
// kernel protocol of node/kernel.js and java/Kernel.java: requests as JSON
// lines on its fd 3, messages as JSON lines on its fd 4.
//
//	{type:"execute", id, code, count} -> stdout/stderr, result, display, error..., end
//	{type:"setenv", id, vars}          -> env   (the previous values are kept under id)
//	{type:"restoreenv", id, token}     -> env   (puts back what setenv token changed)
//
// What the cell writes through the language's own stdout and stderr
// travels as messages, in order with its results. Output that child
// processes write to the real fds 1 and 2 is read from pipes and ends up
// before the end of the execution: before "end" the kernel writes a marker
// line (the mark, its last argument, then the request id) to both fds, as
// in BashRuntime.
//
// Interrupting sends SIGINT, which the kernel turns into stopping the cell
// while keeping its state. If the kernel does not end the cell within
// processInterruptTimeout, the process is killed, the runtime reports
// itself dead and the server starts a fresh one.
type ProcessRuntime struct {
	*interpreter
	// prepare, if set, rewrites each cell before the process sees it; a
	// cell it refuses is reported as the Error output it returns.
	prepare func(code string, count int) (string, *Output)

	mu    sync.Mutex // serializes requests; guards seq and count
	seq   int
	count int
}

var _ Runtime = (*ProcessRuntime)(nil)

const (
	processStartTimeout     = 30 * time.Second
	processInterruptTimeout = 3 * time.Second
)

// startProcess starts cmd (its Dir set to the context's working
// directory), with the mark as a last argument, as a kernel and waits
// until it says it is ready.
func startProcess(ctx context.Context, name string, cmd *exec.Cmd, prepare func(string, int) (string, *Output)) (*ProcessRuntime, error) {
	prefix := newMarkPrefix()
	cmd.Args = append(cmd.Args, strings.TrimSuffix(prefix[1:], ":"))
	i, err := startInterpreter(name, cmd, prefix, true)
	if err != nil {
		return nil, err
	}
	r := &ProcessRuntime{interpreter: i, prepare: prepare}

	ctx, cancel := context.WithTimeout(ctx, processStartTimeout)
	defer cancel()
	_, err = r.await(ctx, func(e event) bool { return e.msg != nil && e.msg.Type == "ready" }, nil)
	if err != nil {
		// What the interpreter printed (a compile error, a bad flag) says why.
		var out strings.Builder
		for _, e := range r.in.take() {
			out.WriteString(e.text)
		}
		r.Close()
		return nil, fmt.Errorf("starting the %s kernel in %s: %w: %s", name, cmd.Dir, err, strings.TrimSpace(out.String()))
	}
	return r, nil
}

// Execute implements Runtime.
func (r *ProcessRuntime) Execute(ctx context.Context, code string, emit func(Output)) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.count++
	emit(Output{Kind: Count, Count: r.count})
	if r.prepare != nil {
		var refused *Output
		if code, refused = r.prepare(code, r.count); refused != nil {
			emit(*refused)
			return nil
		}
	}
	id, err := r.send(map[string]any{"type": "execute", "code": code, "count": r.count})
	if err != nil {
		return err
	}
	var ended, seenOut, seenErr bool
	_, err = r.await(ctx, func(e event) bool {
		switch {
		case e.isMark:
			if e.marker == id {
				if e.kind == Stdout {
					seenOut = true
				} else {
					seenErr = true
				}
			}
		case e.msg == nil:
			emit(Output{Kind: e.kind, Text: e.text})
		case e.msg.ID != id:
			// A reply to an earlier, abandoned request.
		default:
			m := e.msg
			switch m.Type {
			case "stdout":
				emit(Output{Kind: Stdout, Text: m.Text})
			case "stderr":
				emit(Output{Kind: Stderr, Text: m.Text})
			case "result":
				emit(Output{Kind: Result, Data: m.Data, IsMain: true})
			case "display":
				emit(Output{Kind: Result, Data: m.Data})
			case "error":
				emit(Output{Kind: Error, Name: m.Name, Value: m.Value, Traceback: m.Traceback})
			case "end":
				ended = true
			}
		}
		return ended && seenOut && seenErr
	}, r.interrupt)
	return err
}

// SetEnv implements Runtime. The kernel keeps the previous values itself,
// under the id of the setenv request, so that it restores exactly what it
// changed (Java changes a system property and the environment).
func (r *ProcessRuntime) SetEnv(ctx context.Context, vars map[string]string) (func(context.Context) error, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	token, err := r.envRequest(ctx, map[string]any{"type": "setenv", "vars": vars})
	if err != nil {
		return nil, fmt.Errorf("setting environment variables in %s: %w", r.name, err)
	}
	return func(ctx context.Context) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		if _, err := r.envRequest(ctx, map[string]any{"type": "restoreenv", "token": token}); err != nil {
			return fmt.Errorf("restoring environment variables in %s: %w", r.name, err)
		}
		return nil
	}, nil
}

// envRequest sends a setenv or restoreenv request and waits for its
// answer; it returns the request's id. r.mu is held.
func (r *ProcessRuntime) envRequest(ctx context.Context, req map[string]any) (string, error) {
	id, err := r.send(req)
	if err != nil {
		return "", err
	}
	m, err := r.await(ctx, func(e event) bool {
		return e.msg != nil && e.msg.ID == id && (e.msg.Type == "env" || e.msg.Type == "error")
	}, nil)
	if err != nil {
		return "", err
	}
	if m.msg.Type == "error" {
		return "", fmt.Errorf("%s: %s", m.msg.Name, m.msg.Value)
	}
	return id, nil
}

// send writes a request with a fresh id, after dropping what the kernel
// said between requests. r.mu is held.
func (r *ProcessRuntime) send(req map[string]any) (string, error) {
	r.seq++
	id := strconv.Itoa(r.seq)
	req["id"] = id
	b, err := json.Marshal(req)
	if err != nil {
		return "", fmt.Errorf("encoding a kernel request: %w", err)
	}
	r.in.take()
	if _, err := r.input.Write(append(b, '\n')); err != nil {
		return "", r.exitErr(fmt.Errorf("sending a request to %s: %w", r.name, err))
	}
	return id, nil
}

// await passes events to handle until it returns true, and returns that
// event. When ctx ends, onCancel (if any) is called to interrupt the
// kernel, which is then given processInterruptTimeout to finish before it
// is killed; without onCancel, await returns ctx.Err() at once.
func (r *ProcessRuntime) await(ctx context.Context, handle func(event) bool, onCancel func()) (event, error) {
	done := ctx.Done()
	var giveUp <-chan time.Time
	for {
		select {
		case <-r.in.notify:
			for _, e := range r.in.take() {
				if handle(e) {
					return e, nil
				}
			}
		case <-r.exited:
			return event{}, r.exitErr(nil)
		case <-done:
			if onCancel == nil {
				return event{}, ctx.Err()
			}
			done = nil
			onCancel()
			giveUp = time.After(processInterruptTimeout)
		case <-giveUp:
			r.kill()
			return event{}, fmt.Errorf("%s did not stop after an interrupt and was killed", r.name)
		}
	}
}

func (r *ProcessRuntime) interrupt() {
	signalPID(r.cmd.Process.Pid, syscall.SIGINT)
}
