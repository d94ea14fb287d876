package volume

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
	"time"
)

// The volume content API's operations, on the root of a volume's files
// (Service.Open). Paths are absolute in the volume; sandboxes write these
// trees, so nothing outside the root is ever reached (os.Root refuses
// what would leave it, symlinks included). Ids and modes are as the
// sandboxes see them.

// Errors of the content operations, which the API maps to statuses.
var (
	ErrPathNotFound = errors.New("path not found")
	ErrPathExists   = errors.New("path exists")
	ErrFull         = errors.New("volume is full")
)

// Entry is VolumeEntryStat.
type Entry struct {
	Name   string
	Type   string // file, directory, symlink or unknown
	Path   string
	Size   int64
	Mode   uint32 // permission bits
	UID    uint32
	GID    uint32
	Atime  time.Time
	Mtime  time.Time
	Ctime  time.Time
	Target string // a symlink's
}

// Attrs are what a write, a new directory or PATCH sets; nil leaves a
// field (a new entry gets 0, 0 and its type's default mode).
type Attrs struct {
	UID, GID, Mode *uint32
}

// Default modes of new entries (E2B's).
const (
	fileMode = 0o644
	dirMode  = 0o755
)

// clean turns an API path into the volume's absolute path and the path
// relative to its root ("." for the root).
func clean(p string) (abs, rel string, err error) {
	if p == "" {
		return "", "", fmt.Errorf("path is required: %w", ErrInvalid)
	}
	abs = path.Clean("/" + p)
	rel = strings.TrimPrefix(abs, "/")
	if rel == "" {
		rel = "."
	}
	return abs, rel, nil
}

// pathError maps a file system error about abs to this package's.
func pathError(abs string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return fmt.Errorf("Path %s not found: %w", abs, ErrPathNotFound)
	case errors.Is(err, fs.ErrExist), errors.Is(err, syscall.ENOTEMPTY):
		return fmt.Errorf("Path %s already exists: %w", abs, ErrPathExists)
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return fmt.Errorf("writing %s: %w: remove files from it first", abs, ErrFull)
	}
	return fmt.Errorf("%s: %w", abs, err)
}

// Stat describes the entry at p, not following a symlink there.
func Stat(root *os.Root, p string) (Entry, error) {
	abs, rel, err := clean(p)
	if err != nil {
		return Entry{}, err
	}
	return stat(root, abs, rel)
}

func stat(root *os.Root, abs, rel string) (Entry, error) {
	fi, err := root.Lstat(rel)
	if err != nil {
		return Entry{}, pathError(abs, err)
	}
	e := Entry{Name: path.Base(abs), Path: abs, Size: fi.Size(), Mode: uint32(fi.Mode().Perm()), Mtime: fi.ModTime().UTC(), Type: "unknown"}
	if abs == "/" {
		e.Name = ""
	}
	switch {
	case fi.Mode().IsRegular():
		e.Type = "file"
	case fi.IsDir():
		e.Type = "directory"
	case fi.Mode()&fs.ModeSymlink != 0:
		e.Type = "symlink"
		if e.Target, err = root.Readlink(rel); err != nil {
			return Entry{}, pathError(abs, err)
		}
	}
	if fi.Mode()&fs.ModeSetuid != 0 {
		e.Mode |= 0o4000
	}
	if fi.Mode()&fs.ModeSetgid != 0 {
		e.Mode |= 0o2000
	}
	if fi.Mode()&fs.ModeSticky != 0 {
		e.Mode |= 0o1000
	}
	e.UID, e.GID, e.Atime, e.Ctime = owner(fi)
	return e, nil
}

// List describes what the directory p holds, depth levels down (1: its
// entries), not p itself; in name order, each directory's entries after
// it.
func List(root *os.Root, p string, depth int) ([]Entry, error) {
	abs, rel, err := clean(p)
	if err != nil {
		return nil, err
	}
	if fi, err := root.Lstat(rel); err != nil || !fi.IsDir() {
		if err == nil {
			err = syscall.ENOTDIR
		}
		return nil, pathError(abs, err)
	}
	out := []Entry{}
	return out, list(root, abs, rel, max(depth, 1), &out)
}

func list(root *os.Root, abs, rel string, depth int, out *[]Entry) error {
	d, err := root.Open(rel)
	if err != nil {
		return pathError(abs, err)
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return pathError(abs, err)
	}
	slices.Sort(names)
	for _, n := range names {
		e, err := stat(root, path.Join(abs, n), path.Join(rel, n))
		if errors.Is(err, ErrPathNotFound) {
			continue // removed meanwhile
		}
		if err != nil {
			return err
		}
		*out = append(*out, e)
		if e.Type == "directory" && depth > 1 {
			if err := list(root, e.Path, path.Join(rel, n), depth-1, out); err != nil {
				return err
			}
		}
	}
	return nil
}

