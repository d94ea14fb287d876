package gvisor

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation/guest"
)

// initPath is where the helper, the sandbox's init, appears in the
// sandbox, beside the tools.
const initPath = "/opt/agent-sandbox/bin/gvinit"

// nofile is the sandbox's open file limit: the host's usual hard limit,
// since envd's processes start with it.
const nofile = 1 << 20

// sandboxSpec is the OCI runtime spec runsc starts the sandbox with:
// our init as its one process, the overlay at root (writable: the
// writes land on the sandbox's disk), the host binaries bound read-only
// over the mount points the launcher made, and runsc's processes in
// the sandbox's network namespace and cgroup. runsc's gofer serves every
// file: the sandbox's kernel (the sentry) opens none itself.
func sandboxSpec(dir, hostname, netns, cgroupName string, bins map[string]string, noNewPrivs bool) *specs.Spec {
	// init drops CAP_SYS_ADMIN (which it needs to load the seccomp filter
	// without no_new_privs) from the bounding set before it starts envd,
	// as in every backend: envd and all below it keep guest.KeptCapNames.
	caps := append(guest.KeptCapNames(), "CAP_SYS_ADMIN")
	mounts := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc"},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "nodev", "mode=1777"}},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
	}
	for _, g := range slices.Sorted(maps.Keys(bins)) {
		mounts = append(mounts, specs.Mount{Destination: g, Type: "bind", Source: bins[g], Options: []string{"bind", "ro", "nosuid", "nodev"}})
	}
	return &specs.Spec{
		Version: specs.Version,
		Process: &specs.Process{
			User: specs.User{UID: 0, GID: 0},
			Args: []string{initPath},
			Env:  []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
			Cwd:  "/",
			Capabilities: &specs.LinuxCapabilities{
				Bounding: caps, Effective: caps, Permitted: caps,
			},
			Rlimits:         []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: nofile, Soft: nofile}},
			NoNewPrivileges: noNewPrivs,
		},
		Root:     &specs.Root{Path: filepath.Join(dir, rootDir)},
		Hostname: hostname,
		Mounts:   mounts,
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace},
				{Type: specs.MountNamespace}, {Type: specs.NetworkNamespace, Path: netns},
			},
			CgroupsPath: "/" + cgroupName,
		},
	}
}

// writeSpec writes spec as the bundle's config.json.
func writeSpec(dir string, spec *specs.Spec) error {
	b, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, bundleDir, specFile), b, 0o600)
}
