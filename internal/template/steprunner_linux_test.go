package template

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// hostRunner is the StepRunner of the engine's unit tests: it runs a step
// chrooted into an overlay of its layers on the host, as host root on the
// host's network. It tests how the engine layers, caches and flattens, not
// how a step is contained; the server's runner (sandbox.Manager.RunStep)
// and its tests do that. Only the tests' own commands ever run in it.
type hostRunner struct {
	t     testing.TB
	calls int // steps run
}

var _ StepRunner = (*hostRunner)(nil)

// RunStep implements StepRunner.
func (r *hostRunner) RunStep(ctx context.Context, s StepSpec) (int, error) {
	r.calls++
	if s.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, s.Timeout, ErrStepTimeout)
		defer cancel()
	}
	scratch, err := os.MkdirTemp(filepath.Dir(s.Upper), "host-runner-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(scratch)
	mnt, work := filepath.Join(scratch, "mnt"), filepath.Join(scratch, "work")
	if err := os.Mkdir(work, 0o700); err != nil {
		return 0, err
	}
	opts, err := overlayOpts(s.Layers, s.Upper, work)
	if err != nil {
		return 0, err
	}
	if err := os.Mkdir(mnt, 0o700); err != nil {
		return 0, err
	}
	if err := unix.Mount("overlay", mnt, "overlay", 0, opts); err != nil {
		return 0, fmt.Errorf("mounting step overlay: %w", err)
	}
	var c cleanup
	c.push("unmounting step overlay", func(context.Context) error { return unmount(mnt) })
	defer func() {
		if err := c.run(context.Background()); err != nil {
			r.t.Errorf("host runner: %v", err)
		}
	}()
	if err := mountChroot(mnt, &c); err != nil {
		return 0, err
	}
	root, err := os.OpenRoot(mnt)
	if err != nil {
		return 0, err
	}
	err = mkdirOwnedIn(root, rel(s.Dir), int(s.UID), int(s.GID))
	root.Close()
	if err != nil {
		return 0, err
	}
	pr, pw := io.Pipe()
	cmd := exec.CommandContext(ctx, s.Args[0], s.Args[1:]...)
	cmd.Env, cmd.Dir, cmd.Stdout, cmd.Stderr = s.Env, s.Dir, pw, pw
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Chroot: mnt, Setpgid: true,
		Credential: &syscall.Credential{Uid: s.UID, Gid: s.GID, Groups: s.Groups},
	}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if s.Output != nil {
				s.Output(sc.Text())
			}
		}
	}()
	err = cmd.Run()
	pw.Close()
	<-done
	// Background processes must not keep the overlay busy.
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	if ctx.Err() != nil {
		return 0, context.Cause(ctx)
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws := ee.Sys().(syscall.WaitStatus); ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return ee.ExitCode(), nil
	}
	return 0, err
}

// hostSteps gives b the host runner.
func hostSteps(t testing.TB, b *Builder) *Builder {
	b.Steps = &hostRunner{t: t}
	return b
}

// mountChroot makes rootfs usable as a chroot for package scripts: a fresh
// proc and a read-only sysfs, and the host's /dev bound (not recursively)
// and made private. Each mount pushes its undo onto c before the next one
// is tried.
func mountChroot(rootfs string, c *cleanup) error {
	mounts := []struct {
		source, dir, fstype string
		flags               uintptr
	}{
		{"proc", "proc", "proc", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC},
		{"sysfs", "sys", "sysfs", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC | unix.MS_RDONLY},
		{"/dev", "dev", "", unix.MS_BIND},
	}
	for _, m := range mounts {
		target := filepath.Join(rootfs, m.dir)
		// Never mount through a symlink: it could point out of the rootfs.
		if fi, err := os.Lstat(target); err != nil {
			return fmt.Errorf("mounting %s: %w", target, err)
		} else if !fi.IsDir() {
			return fmt.Errorf("mounting %s: not a directory", target)
		}
		if err := unix.Mount(m.source, target, m.fstype, m.flags, ""); err != nil {
			return fmt.Errorf("mounting %s on %s: %w", m.source, target, err)
		}
		c.push("unmounting "+target, func(context.Context) error { return unmount(target) })
		if m.flags&unix.MS_BIND != 0 {
			if err := unix.Mount("", target, "", unix.MS_PRIVATE, ""); err != nil {
				return fmt.Errorf("making %s private: %w", target, err)
			}
		}
	}
	return nil
}