// MakeDir makes the directory p with a; force makes missing parents (with
// a too) and accepts a directory that exists.
func MakeDir(root *os.Root, p string, a Attrs, force bool) (Entry, error) {
	abs, rel, err := clean(p)
	if err != nil {
		return Entry{}, err
	}
	if e, err := stat(root, abs, rel); err == nil {
		if force && e.Type == "directory" {
			return e, nil
		}
		return Entry{}, fmt.Errorf("Path %s already exists: %w", abs, ErrPathExists)
	}
	parent := path.Dir(rel)
	if _, err := root.Lstat(parent); errors.Is(err, fs.ErrNotExist) && force {
		if _, err := MakeDir(root, path.Dir(abs), a, true); err != nil {
			return Entry{}, err
		}
	}
	if err := root.Mkdir(rel, 0o700); err != nil {
		return Entry{}, pathError(abs, err)
	}
	if err := setAttrs(root, rel, a, dirMode); err != nil {
		return Entry{}, pathError(abs, err)
	}
	return stat(root, abs, rel)
}

// WriteFile writes the file p from r, then gives it a: a new file, or,
// with force, in place of the one there. The file appears whole or not
// at all: it is written beside and renamed over.
func WriteFile(root *os.Root, p string, r io.Reader, a Attrs, force bool) (_ Entry, err error) {
	abs, rel, err := clean(p)
	if err != nil {
		return Entry{}, err
	}
	if rel == "." {
		return Entry{}, fmt.Errorf("Path / is a directory: %w", ErrPathExists)
	}
	if e, err := stat(root, abs, rel); err == nil && (e.Type == "directory" || !force) {
		return Entry{}, fmt.Errorf("Path %s already exists: %w", abs, ErrPathExists)
	}
	var suffix [6]byte
	rand.Read(suffix[:])
	tmp := path.Join(path.Dir(rel), "."+path.Base(rel)+".upload-"+hex.EncodeToString(suffix[:]))
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return Entry{}, pathError(abs, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			root.Remove(tmp)
		}
	}()
	if _, err := io.Copy(f, r); err != nil {
		return Entry{}, pathError(abs, err)
	}
	if err := f.Sync(); err != nil {
		return Entry{}, pathError(abs, err)
	}
	if err := f.Close(); err != nil {
		return Entry{}, pathError(abs, err)
	}
	if err := setAttrs(root, tmp, a, fileMode); err != nil {
		return Entry{}, pathError(abs, err)
	}
	if !force {
		// Made since the check above: still not overwritten.
		if _, err := root.Lstat(rel); err == nil {
			return Entry{}, fmt.Errorf("Path %s already exists: %w", abs, ErrPathExists)
		}
	}
	if err := root.Rename(tmp, rel); err != nil {
		return Entry{}, pathError(abs, err)
	}
	return stat(root, abs, rel)
}

// OpenFile opens the regular file p for reading.
func OpenFile(root *os.Root, p string) (*os.File, Entry, error) {
	abs, rel, err := clean(p)
	if err != nil {
		return nil, Entry{}, err
	}
	e, err := stat(root, abs, rel)
	if err != nil {
		return nil, Entry{}, err
	}
	if e.Type == "directory" {
		return nil, Entry{}, fmt.Errorf("Path %s is a directory: %w", abs, ErrInvalid)
	}
	f, err := root.Open(rel)
	if err != nil {
		return nil, Entry{}, pathError(abs, err)
	}
	return f, e, nil
}

// Remove removes p, a directory with everything in it.
func Remove(root *os.Root, p string) error {
	abs, rel, err := clean(p)
	if err != nil {
		return err
	}
	if rel == "." {
		return fmt.Errorf("the volume's root cannot be removed; remove what is in it: %w", ErrInvalid)
	}
	if _, err := root.Lstat(rel); err != nil {
		return pathError(abs, err)
	}
	if err := root.RemoveAll(rel); err != nil {
		return pathError(abs, err)
	}
	return nil
}

// SetAttrs gives p the fields a sets.
func SetAttrs(root *os.Root, p string, a Attrs) (Entry, error) {
	abs, rel, err := clean(p)
	if err != nil {
		return Entry{}, err
	}
	e, err := stat(root, abs, rel)
	if err != nil {
		return Entry{}, err
	}
	uid, gid, mode := a.over(e.UID, e.GID, e.Mode)
	if err := chattr(root, rel, uid, gid, mode, e.Type == "symlink"); err != nil {
		return Entry{}, pathError(abs, err)
	}
	return stat(root, abs, rel)
}

// setAttrs gives a new entry rel a's owner and mode, or 0, 0 and def.
func setAttrs(root *os.Root, rel string, a Attrs, def uint32) error {
	uid, gid, mode := a.over(0, 0, def)
	return chattr(root, rel, uid, gid, mode, false)
}

// over returns the owner and mode a sets, and where it sets none, uid,
// gid or mode.
func (a Attrs) over(uid, gid, mode uint32) (uint32, uint32, uint32) {
	for _, f := range []struct{ set, dst *uint32 }{{a.UID, &uid}, {a.GID, &gid}, {a.Mode, &mode}} {
		if f.set != nil {
			*f.dst = *f.set
		}
	}
	return uid, gid, mode
}

// chattr sets rel's owner, then its mode (chown clears setuid bits); a
// symlink has no mode of its own.
func chattr(root *os.Root, rel string, uid, gid, mode uint32, symlink bool) error {
	if mode > 0o7777 {
		return fmt.Errorf("mode %#o has more than permission bits: %w", mode, ErrInvalid)
	}
	if err := root.Lchown(rel, int(uid), int(gid)); err != nil {
		return err
	}
	if symlink {
		return nil
	}
	m := fs.FileMode(mode & 0o777)
	if mode&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	if mode&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if mode&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	return root.Chmod(rel, m)
}
