package vm

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agent-sandbox/agent-sandbox/internal/mountinfo"
)

// QEMU runs chrooted into a directory of the backend's, in a mount
// namespace of its own, so that a guest that took over its QEMU process
// sees nothing of the host's files but what QEMU is made of:
//
//	/usr        the host's, read-only (QEMU, its libraries and firmware)
//	/lib, /lib64, /bin   links into /usr, as on the host
//	/proc       a proc of its own that shows a process only its own
//	            (hidepid=invisible, subset=pid): QEMU opens the kernel and
//	            initrd it inherits through /proc/self/fd
//	/dev        null, zero, random, urandom and, under KVM, kvm (with its
//	            host group, which QEMU gets)
//
// The root itself is a read-only tmpfs. It is made once (at New) and kept
// mounted, under the network's run dir, for the VMs a restarted server
// adopts; rootMarker says it is complete.
const (
	rootDirName = "qemu-root"
	rootMarker  = ".complete"
	rootSource  = "agent-sandbox-qemu-root"
)

// prepareRoot makes the root at dir unless it is there, complete. kvm
// says whether it needs /dev/kvm, and with which group.
func prepareRoot(dir string, kvm KVM) error {
	if _, err := os.Stat(filepath.Join(dir, rootMarker)); err == nil {
		return nil
	}
	// A root left half made by a server that died making it.
	mounts, err := mountinfo.Under(dir)
	if err != nil {
		return fmt.Errorf("preparing QEMU's root: %w", err)
	}
	for _, m := range mounts {
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("preparing QEMU's root: unmounting %s: %w", m, err)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("preparing QEMU's root: %w", err)
	}
	if err := unix.Mount(rootSource, dir, "tmpfs", unix.MS_NOSUID, "mode=0755,size=64k"); err != nil {
		return fmt.Errorf("preparing QEMU's root: mounting tmpfs at %s: %w", dir, err)
	}
	if err := fillRoot(dir, kvm); err != nil {
		mounts, _ := mountinfo.Under(dir)
		for _, m := range mounts {
			_ = unix.Unmount(m, unix.MNT_DETACH)
		}
		return fmt.Errorf("preparing QEMU's root at %s: %w", dir, err)
	}
	return nil
}

func fillRoot(dir string, kvm KVM) error {
	for _, d := range []string{"usr", "proc", "dev"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	for _, l := range [][2]string{{"usr/lib", "lib"}, {"usr/lib64", "lib64"}, {"usr/bin", "bin"}} {
		if err := os.Symlink(l[0], filepath.Join(dir, l[1])); err != nil {
			return err
		}
	}
	usr := filepath.Join(dir, "usr")
	if err := unix.Mount("/usr", usr, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("binding /usr: %w", err)
	}
	if err := unix.Mount("", usr, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("making /usr read-only: %w", err)
	}
	if err := unix.Mount("proc", filepath.Join(dir, "proc"), "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "hidepid=invisible,subset=pid"); err != nil {
		return fmt.Errorf("mounting a proc of QEMU's own: %w", err)
	}
	nodes := []struct {
		name         string
		major, minor uint32
		mode         uint32
		gid          uint32
	}{
		{"null", 1, 3, 0o666, 0}, {"zero", 1, 5, 0o666, 0},
		{"random", 1, 8, 0o666, 0}, {"urandom", 1, 9, 0o666, 0},
	}
	if kvm.Usable {
		mode := uint32(0o666)
		if kvm.GID != 0 {
			mode = 0o660
		}
		nodes = append(nodes, struct {
			name         string
			major, minor uint32
			mode         uint32
			gid          uint32
		}{"kvm", 10, 232, mode, kvm.GID})
	}
	for _, n := range nodes {
		p := filepath.Join(dir, "dev", n.name)
		if err := unix.Mknod(p, unix.S_IFCHR|n.mode, int(unix.Mkdev(n.major, n.minor))); err != nil {
			return fmt.Errorf("making %s: %w", p, err)
		}
		// mknod applies the umask; and the group is the device's.
		if err := os.Chmod(p, os.FileMode(n.mode)); err != nil {
			return err
		}
		if err := os.Chown(p, 0, int(n.gid)); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, rootMarker), nil, 0o444); err != nil {
		return err
	}
	if err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID, ""); err != nil {
		return fmt.Errorf("making the root read-only: %w", err)
	}
	return nil
}

// checkConfinable reports why QEMU at path cannot run in the root: it
// must be a file under /usr, the one host directory the root has.
func checkConfinable(path string) error {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return err
	}
	if !strings.HasPrefix(real, "/usr/") {
		return fmt.Errorf("QEMU is at %s: it must be under /usr, the one host directory its confinement shows it", real)
	}
	return nil
}
