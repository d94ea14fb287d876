package template

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// flatten makes dst (which must not exist) the merged view of layers
// (bottom first), as overlayfs would show them: upper entries replace
// lower ones, a whiteout (a 0/0 character device) deletes, an opaque
// directory hides what is below it. Everything but directories is
// hard-linked, never copied: layers and templates are read-only, so the
// tree shares its files with the layers and costs only its directories.
//
// dst is private to the build, and each directory in it is made before
// anything is placed in it, without following symlinks, so a symlink
// from one layer can never send a later layer's file out of dst.
func flatten(dst string, layers []string) error {
	if err := os.Mkdir(dst, 0o755); err != nil {
		return err
	}
	for _, l := range layers {
		if err := mergeDir(l, dst); err != nil {
			return fmt.Errorf("layer %s: %w", l, err)
		}
	}
	return nil
}

// mergeDir merges the directory src over the directory dst, whose owner
// and mode become src's. What it removes from dst is inside the private
// tree (no mounts, nothing shared but hard links, which removing only
// unlinks), so os.RemoveAll is safe there.
func mergeDir(src, dst string) error {
	fi, err := os.Lstat(src)
	if err != nil {
		return err
	}
	if err := copyDirAttrs(fi, dst); err != nil {
		return err
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range entries {
		s, d := filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())
		sfi, err := os.Lstat(s)
		if err != nil {
			return err
		}
		if isWhiteout(sfi) {
			if err := os.RemoveAll(d); err != nil {
				return err
			}
			continue
		}
		dfi, derr := os.Lstat(d)
		if derr != nil && !errors.Is(derr, fs.ErrNotExist) {
			return derr
		}
		exists := derr == nil
		if !sfi.IsDir() {
			if exists {
				if err := os.RemoveAll(d); err != nil {
					return err
				}
			}
			if err := os.Link(s, d); err != nil {
				return err
			}
			continue
		}
		switch {
		case exists && (!dfi.IsDir() || isOpaque(s)):
			if err := os.RemoveAll(d); err != nil {
				return err
			}
			fallthrough
		case !exists:
			if err := os.Mkdir(d, 0o700); err != nil {
				return err
			}
		}
		if err := mergeDir(s, d); err != nil {
			return err
		}
	}
	return nil
}

func isWhiteout(fi fs.FileInfo) bool {
	if fi.Mode()&fs.ModeCharDevice == 0 {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Rdev == 0
}

func isOpaque(dir string) bool {
	buf := make([]byte, 1)
	n, err := unix.Lgetxattr(dir, "trusted.overlay.opaque", buf)
	return err == nil && n == 1 && buf[0] == 'y'
}

// copyDirAttrs gives dst the owner and mode of the directory src.
func copyDirAttrs(src fs.FileInfo, dst string) error {
	st, ok := src.Sys().(*syscall.Stat_t)
	if !ok {
		return errors.New("no stat information")
	}
	if err := os.Lchown(dst, int(st.Uid), int(st.Gid)); err != nil {
		return err
	}
	return unix.Chmod(dst, st.Mode&0o7777)
}
