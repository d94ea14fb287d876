package jail

import (
	"net/netip"
)

// state is what Instance.State records (as JSON) for Adopt and Cleanup.
type state struct {
	InitPid   int    `json:"init_pid"`
	InitStart uint64 `json:"init_start"` // /proc/<pid>/stat field 22, against pid reuse
	Cgroup    string `json:"cgroup"`
	Netns     string `json:"netns"`
	Dir       string `json:"dir"`
	CPUCount  int    `json:"cpu_count"`
	// CPUSet is the CPUs the sandbox is pinned to; empty: all of them.
	CPUSet []int `json:"cpu_set,omitempty"`
	// Gateway and Address are the sandbox veth's lease (host end, eth0);
	// zero without networking.
	Gateway netip.Addr `json:"gateway,omitzero"`
	Address netip.Addr `json:"address,omitzero"`
	// UsernsBase is the host id of the sandbox's root, the start of its
	// reserved uid/gid range; zero without a user namespace.
	UsernsBase uint32 `json:"userns_base,omitempty"`
	// Layers are the read-only layers over the template (top first):
	// Spec.Layers and those of the snapshot it started from. A snapshot
	// of the sandbox keeps them under its own upper.
	Layers []string `json:"layers,omitempty"`
	// Exclude is what init placed in the sandbox itself (exportExcludes),
	// which a snapshot leaves out.
	Exclude []string `json:"exclude,omitempty"`
}

// initConfig is what the host sends the sandbox's init on fd 3.
type initConfig struct {
	ID       string   `json:"id"`
	RootFS   string   `json:"rootfs"`
	Disk     string   `json:"disk"`     // ext4 image
	DiskDir  string   `json:"disk_dir"` // where init mounts it (host path, empty dir)
	RootDir  string   `json:"root_dir"` // where init mounts the overlay
	EnvdPath string   `json:"envd_path"`
	EnvdArgs []string `json:"envd_args"`
	// EnvdToken is envd's access token, handed over on guest.EnvdTokenFd.
	EnvdToken string `json:"envd_token,omitempty"`
	// Tools are further host binaries mounted read-only like envd.
	Tools []toolMount `json:"tools,omitempty"`
	// Volumes are host directories mounted read-write (Spec.Volumes),
	// idmapped like the template in a user namespace.
	Volumes       []toolMount `json:"volumes,omitempty"`
	Hostname      string      `json:"hostname"`
	Nameserver    string      `json:"nameserver,omitempty"` // for /etc/resolv.conf; empty: leave it
	NoNewPrivs    bool        `json:"no_new_privs"`
	UnshareCgroup bool        `json:"unshare_cgroup"` // cgroup v1: after cgroup.Add
	// CgroupV2 and Cgroups say which cgroup file systems init mounts,
	// read-only, at /sys/fs/cgroup: cgroup2, or the hierarchies of these
	// v1 controllers. The cgroup namespace roots each at the sandbox's
	// group, so its limits show there.
	CgroupV2 bool     `json:"cgroup_v2,omitempty"`
	Cgroups  []string `json:"cgroups,omitempty"`
	// Layers are read-only layers over RootFS, top first: those of
	// Spec.Snapshot, then Spec.Layers.
	Layers []string `json:"layers,omitempty"`
	// BootID is what the sandbox reads at /proc/sys/kernel/random/boot_id:
	// each start of a sandbox is a boot of its own.
	BootID string `json:"boot_id"`
	// Userns, when set, runs envd in a user namespace, with the template
	// idmapped at LowerDir and each of Layers at the LayerDirs entry of
	// the same index (host paths, empty dirs) as the overlay's lowers.
	Userns    *usernsConfig `json:"userns,omitempty"`
	LowerDir  string        `json:"lower_dir,omitempty"`
	LayerDirs []string      `json:"layer_dirs,omitempty"`
	// EnvdStage is set only in what init sends the envd stage
	// (forkEnvdStage), which then needs EnvdArgs, EnvdToken and
	// NoNewPrivs only.
	EnvdStage *stageConfig `json:"envd_stage,omitempty"`

	// MemoryMB is the sandbox's memory limit, which its tmpfs mounts are
	// sized within.
	MemoryMB int `json:"memory_mb,omitempty"`

	// Export is set only in what Stop sends the process that exports a
	// stopped sandbox's changes (export_linux.go); nothing else is.
	Export *exportConfig `json:"export,omitempty"`
}

// initStatus is init's one reply on fd 4.
type initStatus struct {
	Error   string `json:"error,omitempty"`
	EnvdPid int    `json:"envd_pid,omitempty"`
	Userns  bool   `json:"userns,omitempty"` // envd runs in a user namespace
	// UsernsFallback is why not, when one was asked for but refused.
	UsernsFallback string `json:"userns_fallback,omitempty"`
	// DiskDev is the number of the loop device holding the sandbox's
	// disk, on which the host sets its I/O limits.
	DiskDev  uint64 `json:"disk_dev,omitempty"`
	Finished bool   `json:"finished"`
}

// toolMount is a host binary and where it appears in the sandbox.
type toolMount struct {
	Host  string `json:"host"`
	Guest string `json:"guest"`
}
