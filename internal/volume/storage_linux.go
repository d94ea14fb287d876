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
	"time"

	"golang.org/x/sys/unix"

	"github.com/agent-sandbox/agent-sandbox/internal/mountinfo"
)

// ImageStorage keeps each volume in an ext4 image, <Dir>/<id>.ext4, sized
// at its creation (sparse: it takes on disk what is written), with a
// journal (a volume is kept, unlike a sandbox's disk). Path mounts it at
// <MountDir>/<id> in the host's mount namespace, where it stays mounted
// (also across a restart of the server, which finds the mount again);
// sandboxes that mount directories (jails) and the content API share that
// one mount, so they see each other's writes at once. The mount has no
// setuid programs or devices.
//
// Attach lends the image itself to one holder (a VM, whose kernel mounts
// it) instead: the host's mount goes first, and <Dir>/<id>.holder names
// the holder until Detach; while it is there, Path refuses. The file
// outlives a restart of the server, so a VM that does too keeps its
// volume to itself.
type ImageStorage struct {
	Dir      string
	MountDir string

	mu sync.Mutex // serializes mounts, loans and removals
}

var (
	_ Storage       = (*ImageStorage)(nil)
	_ Attacher      = (*ImageStorage)(nil)
	_ orphanRemover = (*ImageStorage)(nil)
)

func (s *ImageStorage) image(id string) string  { return filepath.Join(s.Dir, id+".ext4") }
func (s *ImageStorage) mount(id string) string  { return filepath.Join(s.MountDir, id) }
func (s *ImageStorage) holder(id string) string { return filepath.Join(s.Dir, id+holderSuffix) }

const holderSuffix = ".holder"

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
	if h, err := s.heldBy(id); err != nil {
		return "", err
	} else if h != "" {
		return "", fmt.Errorf("volume %s is attached to sandbox %s as a disk of its own (a VM's kernel has it mounted): "+
			"its files are reachable in that sandbox, and here again once it is killed: %w", id, h, ErrInUse)
	}
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
	for _, f := range []string{s.image(id), s.holder(id)} {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// Attach implements Attacher.
func (s *ImageStorage) Attach(ctx context.Context, id, holder string) (string, error) {
	if holder == "" || strings.ContainsAny(holder, "\n/") {
		return "", fmt.Errorf("attaching volume %s: holder %q is not a sandbox ID: %w", id, holder, ErrInvalid)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch h, err := s.heldBy(id); {
	case err != nil:
		return "", err
	case h == holder:
		return s.image(id), nil
	case h != "":
		return "", fmt.Errorf("volume %s is attached to sandbox %s: a volume is a disk of one VM at a time; kill that sandbox first: %w", id, h, ErrInUse)
	}
	img := s.image(id)
	if _, err := os.Stat(img); err != nil {
		return "", fmt.Errorf("volume image: %w", err)
	}
	if err := s.unmount(id); err != nil {
		return "", err
	}
	// Not synced: a crash of the host ends the VM too (and the server's
	// next start detaches what no live sandbox holds); one of the server
	// leaves the file in the page cache.
	if err := os.WriteFile(s.holder(id), []byte(holder), 0o600); err != nil {
		return "", fmt.Errorf("recording the holder of volume %s: %w", id, err)
	}
	return img, nil
}

// unmount lets go of the host's mount of volume id, if it has one, and
// makes sure no other mount of it is left (a jail's, which shares the
// superblock through a bind mount of the host's).
func (s *ImageStorage) unmount(id string) error {
	dir := s.mount(id)
	mounted, err := isMountPoint(dir)
	if err != nil || !mounted {
		return err
	}
	backing, err := backingFile(dir)
	if err != nil {
		return fmt.Errorf("reading the mount of volume %s: %w", id, err)
	}
	// Not detached: a request of the content API in flight keeps it busy.
	if err := unix.Unmount(dir, 0); errors.Is(err, unix.EBUSY) {
		return fmt.Errorf("volume %s is being read or written through the volume content API; try again: %w", id, ErrInUse)
	} else if err != nil {
		return fmt.Errorf("unmounting volume %s: %w", id, err)
	}
	// The loop device goes with the last mount of its file system
	// (autoclear); one still backed by the image is mounted elsewhere.
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if !backedBy(backing, s.image(id)) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("volume %s is still mounted by a sandbox on this host (not a VM); it is attached to a VM once none mounts it: %w", id, ErrInUse)
		}
	}
}

