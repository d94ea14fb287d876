package codeinterp

import (
	"bufio"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// kernelJS is the program the JavaScript runtime runs in Node.js.
//
//go:embed node/kernel.js
var kernelJS string

// JavaScriptFactory returns a Factory of JavaScript runtimes (also used for
// TypeScript, which runs unchanged). node is the Node.js binary; "" means
// node on PATH.
func JavaScriptFactory(node string) Factory {
	return func(ctx context.Context, cwd string) (Runtime, error) {
		return StartJavaScript(ctx, node, cwd)
	}
}

// JSRuntime is a persistent Node.js process running node/kernel.js: globals,
// top-level declarations and required modules carry over between
// executions (top-level let, const and class behave like var, so a later
// cell may declare them again).
//
// The kernel takes requests on fd 3 and answers with JSON lines on fd 4;
// what the cell writes with console.* or process.stdout/stderr travels as
// messages on fd 4, in order with its results. Output that child processes
// write to the real stdout and stderr is read from pipes and ends up before
// the end of the execution through marker lines, as in BashRuntime.
//
// Interrupting sends SIGINT: vm's breakOnSigint stops synchronous code (a
// `while(true){}`) and an awaiting cell stops waiting, and the context
// keeps its state. If the kernel does not end the cell within
// jsInterruptTimeout (a loop after an await), the process is killed, the
// runtime reports itself dead and the server starts a fresh one.
type JSRuntime struct {
	cmd     *exec.Cmd
	toNode  *os.File // the kernel's fd 3
	pipes   []*os.File
	in      *inbox
	exited  chan struct{} // closed when node has exited
	waitErr error         // how node exited; read after exited is closed

	closeOnce sync.Once

	mu  sync.Mutex // serializes requests; guards seq
	seq int
}

var _ Runtime = (*JSRuntime)(nil)

// kernelMsg is a message from the kernel.
type kernelMsg struct {
	Type      string             `json:"type"`
	ID        string             `json:"id"`
	Count     int                `json:"count"`
	Text      string             `json:"text"`
	Data      map[string]any     `json:"data"`
	Name      string             `json:"name"`
	Value     string             `json:"value"`
	Traceback string             `json:"traceback"`
	Prev      map[string]*string `json:"prev"`
}

const (
	jsStartTimeout     = 30 * time.Second
	jsInterruptTimeout = 3 * time.Second
)

// StartJavaScript starts a JavaScript runtime in cwd.
func StartJavaScript(ctx context.Context, node, cwd string) (*JSRuntime, error) {
	if node == "" {
		node = "node"
	}
	prefix := newMarkPrefix()
	cmd := exec.Command(node, "--expose-internals", "-e", kernelJS)
	cmd.Dir = cwd
	cmd.Env = append(os.Environ(), "E2B_KERNEL_MARK="+strings.TrimSuffix(prefix[1:], ":"))
	prepareCmd(cmd)
	p, err := startWithPipes(cmd, 2)
	if err != nil {
		return nil, fmt.Errorf("starting node: %w", err)
	}
	j := &JSRuntime{
		cmd: cmd, toNode: p.extra[0], pipes: []*os.File{p.stdout, p.stderr, p.extra[1]},
		in: newInbox(), exited: make(chan struct{}),
	}
	go readMarked(p.stdout, Stdout, prefix, j.in)
	go readMarked(p.stderr, Stderr, prefix, j.in)
	go j.readMessages(p.extra[1])
	go func() {
		j.waitErr = cmd.Wait()
		close(j.exited)
	}()

	ctx, cancel := context.WithTimeout(ctx, jsStartTimeout)
	defer cancel()
	_, err = j.await(ctx, func(e event) bool { return e.msg != nil && e.msg.Type == "ready" }, nil)
	if err != nil {
		// What node printed (a syntax error, a bad flag) says why.
		var out strings.Builder
		for _, e := range j.in.take() {
			out.WriteString(e.text)
		}
		j.Close()
		return nil, fmt.Errorf("starting the node kernel in %s: %w: %s", cwd, err, strings.TrimSpace(out.String()))
	}
	return j, nil
}

// readMessages puts the kernel's protocol messages into the inbox.
func (j *JSRuntime) readMessages(f *os.File) {
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 256<<20)
	for sc.Scan() {
		var m kernelMsg
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			continue
		}
		j.in.put(event{msg: &m})
	}
}

