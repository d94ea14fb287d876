package jail

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation/disk"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/guest"
)

// Paths in the sandbox's /proc and /sys that are hidden (files: /dev/null
// bound over them; directories: an empty read-only tmpfs) or made read-only,
// as Docker does.
var (
	maskedPaths = []string{
		"/proc/acpi", "/proc/asound", "/proc/interrupts", "/proc/kcore", "/proc/keys",
		"/proc/latency_stats", "/proc/sched_debug", "/proc/scsi", "/proc/sysrq-trigger",
		"/proc/timer_list", "/proc/timer_stats", "/sys/devices/virtual/powercap",
		"/sys/firmware",
	}
	readonlyPaths = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys"}
)

// buildRoot mounts the sandbox's root filesystem, with lowers (top first)
// as the overlay's lower layers, and pivots into it. Runs in init, in the
// sandbox's fresh mount namespace, after its mounts were made private.
// base is the host id of the sandbox's root (0 without a user namespace):
// what init creates in the sandbox belongs to it. volumes are detached
// mounts (cloneVolumes) of cfg.Volumes, attached last.
func buildRoot(cfg *initConfig, lowers []string, base int, volumes []int) error {
	for _, p := range append([]string{cfg.DiskDir, cfg.RootDir}, lowers...) {
		if strings.ContainsAny(p, ",:\\") {
			return fmt.Errorf("path %q cannot be an overlay option", p)
		}
	}
	// The disk is mounted (setupSandbox): the upper and work directories
	// are on it.
	upper, work, err := disk.MakeUpper(cfg.DiskDir, lowers[0])
	if err != nil {
		return err
	}
	// The layers are named relative to the directory they share, from
	// there: the options are in the sandbox's mountinfo, and must not
	// name host paths.
	all := append(slices.Clone(lowers), upper, work)
	shared := commonDir(all...)
	if err := unix.Chdir(shared); err != nil {
		return fmt.Errorf("entering %s: %w", shared, err)
	}
	rel := make([]string, len(all))
	for i, p := range all {
		r, err := filepath.Rel(shared, p)
		if err != nil {
			return err
		}
		rel[i] = r
	}
	// nodev: CAP_MKNOD is kept, so device nodes must not work here. The
	// upper may be exported (a build step's layer, a snapshot), read later
	// as a plain directory of changes: no redirects, no metacopy.
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,index=off,redirect_dir=off,metacopy=off",
		strings.Join(rel[:len(lowers)], ":"), rel[len(lowers)], rel[len(lowers)+1])
	if len(opts) >= 4000 { // the kernel takes one page of options
		return fmt.Errorf("too many layers (%d) for one overlay mount", len(lowers))
	}
	if err := unix.Mount("overlay", cfg.RootDir, "overlay", unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mounting overlay (%s) at %s: %w", opts, cfg.RootDir, err)
	}
	// What must come from the host is taken before the host is out of
	// sight: envd and the tools as detached bind mounts, attached after the
	// pivot.
	binaries := append([]toolMount{{Host: cfg.EnvdPath, Guest: guest.EnvdPath}}, cfg.Tools...)
	trees := make([]int, 0, len(binaries))
	defer func() { closeFds(trees) }()
	bootID, err := writeBootID(cfg)
	if err != nil {
		return err
	}
	for _, host := range append([]string{bootID}, hostPaths(binaries)...) {
		fd, err := unix.OpenTree(unix.AT_FDCWD, host, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
		if err != nil {
			return fmt.Errorf("cloning a mount of %s: %w", host, err)
		}
		trees = append(trees, fd)
	}

	// Pivot first, so that every later path is resolved inside the new root
	// and a symlink in the template cannot point a mount at the host.
	if err := unix.Chdir(cfg.RootDir); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detaching the old root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return err
	}

	old := unix.Umask(0)
	defer unix.Umask(old)
	if err := guest.MountAt("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "", base); err != nil {
		return err
	}
	if err := guest.AttachBinary(trees[0], bootIDPath, base); err != nil {
		return err
	}
	if base != 0 {
		if err := setUserNetSysctls(); err != nil {
			return err
		}
	}
	if err := guest.BuildDev(base, shmBytes(cfg.MemoryMB)); err != nil {
		return err
	}
	if err := guest.MountAt("sysfs", "/sys", "sysfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "", base); err != nil {
		return err
	}
	if err := mountCgroups(cfg, base); err != nil {
		return err
	}
	if err := maskPaths(base); err != nil {
		return err
	}
	for i, b := range binaries {
		if err := guest.AttachBinary(trees[i+1], b.Guest, base); err != nil {
			return err
		}
	}
	for i, v := range cfg.Volumes {
		if err := guest.AttachVolume(volumes[i], v.Guest, base); err != nil {
			return err
		}
	}
	return nil
}

