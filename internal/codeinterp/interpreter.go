package codeinterp

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"sync"
)

// interpreter is a started interpreter process, the part BashRuntime and
// ProcessRuntime share: the pipe it reads cells or requests from (its
// fd 3), an inbox of what it writes, and how it exited.
type interpreter struct {
	name    string // the interpreter, for errors
	cmd     *exec.Cmd
	input   *os.File   // the process's fd 3
	pipes   []*os.File // the parent's ends of its other pipes
	in      *inbox
	exited  chan struct{} // closed when the process has exited
	waitErr error         // how it exited; read after exited is closed

	closeOnce sync.Once
}

// startInterpreter starts cmd in a process group of its own, with a pipe
// for it to read as fd 3 and its stdout and stderr read into the inbox,
// marker lines with prefix found. With messages, fd 4 is a pipe for it to
// write the JSON lines of the kernel protocol on, read into the inbox too.
func startInterpreter(name string, cmd *exec.Cmd, prefix string, messages bool) (*interpreter, error) {
	prepareCmd(cmd)
	extra := 1
	if messages {
		extra = 2
	}
	p, err := startWithPipes(cmd, extra)
	if err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	i := &interpreter{
		name: name, cmd: cmd, input: p.extra[0], pipes: append([]*os.File{p.stdout, p.stderr}, p.extra[1:]...),
		in: newInbox(), exited: make(chan struct{}),
	}
	go readMarked(p.stdout, Stdout, prefix, i.in)
	go readMarked(p.stderr, Stderr, prefix, i.in)
	if messages {
		go readMessages(p.extra[1], i.in)
	}
	go func() {
		i.waitErr = cmd.Wait()
		close(i.exited)
	}()
	return i, nil
}

// kernelMsg is a message of the kernel protocol (see ProcessRuntime).
type kernelMsg struct {
	Type      string         `json:"type"`
	ID        string         `json:"id"`
	Text      string         `json:"text"`
	Data      map[string]any `json:"data"`
	Name      string         `json:"name"`
	Value     string         `json:"value"`
	Traceback string         `json:"traceback"`
}

// readMessages puts the kernel's protocol messages read from f into in.
func readMessages(f *os.File, in *inbox) {
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 256<<20)
	for sc.Scan() {
		var m kernelMsg
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			continue
		}
		in.put(event{msg: &m})
	}
}

// Close kills the process and everything it started; it is the Close of
// the runtimes built on an interpreter.
func (i *interpreter) Close() error {
	i.closeOnce.Do(func() {
		_ = i.input.Close()
		i.kill()
		<-i.exited
		for _, f := range i.pipes {
			_ = f.Close()
		}
	})
	return nil
}

// kill kills the process and everything it started, without waiting.
func (i *interpreter) kill() {
	killGroup(i.cmd.Process.Pid)
}

// exitErr describes why talking to the process failed, preferring how it
// exited.
func (i *interpreter) exitErr(err error) error {
	select {
	case <-i.exited:
		return fmt.Errorf("%s exited: %v", i.name, i.waitErr)
	default:
		return err
	}
}