// Execute implements Runtime.
func (j *JSRuntime) Execute(ctx context.Context, code string, emit func(Output)) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	id, err := j.send(map[string]any{"type": "execute", "code": code})
	if err != nil {
		return err
	}
	var ended, seenOut, seenErr bool
	_, err = j.await(ctx, func(e event) bool {
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
			case "count":
				emit(Output{Kind: Count, Count: m.Count})
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
	}, j.interrupt)
	return err
}

// SetEnv implements Runtime.
func (j *JSRuntime) SetEnv(ctx context.Context, vars map[string]string) (func(context.Context) error, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	set := make(map[string]*string, len(vars))
	for k, v := range vars {
		set[k] = &v
	}
	prev, err := j.setenv(ctx, set)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		j.mu.Lock()
		defer j.mu.Unlock()
		_, err := j.setenv(ctx, prev)
		return err
	}, nil
}

// setenv sets (nil: unsets) variables in the kernel and returns their
// previous values. j.mu is held.
func (j *JSRuntime) setenv(ctx context.Context, vars map[string]*string) (map[string]*string, error) {
	id, err := j.send(map[string]any{"type": "setenv", "vars": vars})
	if err != nil {
		return nil, err
	}
	m, err := j.await(ctx, func(e event) bool {
		return e.msg != nil && e.msg.ID == id && e.msg.Type == "env"
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("setting env in node: %w", err)
	}
	return m.msg.Prev, nil
}

// Close implements Runtime: it kills node and everything it started.
func (j *JSRuntime) Close() error {
	j.closeOnce.Do(func() {
		_ = j.toNode.Close()
		killGroup(j.cmd.Process.Pid)
		<-j.exited
		for _, f := range j.pipes {
			_ = f.Close()
		}
	})
	return nil
}

// send writes a request with a fresh id, after dropping what the kernel
// said between requests. j.mu is held.
func (j *JSRuntime) send(req map[string]any) (string, error) {
	j.seq++
	id := strconv.Itoa(j.seq)
	req["id"] = id
	b, err := json.Marshal(req)
	if err != nil {
		return "", fmt.Errorf("encoding a kernel request: %w", err)
	}
	j.in.take()
	if _, err := j.toNode.Write(append(b, '\n')); err != nil {
		return "", j.exitErr(fmt.Errorf("sending a request to node: %w", err))
	}
	return id, nil
}

// await passes events to handle until it returns true, and returns that
// event. When ctx ends, onCancel (if any) is called to interrupt the
// kernel, which is then given jsInterruptTimeout to finish before it is
// killed; without onCancel, await returns ctx.Err() at once.
func (j *JSRuntime) await(ctx context.Context, handle func(event) bool, onCancel func()) (event, error) {
	done := ctx.Done()
	var giveUp <-chan time.Time
	for {
		select {
		case <-j.in.notify:
			for _, e := range j.in.take() {
				if handle(e) {
					return e, nil
				}
			}
		case <-j.exited:
			return event{}, j.exitErr(nil)
		case <-done:
			if onCancel == nil {
				return event{}, ctx.Err()
			}
			done = nil
			onCancel()
			giveUp = time.After(jsInterruptTimeout)
		case <-giveUp:
			killGroup(j.cmd.Process.Pid)
			return event{}, errors.New("node did not stop after an interrupt and was killed")
		}
	}
}

func (j *JSRuntime) interrupt() {
	signalPID(j.cmd.Process.Pid, syscall.SIGINT)
}

// exitErr describes why talking to node failed, preferring how it exited.
func (j *JSRuntime) exitErr(err error) error {
	select {
	case <-j.exited:
		return fmt.Errorf("node exited: %v", j.waitErr)
	default:
		return err
	}
}
