package template

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/agent-sandbox/agent-sandbox/internal/mountinfo"
)

// unmount unmounts target, lazily if it is busy. Not mounted is not an error.
func unmount(target string) error {
	err := unix.Unmount(target, unix.UMOUNT_NOFOLLOW)
	if errors.Is(err, unix.EBUSY) {
		err = unix.Unmount(target, unix.UMOUNT_NOFOLLOW|unix.MNT_DETACH)
	}
	if err == nil || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
		return nil
	}
	return fmt.Errorf("unmounting %s: %w", target, err)
}

// sweepMounts unmounts everything mounted at or below dir: what a build
// mounted and what a killed debootstrap left behind.
func sweepMounts(dir string) error {
	for range 8 { // stacked mounts need one pass each
		ms, err := mountinfo.Under(dir)
		if err != nil || len(ms) == 0 {
			return err
		}
		var errs []error
		for _, m := range ms {
			errs = append(errs, unmount(m))
		}
		if err := errors.Join(errs...); err != nil {
			return err
		}
	}
	ms, err := mountinfo.Under(dir)
	if err == nil && len(ms) > 0 {
		err = fmt.Errorf("still mounted after unmounting: %s", strings.Join(ms, ", "))
	}
	return err
}

// removeTree removes dir and everything in it, refusing to if anything is
// mounted below it and never descending into a directory on another
// filesystem: a bind-mounted /dev must stop the removal, not be emptied.
func removeTree(dir string) error {
	real, err := filepath.EvalSymlinks(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	if ms, err := mountinfo.Under(real); err != nil {
		return err
	} else if len(ms) > 0 {
		return fmt.Errorf("refusing to remove %s: still mounted: %s", dir, strings.Join(ms, ", "))
	}
	var st unix.Stat_t
	if err := unix.Lstat(real, &st); err != nil {
		return err
	}
	return removeSameDev(real, st.Dev)
}

func removeSameDev(p string, dev uint64) error {
	fi, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	if !fi.IsDir() {
		return ignoreNotExist(os.Remove(p))
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || st.Dev != dev {
		return fmt.Errorf("refusing to remove %s: it is on another filesystem", p)
	}
	entries, err := os.ReadDir(p)
	if err != nil {
		return err
	}
	for _, e := range entries {
		child := filepath.Join(p, e.Name())
		if e.IsDir() {
			if err := removeSameDev(child, dev); err != nil {
				return err
			}
		} else if err := os.Remove(child); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return ignoreNotExist(os.Remove(p))
}

func ignoreNotExist(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}
