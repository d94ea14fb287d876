package initramfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
)

// Writer writes a cpio archive in the "newc" format, the one the kernel
// unpacks as an initramfs (Documentation/driver-api/early-userspace/
// buffer-format.rst): every entry a 110-byte ASCII header, the name, and
// the data, each padded to 4 bytes, then a TRAILER!!! entry. Names are
// relative to the archive's root. Each entry's parent directories are
// written before it, once; the kernel makes no directory on its own.
type Writer struct {
	w    io.Writer
	ino  uint32
	dirs map[string]bool
	err  error
}

// NewWriter returns a Writer of one archive onto w.
func NewWriter(w io.Writer) *Writer {
	return &Writer{w: w, dirs: map[string]bool{".": true}}
}

// File type bits of the newc mode field (as in stat's st_mode).
const (
	modeDir     = 0o040000
	modeRegular = 0o100000
	modeCharDev = 0o020000
)

// Dir writes directory name (and its missing parents) with perm.
func (w *Writer) Dir(name string, perm fs.FileMode) error {
	name, err := w.clean(name)
	if err != nil {
		return err
	}
	if w.dirs[name] {
		return nil
	}
	if err := w.parents(name); err != nil {
		return err
	}
	w.dirs[name] = true
	return w.entry(name, modeDir|uint32(perm.Perm()), 2, 0, 0, nil, 0)
}

// File writes regular file name of size bytes, read from r, with perm.
func (w *Writer) File(name string, perm fs.FileMode, r io.Reader, size int64) error {
	name, err := w.clean(name)
	if err != nil {
		return err
	}
	if err := w.parents(name); err != nil {
		return err
	}
	if size < 0 || size > 0xffffffff {
		return fmt.Errorf("cpio: %s: size %d does not fit the newc format", name, size)
	}
	return w.entry(name, modeRegular|uint32(perm.Perm()), 1, 0, 0, r, size)
}

// CharDev writes character device node name with perm.
func (w *Writer) CharDev(name string, perm fs.FileMode, major, minor uint32) error {
	name, err := w.clean(name)
	if err != nil {
		return err
	}
	if err := w.parents(name); err != nil {
		return err
	}
	return w.entry(name, modeCharDev|uint32(perm.Perm()), 1, major, minor, nil, 0)
}

// Close writes the trailer. It does not close the underlying writer.
func (w *Writer) Close() error {
	if w.err != nil {
		return w.err
	}
	return w.entry("TRAILER!!!", 0, 1, 0, 0, nil, 0)
}

func (w *Writer) clean(name string) (string, error) {
	if w.err != nil {
		return "", w.err
	}
	c := path.Clean(strings.TrimPrefix(name, "/"))
	if c == "." || c == ".." || strings.HasPrefix(c, "../") || c == "TRAILER!!!" {
		return "", fmt.Errorf("cpio: bad entry name %q", name)
	}
	return c, nil
}

// parents writes the directories above name not yet written, outermost
// first, mode 0755.
func (w *Writer) parents(name string) error {
	dir := path.Dir(name)
	if w.dirs[dir] {
		return nil
	}
	return w.Dir(dir, 0o755)
}

var zeros [4]byte

// pad is how many bytes bring n up to a multiple of 4.
func pad(n int64) int64 { return (4 - n%4) % 4 }

func (w *Writer) entry(name string, mode, nlink, rmajor, rminor uint32, r io.Reader, size int64) error {
	w.ino++
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		w.ino, mode, 0, 0, nlink, 0, size, 0, 0, rmajor, rminor, len(name)+1, 0)
	buf := append([]byte(hdr), name...)
	buf = append(buf, 0)
	buf = append(buf, zeros[:pad(int64(len(buf)))]...)
	if _, err := w.w.Write(buf); err != nil {
		w.err = fmt.Errorf("cpio: writing %s: %w", name, err)
		return w.err
	}
	if size > 0 {
		n, err := io.CopyN(w.w, r, size)
		if errors.Is(err, io.EOF) {
			err = fmt.Errorf("%d of %d bytes", n, size)
		}
		if err == nil {
			_, err = w.w.Write(zeros[:pad(size)])
		}
		if err != nil {
			w.err = fmt.Errorf("cpio: writing %s: %w", name, err)
			return w.err
		}
	}
	return nil
}
