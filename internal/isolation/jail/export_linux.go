package jail

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation/disk"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/guest"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/idmap"
)

// Exporting a sandbox's changes (isolation.Spec.Export). The overlay's
// upper directory lives on the sandbox's disk image, written by the
// sandbox: after the sandbox's processes are gone, Stop starts this binary
// again as an exporter in a mount namespace of its own, which mounts the
// image read-only, copies the upper into the export directory and exits,
// taking its mounts with it whatever happens (nothing is ever mounted in
// the server's mount namespace).
//
// The tree is the sandbox's, so it is read as hostile: nothing is
// followed (symlinks are copied as links, files opened O_NOFOLLOW), only
// directories, regular files, symlinks, FIFOs and whiteouts are accepted
// (a device node or socket fails the export, naming it), and the copy is
// written through an os.Root of the destination. Ids are shifted back from
// the sandbox's host range (user namespace) to the sandbox's own; file
// capabilities (security.capability) are rewritten for the new owner;
// user.* xattrs and the overlay's opaque marker are kept, the overlay's
// other xattrs and POSIX ACLs are not. Hard links within the tree stay
// hard links.

// exportTimeout bounds one export.
const exportTimeout = 10 * time.Minute

// exportConfig is what the exporter needs.
type exportConfig struct {
	Disk     string `json:"disk"`      // the sandbox's disk image
	MountDir string `json:"mount_dir"` // empty host dir where the exporter mounts it, in its own namespace
	Dest     string `json:"dest"`      // Spec.Export: empty host dir
	// Base is the host id of the sandbox's root (user namespace), 0 without.
	Base uint32 `json:"base"`
	// Exclude are paths (relative to the root) that the backend put in the
	// sandbox itself: envd's and the tools' mount points, resolv.conf.
	Exclude []string `json:"exclude"`
	// Device, when set, is the loop device ("loopN") that the running
	// sandbox has the image mounted from: the exporter mounts that device,
	// so that it reads the sandbox's own file system, page cache and all,
	// instead of attaching the image anew (snapshot_linux.go).
	Device string `json:"device,omitempty"`
	// Snapshot leaves out sockets and device nodes, which no template may
	// hold and nothing can use after a restart, instead of failing.
	Snapshot bool `json:"snapshot,omitempty"`
}

// exportExcludes lists what init places in a sandbox of cfg.
func exportExcludes(cfg initConfig) []string {
	ex := []string{strings.TrimPrefix(guest.EnvdPath, "/")}
	for _, t := range cfg.Tools {
		ex = append(ex, strings.TrimPrefix(t.Guest, "/"))
	}
	if cfg.Nameserver != "" {
		ex = append(ex, "etc/resolv.conf")
	}
	return ex
}

// exportChanges runs the exporter for the stopped sandbox's disk.
func (inst *Instance) exportChanges(ctx context.Context) error {
	image := filepath.Join(inst.dir, diskFile)
	// The sandbox's own mount of the image must be gone first: its loop
	// device detaches once the last process of its mount namespace exits.
	if err := disk.ReleaseLoops(ctx, image); err != nil {
		return fmt.Errorf("exporting changes: %w", err)
	}
	ec := *inst.export
	ec.Disk, ec.MountDir, ec.Base = image, filepath.Join(inst.dir, diskDir), inst.state.UsernsBase
	if err := inst.b.runHelper(ctx, "agent-sandbox-export", &initConfig{Export: &ec}, filepath.Join(inst.dir, logFile)); err != nil {
		return fmt.Errorf("exporting changes to %s: %w", ec.Dest, err)
	}
	return nil
}

// runHelper re-executes this binary as init with cfg in a new mount
// namespace, waits for its status and returns its error. Its output goes
// to the file at logPath.
func (b *Backend) runHelper(ctx context.Context, name string, cfg *initConfig, logPath string) error {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer cfgR.Close()
	defer cfgW.Close()
	statR, statW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer statR.Close()
	defer statW.Close()
	cmd := exec.Command(b.cfg.InitPath, b.cfg.InitArgs...)
	cmd.Args[0] = name
	cmd.Env = []string{}
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{cfgR, statW} // fds 3 and 4, as for init
	cmd.SysProcAttr = &unix.SysProcAttr{Setsid: true, Pdeathsig: unix.SIGKILL, Cloneflags: unix.CLONE_NEWNS}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", name, err)
	}
	cfgR.Close()
	statW.Close()
	err = json.NewEncoder(cfgW).Encode(cfg)
	cfgW.Close()
	if err == nil {
		_, err = readStatus(ctx, statR)
	}
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return err
	}
	return cmd.Wait()
}

