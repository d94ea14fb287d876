package oci

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"
)

// Limits bound what unpacking an image may write. A zero field takes
// DefaultLimits'.
type Limits struct {
	// MaxBytes bounds the bytes of all regular files of all layers
	// together (and the blobs of an OCI layout tarball).
	MaxBytes int64
	// MaxEntries bounds the tar entries of all layers together.
	MaxEntries int
	// MaxLayers bounds the number of layers.
	MaxLayers int
}

// DefaultLimits admit any image a sandbox can reasonably start from:
// Docker's own layer limit, and far more than the largest common images.
var DefaultLimits = Limits{MaxBytes: 16 << 30, MaxEntries: 2_000_000, MaxLayers: 127}

func (l Limits) withDefaults() Limits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultLimits.MaxBytes
	}
	if l.MaxEntries <= 0 {
		l.MaxEntries = DefaultLimits.MaxEntries
	}
	if l.MaxLayers <= 0 {
		l.MaxLayers = DefaultLimits.MaxLayers
	}
	return l
}

var (
	// ErrTooLarge is returned when an image exceeds its Limits.
	ErrTooLarge = errors.New("image is larger than the limit")
	// ErrUnsafePath is returned for an entry whose name or link target
	// is absolute or leaves the root with "..".
	ErrUnsafePath = errors.New("unsafe path in image layer")
)

const (
	whiteoutPrefix = ".wh."
	opaqueMarker   = ".wh..wh..opq"
)

// Unpack writes the image's root filesystem into dir, an existing empty
// directory, applying the layers bottom first. On error dir holds part of
// the image; the caller removes it.
func (im *Image) Unpack(ctx context.Context, dir string) error {
	layers, err := im.img.Layers()
	if err != nil {
		return fmt.Errorf("image %s: listing layers: %w", im.Ref, err)
	}
	if len(layers) > im.limits.MaxLayers {
		return fmt.Errorf("image %s: %w: %d layers, at most %d", im.Ref, ErrTooLarge, len(layers), im.limits.MaxLayers)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	u := &unpacker{root: root, lim: im.limits}
	for i, l := range layers {
		if err := u.layer(ctx, l); err != nil {
			return fmt.Errorf("image %s: layer %d of %d: %w", im.Ref, i+1, len(layers), err)
		}
	}
	return nil
}

// unpacker applies layers to one root filesystem and counts what they
// wrote against its limits.
type unpacker struct {
	root    *os.Root
	lim     Limits
	bytes   int64
	entries int
}

func (u *unpacker) layer(ctx context.Context, l v1.Layer) error {
	d, err := l.Digest()
	if err != nil {
		return err
	}
	rc, err := l.Uncompressed()
	if err != nil {
		return fmt.Errorf("%s: opening: %w", d, err)
	}
	defer rc.Close()
	if err := u.apply(ctx, rc); err != nil {
		return fmt.Errorf("%s: %w", d, err)
	}
	return nil
}

// apply applies the layer tarball r. It reads r to its end, so that a
// verifying reader (a registry blob) checks the digest, but no further
// than the byte limit allows.
func (u *unpacker) apply(ctx context.Context, r io.Reader) error {
	tr := tar.NewReader(r)
	// touched holds what this layer wrote and the directories above it:
	// an opaque directory hides everything else below it.
	touched := map[string]bool{}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("reading layer: %w", err)
		}
		if u.entries++; u.entries > u.lim.MaxEntries {
			return fmt.Errorf("%w: more than %d entries", ErrTooLarge, u.lim.MaxEntries)
		}
		if err := u.entry(hdr, tr, touched); err != nil {
			return fmt.Errorf("entry %q: %w", hdr.Name, err)
		}
	}
	left := u.lim.MaxBytes - u.bytes
	n, err := io.CopyN(io.Discard, r, left+1)
	if err != nil && err != io.EOF {
		return fmt.Errorf("reading layer: %w", err)
	}
	if n > left {
		return fmt.Errorf("%w: layer padding beyond %d bytes", ErrTooLarge, u.lim.MaxBytes)
	}
	u.bytes += n
	return nil
}

