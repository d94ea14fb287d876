package vminit

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation/guest"
	"golang.org/x/sys/unix"
)

// Where init mounts the disks in the initramfs before switching to the
// root disk.
const (
	newRoot  = "/newroot"
	toolsDir = "/tools"
)

// early are the mounts init needs in the initramfs: /dev for the disks'
// nodes, /proc and /sys for nothing more than what the kernel may consult.
var early = []struct{ fstype, dir string }{
	{"proc", "/proc"}, {"sysfs", "/sys"}, {"devtmpfs", "/dev"},
}

// mountEarly mounts early.
func mountEarly() error {
	for _, m := range early {
		if err := os.MkdirAll(m.dir, 0o755); err != nil {
			return fmt.Errorf("making %s: %w", m.dir, err)
		}
		if err := unix.Mount(m.fstype, m.dir, m.fstype, unix.MS_NOSUID|unix.MS_NOEXEC, ""); err != nil {
			return fmt.Errorf("mounting %s at %s: %w", m.fstype, m.dir, err)
		}
	}
	return nil
}

// binaryTree is a Binaries entry taken from the tools disk as a detached
// mount, to attach at guest once inside the new root.
type binaryTree struct {
	guest string
	tree  int
}

// mountDisks mounts the root disk at newRoot and grows its file system to
// the disk, and takes each of cfg.Binaries from the tools disk.
func mountDisks(cfg *Config) ([]binaryTree, error) {
	if err := os.Mkdir(newRoot, 0o755); err != nil {
		return nil, fmt.Errorf("making %s: %w", newRoot, err)
	}
	// nodev: CAP_MKNOD is kept, so device nodes the sandbox makes on its
	// disk must not work (only /dev's do).
	if err := unix.Mount(RootDisk, newRoot, "ext4", unix.MS_NODEV, ""); err != nil {
		return nil, fmt.Errorf("mounting the root disk %s: %w", RootDisk, err)
	}
	if err := growExt4(newRoot, RootDisk); err != nil {
		return nil, err
	}
	if err := os.Mkdir(toolsDir, 0o755); err != nil {
		return nil, fmt.Errorf("making %s: %w", toolsDir, err)
	}
	if err := unix.Mount(ToolsDisk, toolsDir, "ext4", unix.MS_RDONLY|unix.MS_NODEV|unix.MS_NOSUID, ""); err != nil {
		return nil, fmt.Errorf("mounting the tools disk %s: %w", ToolsDisk, err)
	}
	var trees []binaryTree
	for _, g := range slices.Sorted(maps.Keys(cfg.Binaries)) {
		src := filepath.Join(toolsDir, cfg.Binaries[g])
		fd, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
		if err != nil {
			return nil, fmt.Errorf("taking %s from the tools disk: %w", cfg.Binaries[g], err)
		}
		trees = append(trees, binaryTree{guest: g, tree: fd})
	}
	// The detached mounts hold the tools disk from now on.
	if err := unix.Unmount(toolsDir, unix.MNT_DETACH); err != nil {
		return nil, fmt.Errorf("unmounting the tools disk: %w", err)
	}
	return trees, nil
}

// volumesDir is where init mounts the volume disks in the initramfs.
const volumesDir = "/volumes"

// mountVolumes mounts each of cfg.Volumes' disks (found by serial) in the
// initramfs, read-write without devices or setuid, and takes it as a
// detached mount, to attach at its mount point once inside the new root
// (buildRoot): a mount point made inside the new root is resolved there.
func mountVolumes(cfg *Config) ([]int, error) {
	if len(cfg.Volumes) == 0 {
		return nil, nil
	}
	if err := os.Mkdir(volumesDir, 0o700); err != nil {
		return nil, fmt.Errorf("making %s: %w", volumesDir, err)
	}
	var trees []int
	for i, target := range cfg.Volumes {
		dev, err := diskBySerial(VolumeSerial(i))
		if err != nil {
			closeAll(trees)
			return nil, fmt.Errorf("finding the disk of the volume at %s: %w", target, err)
		}
		tree, err := takeVolume(dev, filepath.Join(volumesDir, strconv.Itoa(i)))
		if err != nil {
			closeAll(trees)
			return nil, fmt.Errorf("mounting the volume at %s (%s): %w", target, dev, err)
		}
		trees = append(trees, tree)
	}
	return trees, nil
}

// takeVolume mounts the ext4 file system on dev at dir and returns it as
// a detached mount, dir unmounted.
func takeVolume(dev, dir string) (int, error) {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return -1, err
	}
	if err := unix.Mount(dev, dir, "ext4", unix.MS_NODEV|unix.MS_NOSUID, ""); err != nil {
		return -1, err
	}
	tree, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if uerr := unix.Unmount(dir, unix.MNT_DETACH); err == nil && uerr != nil {
		unix.Close(tree)
		return -1, uerr
	}
	return tree, err
}

