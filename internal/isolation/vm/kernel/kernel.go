// Package kernel finds the guest kernel that scripts/install-deps.sh
// unpacked for the vm backend: Debian's cloud kernel package, extracted
// with dpkg-deb -x into /var/lib/agent-sandbox/kernels/<version>/ (its
// boot/ and lib/modules/ as the package lays them out; nothing goes into
// the host's /boot), with the symlink current pointing at the version in
// use.
package kernel

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// DefaultDir is where install-deps.sh points at the guest kernel in use.
const DefaultDir = "/var/lib/agent-sandbox/kernels/current"

// installHint is what to run when the kernel is missing or incomplete.
const installHint = "run scripts/install-deps.sh --vm"

// Kernel is one unpacked guest kernel.
type Kernel struct {
	// Dir is the kernel's directory with symlinks resolved, so that a
	// later install pointing current elsewhere does not change a Kernel
	// already open.
	Dir string
	// Version is the kernel release, as uname -r shows it in the guest
	// (e.g. "6.1.0-57-cloud-amd64").
	Version string
	// Vmlinuz is the compressed kernel image (bzImage), for QEMU's -kernel.
	Vmlinuz string
	// ModulesDir is lib/modules/<Version>, the tree the initramfs takes the
	// virtio modules from (the cloud kernel builds them as modules).
	ModulesDir string
}

// Open finds the kernel unpacked in dir (DefaultDir unless told). It
// expects exactly one boot/vmlinuz-<version> and its modules directory.
func Open(dir string) (*Kernel, error) {
	resolved, err := filepath.EvalSymlinks(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("guest kernel not found at %s: %s", dir, installHint)
	}
	if err != nil {
		return nil, fmt.Errorf("opening the guest kernel at %s: %w", dir, err)
	}
	images, err := filepath.Glob(filepath.Join(resolved, "boot", "vmlinuz-*"))
	if err != nil {
		return nil, fmt.Errorf("opening the guest kernel at %s: %w", dir, err)
	}
	switch len(images) {
	case 0:
		return nil, fmt.Errorf("guest kernel not found at %s (no boot/vmlinuz-*): %s", dir, installHint)
	case 1:
	default:
		return nil, fmt.Errorf("guest kernel at %s is ambiguous: %d images in boot/ (%s); reinstall it: %s",
			dir, len(images), strings.Join(images, ", "), installHint)
	}
	version := strings.TrimPrefix(filepath.Base(images[0]), "vmlinuz-")
	k := &Kernel{Dir: resolved, Version: version, Vmlinuz: images[0]}
	// Debian 12's packages ship lib/modules; later ones, merged into /usr,
	// ship usr/lib/modules.
	for _, rel := range []string{"lib/modules", "usr/lib/modules"} {
		d := filepath.Join(resolved, rel, version)
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			k.ModulesDir = d
			return k, nil
		}
	}
	return nil, fmt.Errorf("guest kernel %s at %s has no lib/modules/%s: %s", version, dir, version, installHint)
}
