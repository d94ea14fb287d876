package jail

import (
	"fmt"
	"net/netip"
	"strings"
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
	// EnvdToken is envd's access token, handed over on envdTokenFd.
	EnvdToken string `json:"envd_token,omitempty"`
	// Tools are further host binaries mounted read-only like envd.
	Tools         []toolMount `json:"tools,omitempty"`
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
	// Userns, when set, runs envd in a user namespace, with the template
	// idmapped at LowerDir (a host path, empty dir) as the overlay's lower.
	Userns   *usernsConfig `json:"userns,omitempty"`
	LowerDir string        `json:"lower_dir,omitempty"`
	// EnvdStage is set only in what init sends the envd stage
	// (forkEnvdStage), which then needs EnvdArgs, EnvdToken and
	// NoNewPrivs only.
	EnvdStage *stageConfig `json:"envd_stage,omitempty"`

	// MemoryMB is the sandbox's memory limit, which its tmpfs mounts are
	// sized within; 0 (a one-shot run): DefaultMemoryMB.
	MemoryMB int `json:"memory_mb,omitempty"`

	// A one-shot run (see Run) sets Upper, Work and Run instead of Disk
	// and EnvdPath: the overlay's upper is a host directory and init runs
	// Run's command in place of envd.
	Upper string      `json:"upper,omitempty"`
	Work  string      `json:"work,omitempty"`
	Run   *runCommand `json:"run,omitempty"`
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
	// ExitCode is how Run's command ended: its exit status, or 128 plus
	// the signal that killed it.
	ExitCode int `json:"exit_code,omitempty"`
}

func validID(id string) error {
	if id == "" || len(id) > 128 || strings.Trim(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") != "" {
		return fmt.Errorf("invalid sandbox id %q", id)
	}
	return nil
}

// toolMount is a host binary and where it appears in the sandbox.
type toolMount struct {
	Host  string `json:"host"`
	Guest string `json:"guest"`
}
