package template

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
)

// COPY takes its files from a build context archive: a tar (optionally
// gzipped) whose entry names are paths relative to the context. Every name
// is checked before it is used, and every write goes through an os.Root
// on the image, so neither a hostile archive nor a symlink in the image can
// place a file outside it.

// copySpec is a resolved COPY: sources (cleaned context paths or globs),
// destination (absolute, in the image) and owner.
type copySpec struct {
	srcs []string
	dest string
	// intoDir: dest names a directory to copy into (it ends in "/", there
	// are several sources or a glob, or it exists as a directory).
	intoDir bool
	uid     int
	gid     int
}

// newCopySpec resolves in against the current working directory. exists
// reports whether dest is a directory in the image.
func newCopySpec(in Instruction, workdir string, isDir func(string) bool, own owner) (copySpec, error) {
	n := len(in.Args)
	c := copySpec{uid: own.UID, gid: own.GID}
	for _, s := range in.Args[:n-1] {
		p, err := contextPath(s)
		if err != nil {
			return copySpec{}, err
		}
		c.srcs = append(c.srcs, p)
		if hasGlob(p) {
			c.intoDir = true
		}
	}
	dest := in.Args[n-1]
	if !path.IsAbs(dest) {
		dest = path.Join(workdir, dest)
	}
	c.dest = path.Clean(dest)
	c.intoDir = c.intoDir || strings.HasSuffix(in.Args[n-1], "/") || n > 2 || c.dest == "/" || isDir(rel(c.dest))
	return c, nil
}

func hasGlob(p string) bool { return strings.ContainsAny(p, "*?[") }

// target maps an archive entry to where it goes in the image and the
// source that selects it, or ok=false when none does.
func (c copySpec) target(name string, isDir bool) (dst, src string, ok bool) {
	for _, src := range c.srcs {
		if dst, ok := selectEntry(c, src, name, isDir); ok {
			return dst, src, true
		}
	}
	return "", "", false
}

// selectEntry maps an archive entry to where src puts it, as Docker does:
// a directory source (or one a glob matches) copies its contents into
// dest; a file goes to dest, or into it when dest is a directory.
func selectEntry(c copySpec, src, name string, isDir bool) (string, bool) {
	if src == "." {
		return path.Join(c.dest, name), true
	}
	if hasGlob(src) {
		n := strings.Count(src, "/") + 1
		parts := strings.SplitN(name, "/", n+1)
		if len(parts) < n {
			return "", false
		}
		if ok, _ := path.Match(src, strings.Join(parts[:n], "/")); !ok {
			return "", false
		}
		switch {
		case len(parts) > n:
			return path.Join(c.dest, parts[n]), true
		case isDir:
			return c.dest, true
		default:
			return path.Join(c.dest, path.Base(name)), true
		}
	}
	switch {
	case name == src && isDir:
		return c.dest, true
	case name == src && c.intoDir:
		return path.Join(c.dest, path.Base(name)), true
	case name == src:
		return c.dest, true
	case strings.HasPrefix(name, src+"/"):
		return path.Join(c.dest, name[len(src)+1:]), true
	}
	return "", false
}

// archiveEntryName cleans a tar entry name; names that are absolute or
// climb out of the context are refused.
func archiveEntryName(name string) (string, error) {
	c := path.Clean(strings.TrimPrefix(name, "./"))
	if strings.HasPrefix(name, "/") || c == ".." || strings.HasPrefix(c, "../") || strings.ContainsRune(name, 0) {
		return "", fmt.Errorf("archive entry %q is outside the build context", name)
	}
	return c, nil
}

// openArchive opens a context archive, gunzipping it if it starts with the
// gzip magic bytes.
func openArchive(file string) (*tar.Reader, io.Closer, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, nil, err
	}
	br := bufio.NewReader(f)
	magic, _ := br.Peek(2)
	if bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(br)
		if err != nil {
			f.Close()
			return nil, nil, fmt.Errorf("reading %s: %w", file, err)
		}
		return tar.NewReader(zr), f, nil
	}
	return tar.NewReader(br), f, nil
}

