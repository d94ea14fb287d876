package guest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// The functions here build a sandbox's file system view from inside its
// new root. base is the id (as the kernel that mounts sees it) of the
// sandbox's root: the start of its user namespace's range in the jail, 0
// without one and in a VM. What they create belongs to it.

// devSize is the size of the /dev tmpfs: nodes and symlinks only. (Without
// a size= option a tmpfs may grow to half the memory.)
const devSize = "64k"

// ownedBy is the tmpfs and devpts option giving a new file system's root
// to the sandbox's root.
func ownedBy(base int) string { return fmt.Sprintf("uid=%d,gid=%d", base, base) }

// devices are the nodes of the sandbox's /dev.
var devices = []struct {
	name         string
	major, minor uint32
}{
	{"null", 1, 3}, {"zero", 1, 5}, {"full", 1, 7}, {"random", 1, 8},
	{"urandom", 1, 9}, {"tty", 5, 0},
}

// AttachBinary attaches the detached mount tree (open_tree) read-only at
// guest, over an empty file it makes there (and the directories above it).
func AttachBinary(tree int, guest string, base int) error {
	if err := MkdirOwned(filepath.Dir(guest), base, base); err != nil {
		return err
	}
	if f, err := os.OpenFile(guest, os.O_CREATE|os.O_RDONLY, 0o755); err != nil {
		return fmt.Errorf("creating mount point %s: %w", guest, err)
	} else {
		f.Close()
	}
	if err := unix.MoveMount(tree, "", unix.AT_FDCWD, guest, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("mounting %s: %w", guest, err)
	}
	if err := unix.Mount("", guest, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NODEV|unix.MS_NOSUID, ""); err != nil {
		return fmt.Errorf("making %s read-only: %w", guest, err)
	}
	return nil
}

// AttachVolume attaches tree, a detached mount of a volume, at dir, which
// it makes (with its missing parents) owned by base, the sandbox's root.
func AttachVolume(tree int, dir string, base int) error {
	if err := MkdirOwned(dir, base, base); err != nil {
		return fmt.Errorf("making volume mount point %s: %w", dir, err)
	}
	if err := unix.MoveMount(tree, "", unix.AT_FDCWD, dir, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("mounting volume at %s: %w", dir, err)
	}
	return nil
}

// BuildDev mounts a minimal /dev, read-only, with devpts and a /dev/shm of
// shmSize bytes. Init makes the nodes (as host root, which a user
// namespace could not) and gives everything to base, so that root owns
// /dev in the sandbox.
func BuildDev(base int, shmSize int64) error {
	if err := MountAt("tmpfs", "/dev", "tmpfs", unix.MS_NOSUID|unix.MS_STRICTATIME, "mode=755,size="+devSize+","+ownedBy(base), base); err != nil {
		return err
	}
	for _, d := range devices {
		p := "/dev/" + d.name
		if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(d.major, d.minor))); err != nil {
			return fmt.Errorf("making %s: %w", p, err)
		}
		if err := os.Lchown(p, base, base); err != nil {
			return err
		}
	}
	for _, l := range [][2]string{
		{"pts/ptmx", "/dev/ptmx"}, {"/proc/self/fd", "/dev/fd"}, {"/proc/self/fd/0", "/dev/stdin"},
		{"/proc/self/fd/1", "/dev/stdout"}, {"/proc/self/fd/2", "/dev/stderr"},
	} {
		if err := os.Symlink(l[0], l[1]); err != nil {
			return err
		}
		if err := os.Lchown(l[1], base, base); err != nil {
			return err
		}
	}
	// gid: the tty group (5) of the sandbox, as a host id.
	ptsOpts := fmt.Sprintf("newinstance,ptmxmode=0666,mode=0620,gid=%d", base+5)
	if err := MountAt("devpts", "/dev/pts", "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, ptsOpts, base); err != nil {
		return err
	}
	if err := MountAt("shm", "/dev/shm", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("mode=1777,size=%d,%s", shmSize, ownedBy(base)), base); err != nil {
		return err
	}
	// Read-only: root in the sandbox has CAP_MKNOD but must not add nodes.
	if err := unix.Mount("", "/dev", "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_STRICTATIME, ""); err != nil {
		return fmt.Errorf("making /dev read-only: %w", err)
	}
	return nil
}

// MountAt makes the directory target (owned by base) and mounts there.
func MountAt(source, target, fstype string, flags uintptr, data string, base int) error {
	if err := MkdirOwned(target, base, base); err != nil {
		return err
	}
	if err := unix.Mount(source, target, fstype, flags, data); err != nil {
		return fmt.Errorf("mounting %s at %s: %w", fstype, target, err)
	}
	return nil
}

// MkdirOwned makes dir and its missing parents, each owned by uid:gid. An
// existing dir is left alone.
func MkdirOwned(dir string, uid, gid int) error {
	if fi, err := os.Stat(dir); err == nil {
		if !fi.IsDir() {
			return errors.New("not a directory")
		}
		return nil
	}
	if err := MkdirOwned(filepath.Dir(dir), uid, gid); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return os.Lchown(dir, uid, gid)
}

// WriteResolvConf points the sandbox's resolver at nameserver: the host's
// DNS filter on its gateway. It replaces whatever the template has there (a symlink into
// /run, say; resolved inside the new root, so it cannot point at the host).
// The file is only a convenience: the host redirects every DNS packet from
// the sandbox to the filter, whatever address it was sent to. It belongs to
// the sandbox's root (host id base), who may rewrite it.
func WriteResolvConf(nameserver string, base int) error {
	if err := os.Remove("/etc/resolv.conf"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("replacing /etc/resolv.conf: %w", err)
	}
	content := "nameserver " + nameserver + "\noptions edns0 trust-ad\n"
	if err := os.WriteFile("/etc/resolv.conf", []byte(content), 0o644); err != nil {
		return fmt.Errorf("writing /etc/resolv.conf: %w", err)
	}
	return os.Lchown("/etc/resolv.conf", base, base)
}