// exportMain is the exporter: it mounts the image read-only and copies its
// upper directory to the destination.
func exportMain(ec *exportConfig) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("export: making mounts private: %w", err)
	}
	mount := func() error {
		_, err := disk.Mount(ec.Disk, ec.MountDir, unix.MS_RDONLY|unix.MS_NODEV|unix.MS_NOSUID|unix.MS_NOEXEC)
		return err
	}
	if ec.Device != "" {
		mount = func() error { return disk.MountLive(ec.Device, ec.Disk, ec.MountDir) }
	}
	if err := mount(); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	dst, err := os.OpenRoot(ec.Dest)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	defer dst.Close()
	if entries, err := os.ReadDir(ec.Dest); err != nil || len(entries) > 0 {
		return fmt.Errorf("export: destination %s is not an empty directory (%v)", ec.Dest, err)
	}
	x := &exporter{cfg: ec, src: filepath.Join(ec.MountDir, disk.UpperDir), dst: dst, links: map[[2]uint64]string{}}
	if err := x.dir("."); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	return nil
}

// exporter copies one upper directory.
type exporter struct {
	cfg   *exportConfig
	src   string               // the upper directory
	dst   *os.Root             // the destination
	links map[[2]uint64]string // source (dev, inode) of a hard-linked file → its first copy
}

// dir copies the directory rel (relative to both trees; "." for the root,
// which exists in dst already) with its entries, and its attributes last.
func (x *exporter) dir(rel string) error {
	p := filepath.Join(x.src, rel)
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return err
	}
	if rel != "." {
		if err := x.dst.Mkdir(rel, 0o700); err != nil {
			return err
		}
	}
	entries, err := os.ReadDir(p)
	if err != nil {
		return err
	}
	for _, e := range entries {
		child := filepath.Join(rel, e.Name())
		if slices.Contains(x.cfg.Exclude, child) {
			continue
		}
		if err := x.entry(child); err != nil {
			return err
		}
	}
	return x.attrs(rel, &st, true)
}

// entry copies the non-root entry rel.
func (x *exporter) entry(rel string) error {
	p := filepath.Join(x.src, rel)
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return err
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return x.dir(rel)
	case unix.S_IFREG:
		key := [2]uint64{st.Dev, st.Ino}
		if first, ok := x.links[key]; ok && st.Nlink > 1 {
			return x.dst.Link(first, rel)
		}
		if err := x.file(p, rel); err != nil {
			return err
		}
		if st.Nlink > 1 {
			x.links[key] = rel
		}
	case unix.S_IFLNK:
		target, err := os.Readlink(p)
		if err != nil {
			return err
		}
		if err := x.dst.Symlink(target, rel); err != nil {
			return err
		}
	case unix.S_IFIFO:
		if err := unix.Mkfifo(x.path(rel), 0o600); err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
	case unix.S_IFCHR:
		if st.Rdev != 0 && x.cfg.Snapshot {
			return nil
		}
		if st.Rdev != 0 {
			return fmt.Errorf("%s: a device node, which a template may not hold", rel)
		}
		if err := unix.Mknod(x.path(rel), unix.S_IFCHR|0o600, 0); err != nil { // a whiteout
			return fmt.Errorf("%s: %w", rel, err)
		}
	case unix.S_IFSOCK, unix.S_IFBLK:
		if x.cfg.Snapshot {
			return nil
		}
		return fmt.Errorf("%s: a %s, which a template may not hold", rel, fs.FileMode(st.Mode).Type())
	default:
		return fmt.Errorf("%s: a %s, which a template may not hold", rel, fs.FileMode(st.Mode).Type())
	}
	return x.attrs(rel, &st, false)
}

// path is rel in the destination, for the calls os.Root lacks (mknod,
// xattrs, times). Every directory on it was made by this export, so it
// has no symlink to follow.
func (x *exporter) path(rel string) string { return filepath.Join(x.cfg.Dest, rel) }

// file copies the regular file at p to rel.
func (x *exporter) file(p, rel string) error {
	in, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := x.dst.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("copying %s: %w", rel, err)
	}
	return nil
}

// attrs gives rel the owner (shifted back), mode, xattrs and times of the
// source entry st. Ownership goes first: chown clears setuid bits.
func (x *exporter) attrs(rel string, st *unix.Stat_t, isDir bool) error {
	whiteout := st.Mode&unix.S_IFMT == unix.S_IFCHR
	uid, err := x.shift(rel, st.Uid, whiteout)
	if err != nil {
		return err
	}
	gid, err := x.shift(rel, st.Gid, whiteout)
	if err != nil {
		return err
	}
	if err := x.dst.Lchown(rel, int(uid), int(gid)); err != nil {
		return err
	}
	symlink := st.Mode&unix.S_IFMT == unix.S_IFLNK
	if !symlink {
		if err := unix.Chmod(x.path(rel), st.Mode&0o7777); err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
	}
	if err := x.xattrs(rel, isDir); err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	ts := []unix.Timespec{st.Atim, st.Mtim}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, x.path(rel), ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	return nil
}