// cloneVolumes returns a detached mount of each volume's host directory,
// without setuid or devices, idmapped through userns when set (the ids a
// sandbox writes are the ids its processes see), for buildRoot to attach
// once the host is out of sight.
func cloneVolumes(vs []toolMount, userns *os.File) (fds []int, err error) {
	defer func() {
		if err != nil {
			closeFds(fds)
		}
	}()
	for _, v := range vs {
		fd, err := unix.OpenTree(unix.AT_FDCWD, v.Host, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
		if err != nil {
			return fds, fmt.Errorf("cloning a mount of volume %s: %w", v.Host, err)
		}
		fds = append(fds, fd)
		attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
		if userns != nil {
			attr.Attr_set |= unix.MOUNT_ATTR_IDMAP
			attr.Userns_fd = uint64(userns.Fd())
		}
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &attr); err != nil {
			return fds, fmt.Errorf("setting up volume %s (idmapped: %v): %w", v.Host, userns != nil, err)
		}
	}
	return fds, nil
}

func closeFds(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// bootIDPath is where Linux tells a boot from the next; the host's would
// be the same in every sandbox and across a sandbox's restarts.
const bootIDPath = "/proc/sys/kernel/random/boot_id"

// writeBootID writes the sandbox's boot id into a file, which init binds
// over bootIDPath: on a tmpfs of its own, mounted in init's namespace
// only and then read-only, so that the sandbox's mountinfo and statfs of
// it name no host path or disk.
func writeBootID(cfg *initConfig) (string, error) {
	dir := filepath.Join(filepath.Dir(cfg.DiskDir), bootIDDir)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return "", err
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", roFlags&^unix.MS_RDONLY, "size=4k,mode=0755"); err != nil {
		return "", fmt.Errorf("mounting the boot id's tmpfs: %w", err)
	}
	p := filepath.Join(dir, "boot_id")
	if err := os.WriteFile(p, []byte(cfg.BootID+"\n"), 0o444); err != nil {
		return "", fmt.Errorf("writing the boot id: %w", err)
	}
	if err := unix.Mount("", dir, "", unix.MS_REMOUNT|roFlags, ""); err != nil {
		return "", fmt.Errorf("making the boot id read-only: %w", err)
	}
	return p, nil
}

func hostPaths(ms []toolMount) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Host
	}
	return out
}

// commonDir is the deepest directory that holds every one of paths
// (absolute and clean).
func commonDir(paths ...string) string {
	dir := filepath.Dir(paths[0])
	for _, p := range paths[1:] {
		for dir != "/" && !strings.HasPrefix(p, dir+"/") {
			dir = filepath.Dir(dir)
		}
	}
	return dir
}

// roFlags are the flags of the read-only views of kernel state.
const roFlags = unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC

