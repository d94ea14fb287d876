package jail

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/disk"
)

// Snapshots (isolation.Instance.Snapshot). A jail's memory is the host's,
// so its snapshots hold its file system only: the layers it runs over
// (above the template) and its overlay's upper directory, as plain
// overlayfs layers with the sandbox's own ids, the format of build steps'
// exports. A sandbox started from one (Spec.Snapshot) stacks them over the
// template like Spec.Layers and boots afresh: many start in parallel from
// one snapshot, without copying it.
//
// The upper is copied at one instant: the sandbox's cgroup is frozen, so
// every write(2) has either returned or not begun, and the exporter
// mounts the loop device that the sandbox's own mount uses, which gives it
// the same superblock and page cache (a second loop device over the image
// would read what was written back to it, not what was written). The
// layers below the upper never change; they are hard-linked into the
// snapshot before the freeze, so a snapshot stands alone: removing the one
// a sandbox started from takes nothing from a snapshot of that sandbox.
// Sockets and device nodes are left out: nothing can use them after a
// restart.

// Files of a snapshot directory.
const (
	snapshotMeta      = "snapshot.json" // written last: without it the snapshot is incomplete
	snapshotLayersDir = "layers"
)

// snapshotFile is what snapshotMeta holds.
type snapshotFile struct {
	Kind string `json:"kind"`
	// Layers are directories under snapshotLayersDir, top first.
	Layers []string `json:"layers"`
}

// Snapshot implements isolation.Instance: a FilesSnapshot, the richest a
// jail makes.
func (inst *Instance) Snapshot(ctx context.Context, dir string, kind isolation.SnapshotKind) error {
	if kind != isolation.FilesSnapshot {
		return fmt.Errorf("snapshotting sandbox %s: a %s snapshot: %w", inst.id, kind, errors.ErrUnsupported)
	}
	if err := inst.snapshot(ctx, dir); err != nil {
		return fmt.Errorf("snapshotting sandbox %s: %w", inst.id, err)
	}
	return nil
}

func (inst *Instance) snapshot(ctx context.Context, dir string) (err error) {
	t0 := time.Now()
	root := filepath.Join(dir, snapshotLayersDir)
	if err := os.Mkdir(root, 0o700); err != nil {
		return err
	}
	meta := snapshotFile{Kind: isolation.FilesSnapshot.String(), Layers: []string{"0"}}
	for i, l := range inst.state.Layers {
		name := strconv.Itoa(i + 1)
		if err := linkTree(l, filepath.Join(root, name)); err != nil {
			return fmt.Errorf("linking layer %s: %w", l, err)
		}
		meta.Layers = append(meta.Layers, name)
	}
	upper := filepath.Join(root, "0")
	if err := os.Mkdir(upper, 0o700); err != nil {
		return err
	}
	image := filepath.Join(inst.dir, diskFile)
	devs, err := disk.LoopsBackedBy(image)
	if err != nil {
		return fmt.Errorf("finding the sandbox's disk: %w", err)
	}
	if len(devs) != 1 {
		return fmt.Errorf("finding the sandbox's disk: %d loop devices hold %s", len(devs), image)
	}
	tLinked := time.Now()
	inst.mu.Lock()
	paused := inst.paused
	inst.mu.Unlock()
	if !paused {
		if err := inst.cg.Freeze(ctx); err != nil {
			return err
		}
		defer func() {
			if terr := inst.cg.Thaw(context.WithoutCancel(ctx)); terr != nil {
				err = errors.Join(err, fmt.Errorf("thawing: %w", terr))
			}
		}()
	}
	ec := exportConfig{
		Disk: image, MountDir: filepath.Join(inst.dir, diskDir), Dest: upper,
		Base: inst.state.UsernsBase, Exclude: inst.state.Exclude, Device: devs[0], Snapshot: true,
	}
	if err := inst.b.runHelper(ctx, "agent-sandbox-snapshot", &initConfig{Export: &ec}, filepath.Join(inst.dir, logFile)); err != nil {
		return fmt.Errorf("copying the sandbox's changes: %w", err)
	}
	tCopied := time.Now()
	b, err := json.Marshal(meta)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, snapshotMeta), b, 0o600); err != nil {
		return err
	}
	inst.b.cfg.Log.Debug("sandbox snapshotted", "sandbox_id", inst.id, "layers", len(meta.Layers),
		"link", tLinked.Sub(t0), "frozen", tCopied.Sub(tLinked), "total", time.Since(t0))
	return nil
}

// snapshotLayers returns the layer directories of the snapshot in dir,
// top first, for a sandbox to start from.
func snapshotLayers(dir string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(dir, snapshotMeta))
	if err != nil {
		return nil, fmt.Errorf("reading the snapshot: %w", err)
	}
	var meta snapshotFile
	if err := json.Unmarshal(b, &meta); err != nil {
		return nil, fmt.Errorf("reading the snapshot %s: %w", dir, err)
	}
	if meta.Kind != isolation.FilesSnapshot.String() || len(meta.Layers) == 0 {
		return nil, fmt.Errorf("reading the snapshot %s: a %q snapshot of %d layers is not a jail's", dir, meta.Kind, len(meta.Layers))
	}
	out := make([]string, len(meta.Layers))
	for i, l := range meta.Layers {
		if _, err := strconv.ParseUint(l, 10, 16); err != nil {
			return nil, fmt.Errorf("reading the snapshot %s: bad layer name %q", dir, l)
		}
		out[i] = filepath.Join(dir, snapshotLayersDir, l)
	}
	return out, nil
}

// linkTree makes dst a copy of the layer directory src in which every
// entry but a directory is a hard link to src's. Layers are never written
// once made, so the two may share their files; nothing in src is
// followed.
func linkTree(src, dst string) error {
	var dirs []string
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if !d.IsDir() {
			return os.Link(p, target)
		}
		if err := os.Mkdir(target, 0o700); err != nil {
			return err
		}
		dirs = append(dirs, rel)
		return copyDirMeta(p, target, false)
	})
	if err != nil {
		return err
	}
	// Times last, deepest first: making entries changes a directory's.
	for _, rel := range slices.Backward(dirs) {
		if err := copyDirMeta(filepath.Join(src, rel), filepath.Join(dst, rel), true); err != nil {
			return err
		}
	}
	return nil
}

// copyDirMeta gives the directory dst the owner, mode and kept xattrs of
// src (the overlay's opaque marker, user.*), or, with times, its times.
func copyDirMeta(src, dst string, times bool) error {
	var st unix.Stat_t
	if err := unix.Lstat(src, &st); err != nil {
		return err
	}
	if times {
		return unix.UtimesNanoAt(unix.AT_FDCWD, dst, []unix.Timespec{st.Atim, st.Mtim}, unix.AT_SYMLINK_NOFOLLOW)
	}
	if err := os.Lchown(dst, int(st.Uid), int(st.Gid)); err != nil {
		return err
	}
	if err := unix.Chmod(dst, st.Mode&0o7777); err != nil {
		return fmt.Errorf("%s: %w", dst, err)
	}
	names, err := listXattrs(src)
	if err != nil {
		return err
	}
	for _, name := range names {
		if name != opaqueXattr && !strings.HasPrefix(name, "user.") {
			continue
		}
		val, err := getXattr(src, name)
		if err != nil {
			return err
		}
		if err := unix.Lsetxattr(dst, name, val, 0); err != nil {
			return fmt.Errorf("%s: setting %s: %w", dst, name, err)
		}
	}
	return nil
}

// newBootID returns a random UUID, as the kernel's boot_id is.
func newBootID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := fmt.Sprintf("%x", b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
