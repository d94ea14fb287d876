package volume

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

	"golang.org/x/sys/unix"

	"github.com/agent-sandbox/agent-sandbox/internal/mountinfo"
)

// ImageStorage keeps each volume in an ext4 image, <Dir>/<id>.ext4, sized
// at its creation (sparse: it takes on disk what is written), with a
// journal (a volume is kept, unlike a sandbox's disk). Path mounts it at
// <MountDir>/<id> in the host's mount namespace, where it stays mounted
// (also across a restart of the server, which finds the mount again);
// sandboxes and the content API share that one mount, so they see each
// other's writes at once. The mount has no setuid programs or devices.
type ImageStorage struct {
	Dir      string
	MountDir string

	mu sync.Mutex // serializes mounts and removals
}

var _ Storage = (*ImageStorage)(nil)

func (s *ImageStorage) image(id string) string { return filepath.Join(s.Dir, id+".ext4") }
func (s *ImageStorage) mount(id string) string { return filepath.Join(s.MountDir, id) }

// Create implements Storage.
func (s *ImageStorage) Create(ctx context.Context, id string, size int64) (err error) {
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return err
	}
	img := s.image(id)
	f, err := os.OpenFile(img, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("creating volume image: %w", err)
	}
	defer func() {
		if err != nil {
			os.Remove(img)
		}
	}()
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sizing volume image: %w", err)
	}
	cmd := exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", "-m", "0", "-E", "nodiscard,root_owner=0:0", img)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("mkfs.ext4: %w: %s", err, bytes.TrimSpace(out))
	}
	dir, err := s.Path(ctx, id)
	if err != nil {
		return err
	}
	// Empty, and writable by whichever user of a sandbox writes first.
	if err := os.Remove(filepath.Join(dir, "lost+found")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return os.Chmod(dir, 0o777)
}

// Path implements Storage.
func (s *ImageStorage) Path(ctx context.Context, id string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	dir := s.mount(id)
	if mounted, err := isMountPoint(dir); err != nil || mounted {
		return dir, err
	}
	img := s.image(id)
	if _, err := os.Stat(img); err != nil {
		return "", fmt.Errorf("volume image: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	// mount(8) attaches a loop device that detaches itself at unmount.
	cmd := exec.CommandContext(ctx, "mount", "-t", "ext4", "-o", "loop,nosuid,nodev", img, dir)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("mounting volume %s: %w: %s", id, err, bytes.TrimSpace(out))
	}
	return dir, nil
}

// Remove implements Storage.
func (s *ImageStorage) Remove(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	dir := s.mount(id)
	if mounted, err := isMountPoint(dir); err != nil {
		return err
	} else if mounted {
		// Detached: a sandbox still holding it (none should) keeps its
		// view; the image's loop device goes with the last user.
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("unmounting volume %s: %w", id, err)
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.Remove(s.image(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// List implements Storage.
func (s *ImageStorage) List(context.Context) ([]string, error) {
	entries, err := os.ReadDir(s.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range entries {
		if id, ok := strings.CutSuffix(e.Name(), ".ext4"); ok {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// isMountPoint reports whether something is mounted at dir.
func isMountPoint(dir string) (bool, error) {
	mps, err := mountinfo.Under(dir)
	if err != nil {
		return false, err
	}
	return slices.Contains(mps, filepath.Clean(dir)), nil
}