// backingFile returns the sysfs file that names the image behind the
// loop device of the file system mounted at dir (it is missing when that
// is no loop device).
func backingFile(dir string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return "", err
	}
	return fmt.Sprintf("/sys/dev/block/%d:%d/loop/backing_file", unix.Major(st.Dev), unix.Minor(st.Dev)), nil
}

// deletedSuffix ends the path the kernel gives for a file that was
// deleted while open (d_path), as a loop device's backing file is.
const deletedSuffix = " (deleted)"

// RemoveOrphans implements orphanRemover: it unmounts the volume mounts in
// MountDir whose image was deleted under them, which is what deleting a
// server's data directory leaves (a test's, or one whose server was
// killed with its volumes mounted): mounted for good, from a file no
// server can reach again.
//
// MountDir is one per host, shared by the servers of every data
// directory, so the image decides whose a mount is, as the kernel records
// it: one whose image still exists is its data directory's, even when that
// is not this storage's Dir, and is left alone, for its server finds it
// again when it starts (and removes it if it has no record of it).
// Deleting an image that is mounted happens nowhere else (Remove and
// Attach unmount first), so such a mount is nobody's, whichever server
// runs. A sandbox that still has it mounted (bind-mounted in a jail) keeps
// its view: the unmount is detached.
func (s *ImageStorage) RemoveOrphans(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	mps, err := mountinfo.Under(s.MountDir)
	if err != nil {
		return err
	}
	var errs []error
	for _, mp := range mps {
		if filepath.Dir(mp) != filepath.Clean(s.MountDir) {
			continue // not a volume's mount, <MountDir>/<id>
		}
		backing, err := backingFile(mp)
		if err != nil {
			errs = append(errs, fmt.Errorf("reading the mount %s: %w", mp, err))
			continue
		}
		image, err := os.ReadFile(backing)
		if err != nil || !strings.HasSuffix(strings.TrimSuffix(string(image), "\n"), deletedSuffix) {
			continue // not a loop device (not a volume's), or its image is there
		}
		if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil {
			errs = append(errs, fmt.Errorf("unmounting %s (its image %s): %w", mp, strings.TrimSpace(string(image)), err))
			continue
		}
		if err := os.Remove(mp); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// backedBy reports whether the loop device whose backing_file (in sysfs)
// is backing is attached to image.
func backedBy(backing, image string) bool {
	b, err := os.ReadFile(backing)
	if err != nil {
		return false // no such device any more, or not a loop device
	}
	f1, err1 := os.Stat(strings.TrimSuffix(string(b), "\n"))
	f2, err2 := os.Stat(image)
	return err1 == nil && err2 == nil && os.SameFile(f1, f2)
}

// Detach implements Attacher.
func (s *ImageStorage) Detach(_ context.Context, id, holder string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h, err := s.heldBy(id); err != nil || h != holder {
		return err
	}
	if err := os.Remove(s.holder(id)); err != nil {
		return fmt.Errorf("detaching volume %s: %w", id, err)
	}
	return nil
}

// Attached implements Attacher.
func (s *ImageStorage) Attached(context.Context) (map[string]string, error) {
	entries, err := os.ReadDir(s.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), holderSuffix)
		if !ok {
			continue
		}
		h, err := s.heldBy(id)
		if err != nil {
			return nil, err
		}
		out[id] = h
	}
	return out, nil
}

// heldBy returns the holder volume id is attached to, "" when none; the
// caller holds s.mu.
func (s *ImageStorage) heldBy(id string) (string, error) {
	b, err := os.ReadFile(s.holder(id))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading the holder of volume %s: %w", id, err)
	}
	return string(b), nil
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