// entry applies one tar entry; r reads its content.
func (u *unpacker) entry(hdr *tar.Header, r io.Reader, touched map[string]bool) error {
	name, err := cleanName(hdr.Name)
	if err != nil {
		return err
	}
	dir, base := path.Split(name)
	if base == opaqueMarker {
		return u.opaque(path.Clean(dir), touched)
	}
	if victim, ok := strings.CutPrefix(base, whiteoutPrefix); ok {
		if victim == "" || victim == "." || victim == ".." {
			return fmt.Errorf("%w: whiteout of %q", ErrUnsafePath, victim)
		}
		return u.root.RemoveAll(path.Join(dir, victim))
	}
	if name == "." && hdr.Typeflag != tar.TypeDir {
		return errors.New("the root is not a directory")
	}
	if dir != "" {
		if err := u.root.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	touch(touched, name)
	switch hdr.Typeflag {
	case tar.TypeDir:
		return u.dir(name, hdr)
	case tar.TypeReg:
		return u.file(name, hdr, r)
	case tar.TypeSymlink:
		return u.symlink(name, hdr)
	case tar.TypeLink:
		return u.link(name, hdr)
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		// Sandboxes get their /dev from the runtime, and a 0/0 character
		// device would read as an overlayfs whiteout to the template
		// builder.
		return nil
	case tar.TypeXGlobalHeader:
		return nil
	}
	return fmt.Errorf("unsupported entry type %q", hdr.Typeflag)
}

// cleanName returns the clean relative form of a layer path ("." for the
// root), refusing absolute names and any ".." component.
func cleanName(n string) (string, error) {
	if n == "" || strings.ContainsRune(n, 0) {
		return "", fmt.Errorf("%w: empty name", ErrUnsafePath)
	}
	if path.IsAbs(n) {
		return "", fmt.Errorf("%w: %q is absolute", ErrUnsafePath, n)
	}
	for c := range strings.SplitSeq(n, "/") {
		if c == ".." {
			return "", fmt.Errorf("%w: %q leaves the root", ErrUnsafePath, n)
		}
	}
	return path.Clean(n), nil
}

func touch(touched map[string]bool, name string) {
	for p := name; p != "." && !touched[p]; p = path.Dir(p) {
		touched[p] = true
	}
}

// opaque removes from dir whatever the layers below put there; what this
// layer wrote stays.
func (u *unpacker) opaque(dir string, touched map[string]bool) error {
	if fi, err := u.root.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		touch(touched, dir)
		return u.root.MkdirAll(dir, 0o755)
	} else if err != nil {
		return err
	} else if !fi.IsDir() {
		return fmt.Errorf("opaque marker in %s, which is not a directory", dir)
	}
	f, err := u.root.Open(dir)
	if err != nil {
		return err
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return err
	}
	for _, n := range names {
		p := path.Join(dir, n)
		if !touched[p] {
			if err := u.root.RemoveAll(p); err != nil {
				return err
			}
			continue
		}
		if fi, err := u.root.Lstat(p); err == nil && fi.IsDir() {
			if err := u.opaque(p, touched); err != nil {
				return err
			}
		}
	}
	return nil
}

// clear makes way for a new entry at name: whatever is there goes, except
// a directory where a directory is wanted, which is merged into as Docker
// does. It reports whether that directory exists.
func (u *unpacker) clear(name string, wantDir bool) (bool, error) {
	fi, err := u.root.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if wantDir && fi.IsDir() {
		return true, nil
	}
	return false, u.root.RemoveAll(name)
}

func (u *unpacker) dir(name string, hdr *tar.Header) error {
	exists, err := u.clear(name, true)
	if err != nil {
		return err
	}
	if !exists {
		if err := u.root.Mkdir(name, 0o700); err != nil {
			return err
		}
	}
	return u.own(name, hdr, true)
}

func (u *unpacker) file(name string, hdr *tar.Header, r io.Reader) error {
	if hdr.Size > u.lim.MaxBytes-u.bytes {
		return fmt.Errorf("%w: more than %d bytes of files", ErrTooLarge, u.lim.MaxBytes)
	}
	u.bytes += hdr.Size
	if _, err := u.clear(name, false); err != nil {
		return err
	}
	f, err := u.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = io.CopyN(f, r, hdr.Size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := u.own(name, hdr, true); err != nil {
		return err
	}
	if err := u.root.Chtimes(name, hdr.AccessTime, hdr.ModTime); err != nil {
		return err
	}
	// After chown, which drops file capabilities.
	if caps, ok := hdr.PAXRecords["SCHILY.xattr.security.capability"]; ok {
		return u.setCaps(name, []byte(caps))
	}
	return nil
}

func (u *unpacker) setCaps(name string, caps []byte) error {
	f, err := u.root.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Fsetxattr(int(f.Fd()), "security.capability", caps, 0); err != nil {
		return fmt.Errorf("setting file capabilities: %w", err)
	}
	return nil
}

func (u *unpacker) symlink(name string, hdr *tar.Header) error {
	if hdr.Linkname == "" || strings.ContainsRune(hdr.Linkname, 0) {
		return errors.New("symlink without a target")
	}
	if _, err := u.clear(name, false); err != nil {
		return err
	}
	// The target is stored as it is: it is resolved in the sandbox, or
	// through the os.Root here, never against the host.
	if err := u.root.Symlink(hdr.Linkname, name); err != nil {
		return err
	}
	return u.own(name, hdr, false)
}

func (u *unpacker) link(name string, hdr *tar.Header) error {
	target, err := cleanName(hdr.Linkname)
	if err != nil {
		return fmt.Errorf("hard link target: %w", err)
	}
	if target == name {
		return nil
	}
	if _, err := u.clear(name, false); err != nil {
		return err
	}
	return u.root.Link(target, name)
}

// own gives name the owner of hdr and, unless it is a symlink, its mode;
// the mode is set after the owner, as chown clears set-id bits.
func (u *unpacker) own(name string, hdr *tar.Header, chmod bool) error {
	if err := u.root.Lchown(name, hdr.Uid, hdr.Gid); err != nil {
		return err
	}
	if !chmod {
		return nil
	}
	mode := hdr.FileInfo().Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
	return u.root.Chmod(name, mode)
}
