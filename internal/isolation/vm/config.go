package vm

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation/idmap"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/vm/kernel"
	"github.com/agent-sandbox/agent-sandbox/internal/network"
)

// Config configures the backend.
type Config struct {
	// StateDir holds one directory per sandbox (its disk overlay, its
	// initramfs with the boot configuration, QEMU's control socket), e.g.
	// <data-dir>/vms. Nothing else may be in it.
	StateDir string
	// CacheDir holds what sandboxes share, made once and reused: the
	// initramfs of each kernel and init, the tools disk of each set of
	// host binaries, the memory snapshots; e.g. <data-dir>/vm-boot.
	CacheDir string
	// Snapshots: a sandbox starts by restoring a memory snapshot of a VM
	// of its shape (template image, CPUs, memory, disk size, tools) that
	// was saved once envd was ready, instead of booting; the first of each
	// shape boots cold and has the snapshot made beside it.
	Snapshots bool
	// Log receives the backend's logs; default slog.Default().
	Log *slog.Logger
	// Network is the host's sandbox networking; it must have an address
	// pool: a VM's only way in is its tap. Prepared by the caller.
	Network *network.Host
	// KernelDir is the unpacked guest kernel package; default
	// kernel.DefaultDir (scripts/install-deps.sh puts it there).
	KernelDir string
	// Init is the guest's init binary (cmd/vminit); default vminit next
	// to the running executable.
	Init string
	// QEMU is the qemu-system-x86_64 binary; default from PATH.
	QEMU string
	// QEMUImg is qemu-img, which makes each sandbox's overlay; default
	// from PATH.
	QEMUImg string
	// Accel is "kvm", "tcg" or "" for kvm where DetectKVM finds it
	// usable, else tcg.
	Accel string
	// CgroupParent is the parent cgroup of the VMs' QEMU processes;
	// default "agent-sandbox-vm".
	CgroupParent string
	// NoNewPrivs sets no_new_privs for envd and what it starts inside the
	// guest, as in the jail.
	NoNewPrivs bool
	// UsernsBase and UsernsDir are the host id ranges the QEMU processes
	// run as (one range per sandbox, its first id), shared with the jail's
	// user namespaces; defaults idmap.DefaultBase and
	// /run/agent-sandbox/userns.
	UsernsBase uint32
	UsernsDir  string
}

// The choices of Config.Accel.
const (
	AccelKVM = "kvm"
	AccelTCG = "tcg"
)

func (c *Config) setDefaults() {
	if c.Log == nil {
		c.Log = slog.Default()
	}
	if c.Init == "" {
		if exe, err := os.Executable(); err == nil {
			c.Init = filepath.Join(filepath.Dir(exe), "vminit")
		}
	}
	if c.KernelDir == "" {
		c.KernelDir = kernel.DefaultDir
	}
	if c.QEMU == "" {
		c.QEMU = "qemu-system-x86_64"
	}
	if c.QEMUImg == "" {
		c.QEMUImg = "qemu-img"
	}
	if c.CgroupParent == "" {
		c.CgroupParent = "agent-sandbox-vm"
	}
	if c.UsernsBase == 0 {
		c.UsernsBase = idmap.DefaultBase
	}
	if c.UsernsDir == "" {
		c.UsernsDir = "/run/agent-sandbox/userns"
	}
}

// Validate reports what is wrong with c, after defaults.
func (c *Config) Validate() error {
	var errs []error
	for name, dir := range map[string]string{"state dir": c.StateDir, "cache dir": c.CacheDir, "uid range dir": c.UsernsDir, "init": c.Init} {
		if !filepath.IsAbs(dir) {
			errs = append(errs, fmt.Errorf("%s %q is not an absolute path", name, dir))
		}
	}
	if !filepath.IsAbs(c.KernelDir) {
		errs = append(errs, fmt.Errorf("kernel dir %q is not an absolute path", c.KernelDir))
	}
	if c.Network == nil {
		errs = append(errs, errors.New("no sandbox networking: a VM is reached through its network link only"))
	}
	switch c.Accel {
	case "", AccelKVM, AccelTCG:
	default:
		errs = append(errs, fmt.Errorf("accelerator %q: want kvm or tcg", c.Accel))
	}
	if strings.Trim(c.CgroupParent, "/") == "" || strings.Contains(c.CgroupParent, "..") {
		errs = append(errs, fmt.Errorf("invalid cgroup parent %q", c.CgroupParent))
	}
	if err := idmap.CheckBase(c.UsernsBase); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// KVM is whether QEMU, run as an unprivileged uid with no groups but
// the one named here, can use hardware virtualisation on this host.
type KVM struct {
	Usable bool
	// GID is /dev/kvm's group, which QEMU gets as its one supplementary
	// group (hosts give /dev/kvm to a "kvm" group, mode 0660); 0 when
	// /dev/kvm admits every user.
	GID uint32
	// Why says why not, when it is not usable.
	Why string
}

// DetectKVM looks at /dev/kvm and the KVM modules. A /dev/kvm without
// kvm_intel or kvm_amd is not hardware virtualisation (e.g. kvm_pvm,
// which runs only guest kernels built for it, and not Debian's), so it
// does not count.
func DetectKVM() KVM {
	hw := false
	for _, m := range []string{"kvm_intel", "kvm_amd"} {
		if _, err := os.Stat(filepath.Join("/sys/module", m)); err == nil {
			hw = true
		}
	}
	var st unix.Stat_t
	switch err := unix.Stat("/dev/kvm", &st); {
	case err != nil:
		return KVM{Why: fmt.Sprintf("/dev/kvm: %v", err)}
	case st.Mode&unix.S_IFMT != unix.S_IFCHR:
		return KVM{Why: "/dev/kvm is not a character device"}
	case !hw:
		return KVM{Why: "/dev/kvm is there but neither kvm_intel nor kvm_amd is loaded (no hardware virtualisation; e.g. kvm_pvm needs guest kernels built for it)"}
	}
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return KVM{Why: fmt.Sprintf("opening /dev/kvm: %v", err)}
	}
	f.Close()
	switch {
	case st.Mode&0o006 == 0o006:
		return KVM{Usable: true}
	case st.Mode&0o060 == 0o060 && st.Gid != 0:
		return KVM{Usable: true, GID: st.Gid}
	}
	return KVM{Why: fmt.Sprintf("/dev/kvm (mode %#o, group %d) admits no unprivileged QEMU process: give it a group of its own with mode 0660, as udev's kvm rule does", st.Mode&0o777, st.Gid)}
}