// extractCopy copies what c selects from the archive into root and returns
// how many entries it wrote. A source that selects nothing is an error, as
// in Docker.
func extractCopy(archive string, root *os.Root, c copySpec) (int, error) {
	tr, closer, err := openArchive(archive)
	if err != nil {
		return 0, err
	}
	defer closer.Close()
	written := map[string]string{} // archive name -> image path, for hard links
	matched := map[string]bool{}
	n := 0
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return n, fmt.Errorf("reading context archive: %w", err)
		}
		name, err := archiveEntryName(h.Name)
		if err != nil {
			return n, err
		}
		if name == "." {
			matched["."] = true
			continue
		}
		dst, src, ok := c.target(name, h.Typeflag == tar.TypeDir)
		if !ok {
			continue
		}
		matched[src] = true
		if err := writeEntry(root, tr, h, rel(dst), c, written); err != nil {
			return n, fmt.Errorf("copying %s to %s: %w", name, dst, err)
		}
		written[name] = rel(dst)
		n++
	}
	for _, s := range c.srcs {
		if !matched[s] {
			return n, fmt.Errorf("COPY source %q: no such file in the build context", s)
		}
	}
	return n, nil
}

func writeEntry(root *os.Root, r io.Reader, h *tar.Header, dst string, c copySpec, written map[string]string) error {
	if dst == "" { // the image's root directory itself
		return nil
	}
	if err := mkdirOwnedIn(root, path.Dir(dst), c.uid, c.gid); err != nil {
		return err
	}
	switch h.Typeflag {
	case tar.TypeDir:
		fi, err := root.Lstat(dst)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if err := root.Mkdir(dst, 0o700); err != nil {
				return err
			}
		case err != nil:
			return err
		case !fi.IsDir():
			if err := root.Remove(dst); err != nil {
				return err
			}
			if err := root.Mkdir(dst, 0o700); err != nil {
				return err
			}
		}
		return chownMode(root, dst, c, h)
	case tar.TypeReg:
		if err := removeNonDir(root, dst); err != nil {
			return err
		}
		f, err := root.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, r)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		if err := chownMode(root, dst, c, h); err != nil {
			return err
		}
		return root.Chtimes(dst, h.ModTime, h.ModTime)
	case tar.TypeSymlink:
		if err := removeNonDir(root, dst); err != nil {
			return err
		}
		if err := root.Symlink(h.Linkname, dst); err != nil {
			return err
		}
		return root.Lchown(dst, c.uid, c.gid)
	case tar.TypeLink:
		target, err := archiveEntryName(h.Linkname)
		if err != nil {
			return err
		}
		from, ok := written[target]
		if !ok {
			return fmt.Errorf("hard link to %s, which this COPY does not copy", h.Linkname)
		}
		if err := removeNonDir(root, dst); err != nil {
			return err
		}
		return root.Link(from, dst)
	}
	return fmt.Errorf("unsupported archive entry type %q", h.Typeflag)
}

// chownMode gives dst the COPY's owner and the archive's permission bits
// (after chown, which clears setuid bits).
func chownMode(root *os.Root, dst string, c copySpec, h *tar.Header) error {
	if err := root.Lchown(dst, c.uid, c.gid); err != nil {
		return err
	}
	mode := fs.FileMode(h.Mode) & fs.ModePerm
	if h.Mode&0o4000 != 0 {
		mode |= fs.ModeSetuid
	}
	if h.Mode&0o2000 != 0 {
		mode |= fs.ModeSetgid
	}
	if h.Mode&0o1000 != 0 {
		mode |= fs.ModeSticky
	}
	return root.Chmod(dst, mode)
}

// mkdirOwnedIn makes dir (relative to root) and its missing parents, each
// new one 0755 and owned by uid:gid. A symlink on the way resolves inside
// root.
func mkdirOwnedIn(root *os.Root, dir string, uid, gid int) error {
	if dir == "." || dir == "" {
		return nil
	}
	if fi, err := root.Stat(dir); err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("%s is not a directory", dir)
		}
		return nil
	}
	if err := mkdirOwnedIn(root, path.Dir(dir), uid, gid); err != nil {
		return err
	}
	if err := root.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	if err := root.Lchown(dir, uid, gid); err != nil {
		return err
	}
	return root.Chmod(dir, 0o755)
}
