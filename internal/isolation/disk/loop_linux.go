package disk

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// mountOptions are the ext4 options of every disk. noauto_da_alloc: by
// default ext4 starts writeback of a file truncated to zero when it is
// closed after a rewrite (its guard for editors that replace a file in
// place without fsync), and the next truncation of that file waits until
// the writeback through the loop device is done: a second overwrite of a
// 100 MiB file in /files' open with O_TRUNC waited 0.75 s (strace of
// envd), taking uploads from ~1000 to ~120 MB/s. The guard only narrows
// what a crash of the host loses of a file replaced without fsync; fsync
// works as before, and an unmount (a sandbox's stop) writes everything.
const mountOptions = "noauto_da_alloc"

// Mount attaches the image to a free loop device that detaches itself
// once unmounted, and mounts it at dir with flags and mountOptions. It
// returns the device's number, which the host's I/O limits name.
func Mount(image, dir string, flags uintptr) (uint64, error) {
	img, err := os.OpenFile(image, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("opening disk image: %w", err)
	}
	defer img.Close()
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("opening loop control: %w", err)
	}
	defer ctl.Close()
	loopCfg := unix.LoopConfig{Fd: uint32(img.Fd())}
	loopCfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
	copy(loopCfg.Info.File_name[:], image)
	for try := 0; ; try++ {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return 0, fmt.Errorf("finding a free loop device: %w", err)
		}
		dev, err := openLoop(n, filepath.Dir(dir))
		if err != nil {
			return 0, err
		}
		err = unix.IoctlLoopConfigure(int(dev.Fd()), &loopCfg)
		if errors.Is(err, unix.EBUSY) && try < 100 {
			dev.Close() // raced with another sandbox for it
			continue
		}
		if err != nil {
			dev.Close()
			return 0, fmt.Errorf("attaching %s to %s: %w", image, dev.Name(), err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(int(dev.Fd()), &st); err != nil {
			dev.Close()
			return 0, fmt.Errorf("reading the number of %s: %w", dev.Name(), err)
		}
		// With AUTOCLEAR the device detaches at its last close, so it stays
		// open until the mount holds it.
		err = unix.Mount(dev.Name(), dir, "ext4", flags, mountOptions)
		dev.Close()
		if err != nil {
			return 0, fmt.Errorf("mounting %s at %s: %w", dev.Name(), dir, err)
		}
		return st.Rdev, nil
	}
}

// openLoop opens /dev/loop<n>, making a node for it in scratch (a host
// directory of the sandbox) when the host's /dev has none.
func openLoop(n int, scratch string) (*os.File, error) {
	name := fmt.Sprintf("/dev/loop%d", n)
	f, err := os.OpenFile(name, os.O_RDWR|unix.O_CLOEXEC, 0)
	if !errors.Is(err, os.ErrNotExist) {
		return f, err
	}
	node := filepath.Join(scratch, fmt.Sprintf("loop%d", n))
	_ = os.Remove(node)
	if err := unix.Mknod(node, unix.S_IFBLK|0o600, int(unix.Mkdev(7, uint32(n)))); err != nil {
		return nil, fmt.Errorf("making a node for loop%d: %w", n, err)
	}
	defer os.Remove(node)
	return os.OpenFile(node, os.O_RDWR|unix.O_CLOEXEC, 0)
}

// The overlay's directories on a mounted disk: the upper holds the
// sandbox's changes, the work directory is overlayfs's scratch space.
const (
	UpperDir = "upper"
	WorkDir  = "work"
)

// MakeUpper makes the overlay's upper and work directories on the disk
// mounted at diskDir and returns their paths. The merged root directory
// shows the upper's owner and mode: they are made those of top, the root
// of the topmost lower layer (as the overlay will see it, idmapped or
// not).
func MakeUpper(diskDir, top string) (upper, work string, err error) {
	upper, work = filepath.Join(diskDir, UpperDir), filepath.Join(diskDir, WorkDir)
	for _, d := range []string{upper, work} {
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return "", "", err
		}
	}
	var root unix.Stat_t
	if err := unix.Stat(top, &root); err != nil {
		return "", "", fmt.Errorf("reading the template's root %s: %w", top, err)
	}
	if err := os.Lchown(upper, int(root.Uid), int(root.Gid)); err != nil {
		return "", "", err
	}
	if err := unix.Chmod(upper, root.Mode&0o7777); err != nil {
		return "", "", fmt.Errorf("setting the root's mode: %w", err)
	}
	return upper, work, nil
}

// LoopsBackedBy returns the loop devices (as "loopN") whose backing file
// is path, from /sys/block.
func LoopsBackedBy(path string) ([]string, error) {
	names, err := filepath.Glob("/sys/block/loop*")
	if err != nil {
		return nil, err
	}
	var devs []string
	for _, n := range names {
		if dev := filepath.Base(n); loopBacks(dev, path) {
			devs = append(devs, dev)
		}
	}
	return devs, nil
}

// loopBacks reports whether loop device dev ("loopN") is attached to path.
func loopBacks(dev, path string) bool {
	b, err := os.ReadFile("/sys/block/" + dev + "/loop/backing_file")
	return err == nil && strings.TrimSuffix(string(b), "\n") == path
}

// ReleaseLoops waits for the loop devices backed by image to detach by
// themselves (LO_FLAGS_AUTOCLEAR, once the mount namespace that mounted
// it is gone) and detaches what is left when ctx ends or after a grace
// period. The sandbox's processes are gone by now, so nothing attaches
// image again: /sys/block is listed once and only the devices found are
// polled (a host may have hundreds of loop devices, and kills run
// concurrently).
func ReleaseLoops(ctx context.Context, image string) error {
	devs, err := LoopsBackedBy(image)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(2 * time.Second)
	delay := time.Millisecond
	for len(devs) > 0 {
		if time.Now().After(deadline) || ctx.Err() != nil {
			var errs []error
			for _, d := range devs {
				errs = append(errs, detachLoop("/dev/"+d))
			}
			return errors.Join(errs...)
		}
		time.Sleep(delay)
		delay = min(2*delay, 10*time.Millisecond)
		devs = slices.DeleteFunc(devs, func(d string) bool { return !loopBacks(d, image) })
	}
	return nil
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

// MountLive mounts the loop device dev ("loopN"), which holds image and
// is mounted in a running sandbox, read-only at dir. The sandbox has the
// file system mounted read-write, and a read-only mount of the same
// device would ask the shared superblock to change state (EBUSY): the
// device is mounted as it is, and the mount then made read-only.
func MountLive(dev, image, dir string) error {
	n, err := strconv.Atoi(strings.TrimPrefix(dev, "loop"))
	if err != nil {
		return fmt.Errorf("loop device %q: %w", dev, err)
	}
	f, err := openLoop(n, filepath.Dir(dir))
	if err != nil {
		return err
	}
	defer f.Close()
	// Open, it cannot be detached and given to another image meanwhile.
	if !loopBacks(dev, image) {
		return fmt.Errorf("%s no longer holds %s", dev, image)
	}
	const flags = unix.MS_NODEV | unix.MS_NOSUID | unix.MS_NOEXEC
	if err := unix.Mount(fmt.Sprintf("/proc/self/fd/%d", f.Fd()), dir, "ext4", flags, ""); err != nil {
		return fmt.Errorf("mounting %s at %s: %w", dev, dir, err)
	}
	if err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|flags, ""); err != nil {
		return fmt.Errorf("making %s read-only: %w", dir, err)
	}
	return nil
}