// diskBySerial waits for the virtio disk whose serial is serial and
// returns its device node: the kernel probes the disks asynchronously, and
// names them in the order it does.
func diskBySerial(serial string) (string, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		names, err := filepath.Glob("/sys/block/vd*")
		if err != nil {
			return "", err
		}
		for _, n := range names {
			if b, err := os.ReadFile(filepath.Join(n, "serial")); err == nil && strings.TrimSpace(string(b)) == serial {
				dev := "/dev/" + filepath.Base(n)
				return dev, waitFor(dev)
			}
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no disk with serial %s among %v", serial, names)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// growExt4 grows the ext4 file system mounted at dir to fill dev: the
// template's image is small, the disk is the sandbox's disk size.
func growExt4(dir, dev string) error {
	d, err := os.Open(dev)
	if err != nil {
		return fmt.Errorf("opening the root disk: %w", err)
	}
	size, err := d.Seek(0, 2)
	d.Close()
	if err != nil {
		return fmt.Errorf("reading the root disk's size: %w", err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("reading the root file system's size: %w", err)
	}
	blocks := uint64(size) / uint64(st.Bsize)
	if blocks <= st.Blocks {
		return nil
	}
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("opening the root file system: %w", err)
	}
	defer f.Close()
	if err := resizeExt4(int(f.Fd()), blocks); err != nil {
		return fmt.Errorf("growing the root file system to %d blocks: %w", blocks, err)
	}
	return nil
}

// switchRoot makes newRoot the root, as switch_root does: the initramfs
// (rootfs) cannot be pivoted away from, so the new root is moved over it
// and entered with chroot. What is left of the initramfs (init's binary)
// is out of sight.
func switchRoot() error {
	for i := len(early) - 1; i >= 0; i-- {
		if err := unix.Unmount(early[i].dir, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("unmounting the initramfs' %s: %w", early[i].dir, err)
		}
	}
	if err := unix.Chdir(newRoot); err != nil {
		return fmt.Errorf("entering the root disk: %w", err)
	}
	if err := unix.Mount(".", "/", "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("moving the root disk to /: %w", err)
	}
	if err := unix.Chroot("."); err != nil {
		return fmt.Errorf("entering the root disk: %w", err)
	}
	return unix.Chdir("/")
}

// roFlags are the flags of the read-only views of kernel state.
const roFlags = unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC

// buildRoot mounts, inside the new root, what the jail's init mounts in
// its own (/proc, a minimal read-only /dev with devpts and /dev/shm, a
// read-only /sys, cgroup2 at /sys/fs/cgroup), envd and the tools
// read-only at their guest paths and the volumes (mountVolumes' trees) at
// theirs, and sets the hostname and resolver.
// Unlike the jail it masks nothing in /proc: the kernel there is the
// sandbox's own, and root in it may use what it offers (sysrq-trigger
// ends only this VM).
func buildRoot(cfg *Config, trees []binaryTree, volumes []int) error {
	old := unix.Umask(0)
	defer unix.Umask(old)
	if err := guest.MountAt("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "", 0); err != nil {
		return err
	}
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return fmt.Errorf("reading the memory size: %w", err)
	}
	// /dev/shm is half the memory, as the kernel's default, but a size:
	// filling it fails with ENOSPC, not in the OOM killer.
	if err := guest.BuildDev(0, int64(si.Totalram)*int64(si.Unit)/2); err != nil {
		return err
	}
	if err := guest.MountAt("sysfs", "/sys", "sysfs", roFlags, "", 0); err != nil {
		return err
	}
	// Read-write until envdCgroup has made envd's group.
	if err := unix.Mount("cgroup2", cgroupDir, "cgroup2", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mounting cgroup2 at %s: %w", cgroupDir, err)
	}
	for _, b := range trees {
		err := guest.AttachBinary(b.tree, b.guest, 0)
		unix.Close(b.tree)
		if err != nil {
			return err
		}
	}
	for i, tree := range volumes {
		err := guest.AttachVolume(tree, cfg.Volumes[i], 0)
		unix.Close(tree)
		if err != nil {
			return err
		}
	}
	if err := unix.Sethostname([]byte(cfg.Hostname)); err != nil {
		return fmt.Errorf("setting hostname: %w", err)
	}
	if cfg.Network != nil {
		if err := guest.WriteResolvConf(cfg.Network.Gateway.String(), 0); err != nil {
			return err
		}
	}
	return nil
}
