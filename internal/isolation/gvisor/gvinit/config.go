package gvinit

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// Config is what the sandbox's init is told, on its stdin.
type Config struct {
	// EnvdArgs are envd's arguments after its path.
	EnvdArgs []string `json:"envd_args"`
	// EnvdToken is envd's access token; empty: none.
	EnvdToken string `json:"envd_token,omitempty"`
	// Nameserver is the host's DNS filter for the sandbox (its gateway),
	// written to /etc/resolv.conf; empty leaves the template's.
	Nameserver string `json:"nameserver,omitempty"`
	NoNewPrivs bool   `json:"no_new_privs,omitempty"`
}

// LaunchConfig is what the launcher is told, on LaunchConfigFd.
type LaunchConfig struct {
	// Image is the sandbox's disk image, mounted at DiskDir.
	Image   string `json:"image"`
	DiskDir string `json:"disk_dir"`
	// RootFS is the template, the overlay's read-only lower layer; the
	// overlay is mounted at RootDir, which runsc's spec names as root.
	RootFS  string `json:"rootfs"`
	RootDir string `json:"root_dir"`
	// MountPoints are the files, by their path in the sandbox, that runsc
	// bind-mounts host binaries over: the launcher makes them in the
	// overlay, as empty files, so that their directories are real ones.
	MountPoints []string `json:"mount_points"`
	// Preload, when set, is a shared object (by its path in the sandbox)
	// the launcher adds to the sandbox's /etc/ld.so.preload.
	Preload string `json:"preload,omitempty"`
	// Runsc is the command executed once the mounts are made: runsc's
	// path and its arguments after it.
	Runsc []string `json:"runsc"`
}

// Validate reports what is wrong with c.
func (c *LaunchConfig) Validate() error {
	var errs []error
	for name, p := range map[string]string{"image": c.Image, "disk dir": c.DiskDir, "rootfs": c.RootFS, "root dir": c.RootDir} {
		if !filepath.IsAbs(p) {
			errs = append(errs, fmt.Errorf("%s %q is not an absolute path", name, p))
		}
		// Overlay options are separated by commas, layers by colons.
		if strings.ContainsAny(p, ",:\\") {
			errs = append(errs, fmt.Errorf("%s %q cannot be an overlay option", name, p))
		}
	}
	for _, p := range append(c.MountPoints, c.Preload) {
		if p == "" {
			continue
		}
		if !filepath.IsAbs(p) || filepath.Clean(p) != p || p == "/" {
			errs = append(errs, fmt.Errorf("mount point %q is not a clean absolute file path", p))
		}
	}
	if len(c.Runsc) == 0 || !filepath.IsAbs(c.Runsc[0]) {
		errs = append(errs, fmt.Errorf("runsc command %q does not start with an absolute path", c.Runsc))
	}
	return errors.Join(errs...)
}

// Descriptors the host passes to the launcher, beside stdin (the
// sandbox init's Config, passed through runsc) and stdout and stderr (the
// sandbox's log).
const (
	// LaunchConfigFd carries the LaunchConfig; the host closes its end
	// once it has applied what it does with the status: the go-ahead.
	LaunchConfigFd = 3
	// LaunchStatusFd receives one LaunchStatus.
	LaunchStatusFd = 4
)

// LaunchStatus is the launcher's report once the mounts are made, or why
// they could not be.
type LaunchStatus struct {
	// DiskDev is the device number of the disk's loop device, which the
	// host's disk I/O caps name.
	DiskDev uint64 `json:"disk_dev,omitempty"`
	Error   string `json:"error,omitempty"`
}

// The arguments that choose the binary's role.
const (
	LaunchArg = "launch"
	ProbeArg  = "probe"
)

// ProbePrefix starts the one line the probe prints, before its
// ProbeResult in JSON.
const ProbePrefix = "gvinit probe: "

// ProbeResult is what the probe found of the kernel it runs on.
type ProbeResult struct {
	// Kernel is its name and release, as uname says.
	Kernel string `json:"kernel"`
	// StatxNoAutomountRefused: it refuses statx(2) with AT_NO_AUTOMOUNT
	// (EINVAL), as runsc releases before 2023 do, while it takes statx
	// without it.
	StatxNoAutomountRefused bool `json:"statx_no_automount_refused"`
}

// ReasonPrefix starts the lines init writes itself on its output, the
// last of which is the sandbox's exit reason.
const ReasonPrefix = "gvinit: "
