package jail

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// BinariesDir is where a backend with runDir mounts the tmpfs that the host
// binaries of its sandboxes (envd, the tools) are mounted from. A test that
// gives the backend a RunDir of its own unmounts it when it ends.
func BinariesDir(runDir string) string { return filepath.Join(runDir, "binaries") }

// binariesSource names the tmpfs in mount tables.
const binariesSource = "agent-sandbox-binaries"

// binaryStore is one copy of each host binary that sandboxes mount, on a
// tmpfs of its own, so that a sandbox's mountinfo shows a bind of
// "/envd-<hash>" from that tmpfs rather than the binary's host path (the
// server's checkout, its data directory), and statfs of it reports the
// tmpfs, not the host disk. The copies are named after their content, so
// that sandboxes of an earlier server (adopted after a restart) and a
// second backend on the same RunDir share them safely, and a rebuilt
// binary is a new file beside the old one that running sandboxes keep
// using. The mount is read-only except while a copy is made; sandboxes
// bind their files read-only anyway.
type binaryStore struct {
	dir string

	mu    sync.Mutex         // guards known, and the mount while it is written
	known map[fileKey]string // host file → its copy's name, once made
}

// fileKey identifies a version of a host file without reading it.
type fileKey struct {
	dev, ino, size uint64
	mtime, ctime   unix.Timespec
}

// path returns the copy of the host file host in the store, making it
// first if needed.
func (s *binaryStore) path(host string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(host, &st); err != nil {
		return "", fmt.Errorf("reading %s: %w", host, err)
	}
	key := fileKey{dev: st.Dev, ino: st.Ino, size: uint64(st.Size), mtime: st.Mtim, ctime: st.Ctim}
	s.mu.Lock()
	defer s.mu.Unlock()
	if name, ok := s.known[key]; ok {
		p := filepath.Join(s.dir, name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	name, err := s.add(host, st.Size)
	if err != nil {
		return "", fmt.Errorf("copying %s to the binaries tmpfs: %w", host, err)
	}
	if s.known == nil {
		s.known = map[fileKey]string{}
	}
	s.known[key] = name
	return filepath.Join(s.dir, name), nil
}

// add copies host (size bytes) into the store unless a copy of the same
// content is there, and returns the copy's name.
func (s *binaryStore) add(host string, size int64) (_ string, err error) {
	used, err := s.mount()
	if err != nil {
		return "", err
	}
	in, err := os.Open(host)
	if err != nil {
		return "", err
	}
	defer in.Close()
	h := sha256.New()
	if _, err := io.Copy(h, in); err != nil {
		return "", err
	}
	name := filepath.Base(host) + "-" + hex.EncodeToString(h.Sum(nil)[:8])
	if _, err := os.Stat(filepath.Join(s.dir, name)); err == nil {
		return name, nil // the same content, copied before
	}
	if _, err := in.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	// Room for the copy while it is made, then exactly what the store
	// holds, in whole MiB.
	if err := s.remount(0, mib(used+size)+1<<20); err != nil {
		return "", err
	}
	defer func() {
		used, uerr := s.used()
		if uerr == nil {
			uerr = s.remount(unix.MS_RDONLY, mib(used))
		}
		if uerr != nil && err == nil {
			err = uerr
		}
	}()
	tmp, err := os.CreateTemp(s.dir, ".new-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name()) // gone after the rename
	_, err = io.Copy(tmp, in)
	if err == nil {
		err = tmp.Chmod(0o755)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", err
	}
	return name, os.Rename(tmp.Name(), filepath.Join(s.dir, name))
}

// mib rounds n up to whole MiB.
func mib(n int64) int64 { return (n + 1<<20 - 1) &^ (1<<20 - 1) }

// used is how many bytes the store's files take.
func (s *binaryStore) used() (int64, error) {
	var fs unix.Statfs_t
	if err := unix.Statfs(s.dir, &fs); err != nil {
		return 0, err
	}
	return int64(fs.Blocks-fs.Bfree) * fs.Bsize, nil
}

// mount mounts the store's tmpfs unless it is mounted, and returns how many
// bytes it holds.
func (s *binaryStore) mount() (int64, error) {
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return 0, err
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(s.dir, &fs); err != nil {
		return 0, err
	}
	mounted, err := isMountPoint(s.dir)
	if err != nil {
		return 0, err
	}
	if mounted && fs.Type == unix.TMPFS_MAGIC {
		return s.used()
	}
	if mounted {
		return 0, fmt.Errorf("%s is a mount of something other than tmpfs", s.dir)
	}
	opts := "mode=0755,size=1m"
	if err := unix.Mount(binariesSource, s.dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_RDONLY, opts); err != nil {
		return 0, fmt.Errorf("mounting tmpfs at %s: %w", s.dir, err)
	}
	return 0, nil
}

// remount sets the store's flags (read-only or not) and size limit.
func (s *binaryStore) remount(flags uintptr, size int64) error {
	if err := unix.Mount("", s.dir, "", unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NODEV|flags, fmt.Sprintf("size=%d", size)); err != nil {
		return fmt.Errorf("remounting %s: %w", s.dir, err)
	}
	return nil
}

// isMountPoint reports whether dir is the root of a mount of another file
// system than its parent's (what the store's tmpfs always is).
func isMountPoint(dir string) (bool, error) {
	var st, parent unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return false, err
	}
	if err := unix.Stat(filepath.Dir(dir), &parent); err != nil {
		return false, err
	}
	return st.Dev != parent.Dev, nil
}