// shift maps a host id of the sandbox's range back to the sandbox's own.
// Overlayfs makes whiteouts as its mounter, host root.
func (x *exporter) shift(rel string, id uint32, whiteout bool) (uint32, error) {
	b := x.cfg.Base
	switch {
	case b == 0, whiteout && id == 0:
		return id, nil
	case id >= b && id-b < idmap.Size:
		return id - b, nil
	}
	return 0, fmt.Errorf("%s: owned by host id %d, outside the sandbox's range %d-%d", rel, id, b, b+idmap.Size-1)
}

// Extended attributes the export keeps, and those of an overlay upper it
// cannot represent: a renamed directory (redirect) or a file whose data
// is still below (metacopy), which an overlay mounted with the options
// buildRoot gives never makes.
const (
	opaqueXattr   = "trusted.overlay.opaque"
	capXattr      = "security.capability"
	redirectXattr = "trusted.overlay.redirect"
	metacopyXattr = "trusted.overlay.metacopy"
)

// xattrs copies the xattrs the export keeps from the source entry rel.
func (x *exporter) xattrs(rel string, isDir bool) error {
	p := filepath.Join(x.src, rel)
	names, err := listXattrs(p)
	if err != nil {
		return err
	}
	for _, name := range names {
		if name == redirectXattr || name == metacopyXattr {
			return fmt.Errorf("has %s: the sandbox's overlay was mounted with redirects or metacopy on, which an export cannot carry", name)
		}
		keep := strings.HasPrefix(name, "user.") || name == capXattr || isDir && name == opaqueXattr
		if !keep {
			continue
		}
		val, err := getXattr(p, name)
		if err != nil {
			return err
		}
		switch name {
		case opaqueXattr:
			if string(val) != "y" {
				continue
			}
		case capXattr:
			if val, err = x.fileCaps(val); err != nil {
				return err
			}
		}
		if err := unix.Lsetxattr(x.path(rel), name, val, 0); err != nil {
			return fmt.Errorf("setting %s: %w", name, err)
		}
	}
	return nil
}

// VFS capability revisions (linux/capability.h).
const (
	vfsCapRevisionMask = 0xff000000
	vfsCapRevision2    = 0x02000000
	vfsCapRevision3    = 0x03000000
	vfsCapV2Size       = 20
	vfsCapV3Size       = 24
)

// fileCaps rewrites file capabilities for the template: capabilities set
// in a user namespace are stored as revision 3 with the host id of that
// namespace's root; shifted back to 0 that is a plain revision 2.
func (x *exporter) fileCaps(val []byte) ([]byte, error) {
	if len(val) < 4 {
		return nil, errors.New("malformed security.capability")
	}
	rev := binary.LittleEndian.Uint32(val) & vfsCapRevisionMask
	if rev != vfsCapRevision3 {
		return val, nil
	}
	if len(val) != vfsCapV3Size {
		return nil, errors.New("malformed security.capability")
	}
	root, err := x.shift("security.capability", binary.LittleEndian.Uint32(val[20:]), false)
	if err != nil {
		return nil, err
	}
	out := slices.Clone(val)
	if root != 0 {
		binary.LittleEndian.PutUint32(out[20:], root)
		return out, nil
	}
	out = out[:vfsCapV2Size]
	binary.LittleEndian.PutUint32(out, binary.LittleEndian.Uint32(val)&^vfsCapRevisionMask|vfsCapRevision2)
	return out, nil
}

func listXattrs(p string) ([]string, error) {
	buf := make([]byte, 4096)
	for {
		n, err := unix.Llistxattr(p, buf)
		if errors.Is(err, unix.ERANGE) {
			buf = make([]byte, 2*len(buf))
			continue
		}
		if errors.Is(err, unix.ENOTSUP) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("listing xattrs: %w", err)
		}
		var names []string
		for _, s := range strings.Split(string(buf[:n]), "\x00") {
			if s != "" {
				names = append(names, s)
			}
		}
		return names, nil
	}
}

func getXattr(p, name string) ([]byte, error) {
	buf := make([]byte, 256)
	for {
		n, err := unix.Lgetxattr(p, name, buf)
		if errors.Is(err, unix.ERANGE) {
			buf = make([]byte, 2*len(buf))
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", name, err)
		}
		return buf[:n], nil
	}
}
