package vm

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

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
	// Accel is "kvm", "tcg" or "" for kvm where /dev/kvm is usable.
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
	if c.Accel == "" {
		c.Accel = AccelTCG
		if KVMUsable() {
			c.Accel = AccelKVM
		}
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
	case AccelKVM, AccelTCG:
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

// KVMUsable reports whether QEMU, as the backend runs it (an unprivileged
// uid of a sandbox's range, without supplementary groups), can open
// /dev/kvm, which hardware virtualisation needs: root opening it is not
// enough.
func KVMUsable() bool {
	fi, err := os.Stat("/dev/kvm")
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 || fi.Mode().Perm()&0o006 != 0o006 {
		return false
	}
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return false
	}
	f.Close()
	return true
}
