package jail

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// makeDisk creates the sparse ext4 image path of sizeMB. No journal: the
// disk is discarded with the sandbox, so crash consistency buys nothing.
func makeDisk(ctx context.Context, path string, sizeMB int) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("creating disk image: %w", err)
	}
	err = f.Truncate(int64(sizeMB) << 20)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sizing disk image: %w", err)
	}
	cmd := exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", "-m", "0",
		"-O", "^has_journal", "-E", "nodiscard,assume_storage_prezeroed=1", path)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("mkfs.ext4: %w: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// loopsBackedBy returns the loop devices (as "loopN") whose backing file is
// path, from /sys/block.
func loopsBackedBy(path string) ([]string, error) {
	matches, err := filepath.Glob("/sys/block/loop*/loop/backing_file")
	if err != nil {
		return nil, err
	}
	var devs []string
	for _, m := range matches {
		b, err := os.ReadFile(m)
		if err != nil {
			continue // detached meanwhile
		}
		if strings.TrimSuffix(string(b), "\n") == path {
			devs = append(devs, filepath.Base(filepath.Dir(filepath.Dir(m))))
		}
	}
	return devs, nil
}

// releaseLoops waits for the loop devices backed by image to detach by
// themselves (LO_FLAGS_AUTOCLEAR, once the sandbox's mount namespace is
// gone) and detaches what is left when ctx ends or after a grace period.
func releaseLoops(ctx context.Context, image string) error {
	deadline := time.Now().Add(2 * time.Second)
	for {
		devs, err := loopsBackedBy(image)
		if err != nil || len(devs) == 0 {
			return err
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			var errs []error
			for _, d := range devs {
				errs = append(errs, detachLoop("/dev/"+d))
			}
			return errors.Join(errs...)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func detachLoop(dev string) error {
	f, err := os.OpenFile(dev, os.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("detaching %s: %w", dev, err)
	}
	defer f.Close()
	if err := unix.IoctlSetInt(int(f.Fd()), unix.LOOP_CLR_FD, 0); err != nil && !errors.Is(err, unix.ENXIO) {
		return fmt.Errorf("detaching %s: %w", dev, err)
	}
	return nil
}

// procStartTime returns field 22 of /proc/<pid>/stat: the process's start
// time in clock ticks after boot, which tells a pid apart from its reuse.
func procStartTime(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// comm (field 2) may contain spaces and parentheses: split after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("parsing /proc/%d/stat", pid)
	}
	fields := strings.Fields(string(b[i+1:]))
	// fields[0] is field 3 (state), so field 22 is fields[19].
	if len(fields) < 20 {
		return 0, fmt.Errorf("parsing /proc/%d/stat: %d fields", pid, len(fields))
	}
	return strconv.ParseUint(fields[19], 10, 64)
}

// removeDir removes a sandbox directory. Nothing is ever mounted in it in
// the host's mount namespace (the mounts live in the sandbox's), so a
// plain recursive removal cannot cross into a mount.
func removeDir(dir string) error {
	if err := os.RemoveAll(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing %s: %w", dir, err)
	}
	return nil
}
