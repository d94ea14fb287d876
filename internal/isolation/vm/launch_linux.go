package vm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
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
	console string // where to make the console's socket
	tap     *os.File
	kernel  string
	initrd  string
	overlay string
	image   string
	tools   string
	volumes []string // the volumes' images, in machine.volumes' order
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
	sockets := make([]*os.File, 2) // the monitor's and the console's
	for i, path := range []string{lf.qmp, lf.console} {
		if sockets[i], err = listenFile(path); err != nil {
			return nil, err
		}
		opened = append(opened, sockets[i])
	}
	type file struct {
		path string
		flag int
	}
	open := func(fs ...file) ([]*os.File, error) {
		var out []*os.File
		for _, o := range fs {
			f, err := os.OpenFile(o.path, o.flag|unix.O_CLOEXEC, 0)
			if err != nil {
				return nil, fmt.Errorf("opening what QEMU runs on: %w", err)
			}
			opened = append(opened, f)
			out = append(out, f)
		}
		return out, nil
	}
	disks, err := open(
		file{lf.kernel, os.O_RDONLY}, file{lf.initrd, os.O_RDONLY},
		file{lf.overlay, os.O_RDWR}, file{lf.overlay, os.O_RDONLY},
		file{lf.image, os.O_RDONLY}, file{lf.tools, os.O_RDONLY},
	)
	if err != nil {
		return nil, err
	}
	var vols []file
	for _, v := range lf.volumes {
		vols = append(vols, file{v, os.O_RDWR}, file{v, os.O_RDONLY})
	}
	volumes, err := open(vols...)
	if err != nil {
		return nil, err
	}
	files := append([]*os.File{sockets[0], lf.tap}, disks...)
	files = append(files, sockets[1])
	files = append(files, volumes...)
	console := newTail()
	cmd := exec.Command(b.cfg.QEMU, m.args()...)
	cmd.Env = []string{}
	cmd.Dir = "/"
	// fds 3 on: qmpFd, tapFd, kernelFd, initrdFd, overlayFd, overlayROFd,
	// imageFd, toolsFd, consoleFd, then volumeFd(i) and the one after it
	// for each volume.
	cmd.ExtraFiles = files
	// QEMU's own messages; the guest's come over the console socket.
	cmd.Stdout, cmd.Stderr = console, console
	groups := []uint32{}
	if m.accel == AccelKVM && b.kvm.GID != 0 {
		groups = append(groups, b.kvm.GID) // to open /dev/kvm, its one host path
	}
	cmd.SysProcAttr = &unix.SysProcAttr{
		Setsid:       true,
		Credential:   &syscall.Credential{Uid: uid, Gid: uid, Groups: groups},
		Unshareflags: unix.CLONE_NEWNS,
		Chroot:       b.root,
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
	// QEMU has its copies. Its sockets' listeners must be QEMU's alone:
	// were ours open, a QEMU that exits before it accepts would leave a
	// connection to a listener nobody accepts on.
	for _, f := range opened {
		f.Close()
	}
	opened = nil
	inst := newInstance(b, m.id, cg, nil, console)
	inst.pid = cmd.Process.Pid
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
	// A QEMU that exits at start (bad accelerator, bad image) never
	// greets: stop waiting then, with what it said.
	dialCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-inst.Done():
			cancel()
		case <-dialCtx.Done():
		}
	}()
	if err := inst.connectConsole(dialCtx, lf.console); err != nil {
		return nil, err
	}
	inst.qmp, err = qmp.Dial(dialCtx, lf.qmp)
	if err != nil {
		select {
		case <-inst.Done():
			err = errors.New(inst.Exit().Reason)
		default:
		}
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

// listenFile makes a listening unix socket at path for QEMU to inherit.
func listenFile(path string) (*os.File, error) {
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("making QEMU's socket %s: %w", path, err)
	}
	l.SetUnlinkOnClose(false) // the socket lives on in QEMU
	f, err := l.File()
	l.Close()
	if err != nil {
		return nil, fmt.Errorf("making QEMU's socket %s: %w", path, err)
	}
	return f, nil
}
