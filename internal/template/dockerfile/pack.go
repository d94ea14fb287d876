package dockerfile

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/template"
)

// Packer returns an [Options.Pack] that packs from contextDir into b's
// context archives, where the COPY steps b builds look for them.
func Packer(contextDir string, b *template.Builder) func(srcs []string) (string, error) {
	// Every archive is in one directory; only the file name is the hash.
	outDir := filepath.Dir(b.ContextArchive(strings.Repeat("0", 64)))
	return func(srcs []string) (string, error) {
		h, err := Pack(contextDir, srcs, outDir)
		if err == nil && filepath.Join(outDir, h+".tar") != b.ContextArchive(h) {
			err = fmt.Errorf("build context archive %s is not where the builder looks for it", h)
		}
		return h, err
	}
}

// Pack writes the files of contextDir that srcs name (paths relative to
// the context, possibly globs; a directory brings its whole tree) to a tar
// in outDir named by the SHA-256 of its content, and returns the hash.
// The archive is deterministic: entries sorted, owners and access times
// left out, so unchanged files give the same hash and a cached COPY.
func Pack(contextDir string, srcs []string, outDir string) (string, error) {
	root, err := os.OpenRoot(contextDir)
	if err != nil {
		return "", fmt.Errorf("opening build context: %w", err)
	}
	defer root.Close()
	names := map[string]bool{}
	for _, src := range srcs {
		clean := path.Clean(src)
		if path.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, "../") {
			return "", fmt.Errorf("COPY %s: outside the build context", src)
		}
		matches := []string{clean}
		if strings.ContainsAny(clean, "*?[") {
			if matches, err = fs.Glob(root.FS(), clean); err != nil {
				return "", fmt.Errorf("COPY %s: %w", src, err)
			}
			if len(matches) == 0 {
				return "", fmt.Errorf("COPY %s: no file in the build context matches", src)
			}
		}
		for _, m := range matches {
			err := fs.WalkDir(root.FS(), m, func(p string, d fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				names[p] = true
				return nil
			})
			if errors.Is(err, fs.ErrNotExist) {
				return "", fmt.Errorf("COPY %s: no such file in the build context %s", src, contextDir)
			} else if err != nil {
				return "", fmt.Errorf("COPY %s: %w", src, err)
			}
		}
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return "", err
	}
	f, err := os.CreateTemp(outDir, ".pack-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(f.Name()) // after the rename, a no-op
	h := sha256.New()
	tw := tar.NewWriter(io.MultiWriter(f, h))
	for _, name := range slices.Sorted(maps.Keys(names)) {
		if err := addEntry(tw, root, name); err != nil {
			f.Close()
			return "", fmt.Errorf("packing %s: %w", name, err)
		}
	}
	err = tw.Close()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", err
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if err := os.Rename(f.Name(), filepath.Join(outDir, sum+".tar")); err != nil {
		return "", err
	}
	return sum, nil
}

func addEntry(tw *tar.Writer, root *os.Root, name string) error {
	fi, err := root.Lstat(name)
	if err != nil {
		return err
	}
	link := ""
	if fi.Mode()&fs.ModeSymlink != 0 {
		if link, err = root.Readlink(name); err != nil {
			return err
		}
	}
	hdr, err := tar.FileInfoHeader(fi, link)
	if err != nil {
		return err
	}
	hdr.Name = name
	if fi.IsDir() {
		hdr.Name += "/"
	}
	hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
	hdr.AccessTime, hdr.ChangeTime = time.Time{}, time.Time{}
	hdr.Format = tar.FormatPAX
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return nil
	}
	src, err := root.Open(name)
	if err != nil {
		return err
	}
	defer src.Close()
	_, err = io.Copy(tw, src)
	return err
}
