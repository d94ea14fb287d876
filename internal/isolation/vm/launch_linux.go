package vm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"

	"github.com/agent-sandbox/agent-sandbox/internal/cgroup"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/vm/qmp"
	"github.com/agent-sandbox/agent-sandbox/internal/network"
	"github.com/agent-sandbox/agent-sandbox/internal/proc"
	"golang.org/x/sys/unix"
)

// launchFiles are what a VM runs on, by host path (the tap, already open).
type launchFiles struct {
	qmp     string // where to make the monitor's socket
	tap     *os.File
	kernel  string
	initrd  string
	overlay string
	image   string
	tools   string
}

// launch starts QEMU for m, stopped (-S), as uid in cg, and connects to
// its monitor. On error nothing is left running.
func (b *Backend) launch(ctx context.Context, ns *network.Namespace, m *machine, lf launchFiles, uid uint32, cg *cgroup.Cgroup) (_ *Instance, err error) {
	var opened []*os.File // closed once QEMU has its copies
	defer func() {
		for _, f := range opened {
			f.Close()
		}
	}()
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: lf.qmp, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("making QEMU's monitor socket: %w", err)
	}
	l.SetUnlinkOnClose(false) // the socket lives on in QEMU
	lfile, err := l.File()
	l.Close()
	if err != nil {
		return nil, fmt.Errorf("making QEMU's monitor socket: %w", err)
	}
	opened = append(opened, lfile)
	for _, o := range []struct {
		path string
		flag int
	}{
		{lf.kernel, os.O_RDONLY}, {lf.initrd, os.O_RDONLY},
		{lf.overlay, os.O_RDWR}, {lf.overlay, os.O_RDONLY},
		{lf.image, os.O_RDONLY}, {lf.tools, os.O_RDONLY},
	} {
		f, err := os.OpenFile(o.path, o.flag|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("opening what QEMU runs on: %w", err)
		}
		opened = append(opened, f)
	}
	console := &tail{max: consoleTail}
	cmd := exec.Command(b.cfg.QEMU, m.args()...)
	cmd.Env = []string{}
	cmd.Dir = "/"
	// fds 3 on: qmpFd, tapFd, kernelFd, initrdFd, overlayFd, overlayROFd, imageFd, toolsFd
	cmd.ExtraFiles = append([]*os.File{lfile, lf.tap}, opened[1:]...)
	cmd.Stdout, cmd.Stderr = console, console
	// A restored guest's init reads its identity from the console.
	var consoleIn io.WriteCloser
	if m.incoming {
		if consoleIn, err = cmd.StdinPipe(); err != nil {
			return nil, fmt.Errorf("making the console's input: %w", err)
		}
	}
	cmd.SysProcAttr = &unix.SysProcAttr{
		Setsid:     true,
		Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}},
	}
	if cg.Mode() == cgroup.V2 {
		fd, err := cg.OpenDir()
		if err != nil {
			return nil, err
		}
		defer fd.Close()
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = int(fd.Fd())
	}
	// From a thread in the sandbox's network namespace: QEMU needs no
	// network of its own (its NIC is the tap), and so has none of the host's.
	if err := ns.Do(cmd.Start); err != nil {
		return nil, fmt.Errorf("starting QEMU: %w", err)
	}
	// QEMU has its copies. The monitor's listener must be QEMU's alone:
	// were ours open, a QEMU that exits before its greeting would leave
	// qmp.Dial connected to a listener nobody accepts on, for ever.
	for _, f := range opened {
		f.Close()
	}
	opened = nil
	inst := newInstance(b, m.id, cg, nil)
	inst.pid, inst.console, inst.consoleIn = cmd.Process.Pid, console, consoleIn
	inst.signal = func(sig unix.Signal) error { return ignoreDone(cmd.Process.Signal(sig)) }
	go func() {
		err := cmd.Wait()
		reason := "QEMU exited"
		if err != nil {
			reason += ": " + err.Error()
		}
		inst.finish(reason)
	}()
	defer func() {
		if err != nil {
			_ = inst.kill(context.WithoutCancel(ctx))
		}
	}()
	if inst.start, err = proc.StartTime(inst.pid); err != nil {
		return nil, fmt.Errorf("reading QEMU's start time: %w", err)
	}
	if cg.Mode() != cgroup.V2 {
		if err := cg.Add(inst.pid); err != nil {
			return nil, err
		}
	}
	inst.qmp, err = qmp.Dial(ctx, lf.qmp)
	if err != nil {
		return nil, fmt.Errorf("connecting to QEMU's monitor: %w%s", err, console.quote())
	}
	return inst, nil
}

func ignoreDone(err error) error {
	if errors.Is(err, os.ErrProcessDone) {
		return nil
	}
	return err
}

// consoleTail is how much of the guest's console (and QEMU's own
// messages) a VM keeps, for its exit reason.
const consoleTail = 16 << 10

// tail keeps the last max bytes written to it.
type tail struct {
	max     int
	mu      sync.Mutex
	buf     []byte
	written chan struct{} // closed and replaced at each Write
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.written != nil {
		close(t.written)
		t.written = nil
	}
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tail) bytes() []byte {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return bytes.Clone(t.buf)
}

// waitLine waits until a line of the console starts with one of
// prefixes, and returns it (without the newline).
func (t *tail) waitLine(ctx context.Context, prefixes ...string) (string, error) {
	for {
		t.mu.Lock()
		lines := bytes.Split(t.buf, []byte("\n"))
		for _, line := range lines[:len(lines)-1] { // the last is not ended yet
			for _, p := range prefixes {
				if bytes.HasPrefix(line, []byte(p)) {
					t.mu.Unlock()
					return string(bytes.TrimRight(line, "\r")), nil
				}
			}
		}
		if t.written == nil {
			t.written = make(chan struct{})
		}
		written := t.written
		t.mu.Unlock()
		select {
		case <-written:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

// quote is the last KiB of the console, for an error message.
func (t *tail) quote() string {
	b := t.bytes()
	if len(b) == 0 {
		return ""
	}
	if len(b) > 1024 {
		b = b[len(b)-1024:]
	}
	return "; console: " + strconv.Quote(string(bytes.TrimSpace(b)))
}
