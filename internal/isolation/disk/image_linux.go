package disk

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"

	"golang.org/x/sys/unix"
)

// makeImage creates the sparse ext4 image path of sizeMB. No journal: the
// disk is discarded with the sandbox, so crash consistency buys nothing.
func makeImage(ctx context.Context, path string, sizeMB int) error {
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

// Maker makes sandbox disk images. The first image of each size is made
// by mkfs.ext4; its data, a few hundred KiB of metadata in a sparse file,
// is kept, and later images of that size are written from it: an exec of
// mkfs costs a create about 4 ms and 5 % of its CPU. Every copy has the
// same filesystem UUID, which ext4 does not mind. The zero Maker is ready
// to use.
type Maker struct {
	mu     sync.Mutex
	bySize map[int][]extent // guarded by mu
}

// extent is a run of data in a sparse file.
type extent struct {
	off  int64
	data []byte
}

// maxImageData bounds what a Maker keeps of one image; an mkfs whose
// output is larger is simply run every time.
const maxImageData = 16 << 20

// Make creates the empty ext4 image path of sizeMB.
func (d *Maker) Make(ctx context.Context, path string, sizeMB int) error {
	d.mu.Lock()
	exts, ok := d.bySize[sizeMB]
	d.mu.Unlock()
	if ok {
		return writeSparse(path, int64(sizeMB)<<20, exts)
	}
	if err := makeImage(ctx, path, sizeMB); err != nil {
		return err
	}
	exts, err := readSparse(path, maxImageData)
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
