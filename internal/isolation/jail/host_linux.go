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
	"slices"
	"strings"
	"sync"
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

// diskMaker makes sandbox disk images. The first image of each size is
// made by mkfs.ext4 (makeDisk); its data, a few hundred KiB of metadata in
// a sparse file, is kept, and later images of that size are written from
// it: an exec of mkfs costs a create about 4 ms and 5 % of its CPU.
// Every copy has the same filesystem UUID, which ext4 does not mind.
type diskMaker struct {
	mu     sync.Mutex
	bySize map[int][]extent // guarded by mu
}

// extent is a run of data in a sparse file.
type extent struct {
	off  int64
	data []byte
}

// maxDiskData bounds what diskMaker keeps of one image; an mkfs whose
// output is larger is simply run every time.
const maxDiskData = 16 << 20

// make creates the empty ext4 image path of sizeMB.
func (d *diskMaker) make(ctx context.Context, path string, sizeMB int) error {
	d.mu.Lock()
	exts, ok := d.bySize[sizeMB]
	d.mu.Unlock()
	if ok {
		return writeSparse(path, int64(sizeMB)<<20, exts)
	}
	if err := makeDisk(ctx, path, sizeMB); err != nil {
		return err
	}
	exts, err := readSparse(path, maxDiskData)
	if err != nil {
		return nil // the image is made; the next one runs mkfs again
	}
	d.mu.Lock()
	if d.bySize == nil {
		d.bySize = map[int][]extent{}
	}
	d.bySize[sizeMB] = exts
	d.mu.Unlock()
	return nil
}

// writeSparse creates path as a sparse file of size holding exts. No
// fsync: the disk is discarded with the sandbox.
func writeSparse(path string, size int64, exts []extent) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("creating disk image: %w", err)
	}
	err = f.Truncate(size)
	for _, x := range exts {
		if err != nil {
			break
		}
		_, err = f.WriteAt(x.data, x.off)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing disk image: %w", err)
	}
	return nil
}

// readSparse returns the data extents of the file at path (SEEK_DATA and
// SEEK_HOLE), or an error when they hold more than limit bytes.
func readSparse(path string, limit int) ([]extent, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fd := int(f.Fd())
	var exts []extent
	total := 0
	for off := int64(0); ; {
		start, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) { // no data after off
			return exts, nil
		}
		if err != nil {
			return nil, err
		}
		end, err := unix.Seek(fd, start, unix.SEEK_HOLE)
		if err != nil {
			return nil, err
		}
		if total += int(end - start); total > limit {
			return nil, fmt.Errorf("%s holds more than %d bytes of data", path, limit)
		}
		x := extent{off: start, data: make([]byte, end-start)}
		if _, err := f.ReadAt(x.data, start); err != nil {
			return nil, err
		}
		exts = append(exts, x)
		off = end
	}
}

// loopsBackedBy returns the loop devices (as "loopN") whose backing file is
// path, from /sys/block.
func loopsBackedBy(path string) ([]string, error) {
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

// releaseLoops waits for the loop devices backed by image to detach by
// themselves (LO_FLAGS_AUTOCLEAR, once the sandbox's mount namespace is
// gone) and detaches what is left when ctx ends or after a grace period.
// The sandbox's processes are gone by now, so nothing attaches image again:
// /sys/block is listed once and only the devices found are polled (a host
// may have hundreds of loop devices, and kills run concurrently).
func releaseLoops(ctx context.Context, image string) error {
	devs, err := loopsBackedBy(image)
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

// removeDir removes a sandbox directory. Nothing is ever mounted in it in
// the host's mount namespace (the mounts live in the sandbox's), so a
// plain recursive removal cannot cross into a mount.
func removeDir(dir string) error {
	if err := os.RemoveAll(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing %s: %w", dir, err)
	}
	return nil
}
