package template

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
)

// The File, Dir and Symlink steps and the build's own edits of the root
// filesystem go through an os.Root: paths resolve inside the rootfs and a
// symlink in it can never redirect a write to the host.

// rel turns a validated absolute path into a path relative to the root.
func rel(p string) string { return strings.TrimPrefix(p, "/") }

// replaceFile writes a regular file at name, replacing whatever non-directory
// is there (a symlink is replaced, not followed).
func replaceFile(root *os.Root, name string, content []byte, mode fs.FileMode, uid, gid int) error {
	if err := removeNonDir(root, name); err != nil {
		return err
	}
	if err := mkdirParents(root, name); err != nil {
		return err
	}
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	_, err = f.Write(content)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := root.Lchown(name, uid, gid); err != nil {
		return err
	}
	return root.Chmod(name, mode) // after chown, which clears setuid bits; and past the umask
}

func removeNonDir(root *os.Root, name string) error {
	fi, err := root.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	if fi.IsDir() {
		return fmt.Errorf("%s is a directory", name)
	}
	return root.Remove(name)
}

func mkdirParents(root *os.Root, name string) error {
	i := strings.LastIndexByte(name, '/')
	if i <= 0 {
		return nil
	}
	return root.MkdirAll(name[:i], 0o755)
}

func applyFile(root *os.Root, s *FileStep) error {
	return replaceFile(root, rel(s.Path), []byte(s.Content), s.Mode, s.UID, s.GID)
}

func applyDir(root *os.Root, s *DirStep) error {
	name := rel(s.Path)
	fi, err := root.Lstat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := root.MkdirAll(name, s.Mode); err != nil {
			return err
		}
	case err != nil:
		return err
	case !fi.IsDir():
		return fmt.Errorf("%s exists and is not a directory", s.Path)
	}
	if err := root.Lchown(name, s.UID, s.GID); err != nil {
		return err
	}
	return root.Chmod(name, s.Mode)
}

func applySymlink(root *os.Root, s *SymlinkStep) error {
	name := rel(s.Path)
	if err := removeNonDir(root, name); err != nil {
		return err
	}
	if err := mkdirParents(root, name); err != nil {
		return err
	}
	return root.Symlink(s.Target, name)
}

// clearDir removes the entries of dir except those named in keep. A missing
// dir is fine.
func clearDir(root *os.Root, dir string, keep ...string) error {
	f, err := root.Open(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	entries, err := f.ReadDir(-1)
	f.Close()
	if err != nil {
		return err
	}
	for _, e := range entries {
		if slices.Contains(keep, e.Name()) {
			continue
		}
		if err := root.RemoveAll(dir + "/" + e.Name()); err != nil {
			return err
		}
	}
	return nil
}

// hasUser reports whether /etc/passwd in root has an entry for name.
func hasUser(root *os.Root, name string) (bool, error) {
	data, err := root.ReadFile("etc/passwd")
	if err != nil {
		return false, err
	}
	for line := range strings.Lines(string(data)) {
		if u, _, ok := strings.Cut(line, ":"); ok && u == name {
			return true, nil
		}
	}
	return false, nil
}