// mountCgroups mounts the sandbox's cgroups read-only at /sys/fs/cgroup,
// as Docker does, so that its limits (memory.max, memory.limit_in_bytes,
// cpu.max, io.max, ...) can be read inside: the cgroup namespace roots
// each hierarchy at the sandbox's own group. On v1 it mounts only the
// hierarchies the group lives in (others would show the server's groups),
// each under the name the host gives it ("cpu,cpuacct" when comounted,
// with a symlink per controller). Nothing in the sandbox may mount or
// remount, so the views stay read-only.
func mountCgroups(cfg *initConfig, base int) error {
	const dir = "/sys/fs/cgroup"
	if cfg.CgroupV2 {
		if err := unix.Mount("cgroup2", dir, "cgroup2", roFlags, ""); err != nil {
			return fmt.Errorf("mounting cgroup2 at %s: %w", dir, err)
		}
		return nil
	}
	if len(cfg.Cgroups) == 0 {
		return nil
	}
	data, err := os.ReadFile("/proc/cgroups")
	if err != nil {
		return fmt.Errorf("listing cgroup hierarchies: %w", err)
	}
	hierarchies := v1Hierarchies(data, cfg.Cgroups)
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=755,size=64k,"+ownedBy(base)); err != nil {
		return fmt.Errorf("mounting tmpfs at %s: %w", dir, err)
	}
	for _, ctls := range hierarchies {
		name := strings.Join(ctls, ",")
		if err := guest.MountAt("cgroup", filepath.Join(dir, name), "cgroup", roFlags, name, base); err != nil {
			return err
		}
		for _, c := range ctls {
			if c == name {
				continue
			}
			if err := os.Symlink(name, filepath.Join(dir, c)); err != nil {
				return fmt.Errorf("linking cgroup %s: %w", c, err)
			}
		}
	}
	if err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_BIND|roFlags, ""); err != nil {
		return fmt.Errorf("making %s read-only: %w", dir, err)
	}
	return nil
}

// v1Hierarchies groups the controllers of the v1 hierarchies that hold any
// of ctls, from /proc/cgroups (data; a hierarchy mounts only with all of
// its controllers named), in the order of their first controller.
func v1Hierarchies(data []byte, ctls []string) [][]string {
	byID := map[string][]string{}
	var ids []string
	wanted := map[string]bool{}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || strings.HasPrefix(f[0], "#") || f[1] == "0" || f[3] != "1" {
			continue
		}
		if _, ok := byID[f[1]]; !ok {
			ids = append(ids, f[1])
		}
		byID[f[1]] = append(byID[f[1]], f[0])
		if slices.Contains(ctls, f[0]) {
			wanted[f[1]] = true
		}
	}
	var out [][]string
	for _, id := range ids {
		if wanted[id] {
			out = append(out, byID[id])
		}
	}
	return out
}

// ownedBy is the tmpfs and devpts option giving a new file system's root
// to the sandbox's root (host id base).
func ownedBy(base int) string { return fmt.Sprintf("uid=%d,gid=%d", base, base) }

// Sizes of the tmpfs mounts in a sandbox. Without a size= option a tmpfs
// may grow to half the host's memory; what is written there is charged to
// the sandbox's memory cgroup, so filling it would end in the OOM killer
// instead of ENOSPC.
const (
	maskedSize = "4k" // the empty read-only directories over masked paths
)

// shmBytes is the size of /dev/shm in a sandbox with memoryMB of memory:
// half of it (as the kernel's default is half the host's), so that filling
// it fails with ENOSPC and leaves the sandbox's processes room to run.
// Chromium, the largest user, wants a large /dev/shm.
func shmBytes(memoryMB int) int64 {
	return int64(memoryMB) << 20 / 2
}

func maskPaths(base int) error {
	for _, p := range maskedPaths {
		fi, err := os.Stat(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if fi.IsDir() {
			err = unix.Mount("tmpfs", p, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size="+maskedSize+","+ownedBy(base))
		} else {
			err = unix.Mount("/dev/null", p, "", unix.MS_BIND, "")
		}
		if err != nil {
			return fmt.Errorf("masking %s: %w", p, err)
		}
	}
	for _, p := range readonlyPaths {
		if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err := bindReadonly(p, p, unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC); err != nil {
			return fmt.Errorf("making %s read-only: %w", p, err)
		}
	}
	return nil
}

func bindReadonly(source, target string, flags uintptr) error {
	if err := unix.Mount(source, target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return err
	}
	return unix.Mount("", target, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|flags, "")
}
