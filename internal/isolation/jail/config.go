package jail

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation/idmap"
	"github.com/agent-sandbox/agent-sandbox/internal/network"
)

// defaultPids caps a sandbox's tasks (processes and threads) at one per
// MiB of its memory, and at least minPids. Every sandbox maps the same
// template files (libc, bash), so a sandbox whose tasks alone can fill its
// memory (a fork bomb: about 1 MiB each) keeps its memory cgroup
// reclaiming, and reclaim walks those files' reverse maps, holding the
// lock that every neighbour's exec and mmap of them takes.
// Measured with a fork bomb beside a quiet sandbox: at 1024 tasks in
// 512 MiB the quiet sandbox's fork+exec stalled up to 8 s, at 512 under
// half a second.
func defaultPids(memoryMB int) int { return max(minPids, memoryMB) }

const minPids = 256

// userTasks is the most tasks one user of a sandbox may hold (RLIMIT_NPROC,
// which a user namespace counts per sandbox user): the sandbox's limit less
// a reserve of a quarter, at most 64. envd is a Go program that dies when
// it cannot start a thread, so a user's fork bomb must leave it room.
// Without a user namespace the limit would count a host uid across all
// sandboxes, and is not set.
func userTasks(pids int) int { return pids - min(64, pids/4) }

// Config configures the backend.
type Config struct {
	// StateDir holds one directory per sandbox (disk image, log, mount
	// points), e.g. <data-dir>/sandboxes.
	StateDir string
	// RunDir holds runtime state that must not outlive a reboot: network
	// namespace bind mounts. Default /run/agent-sandbox.
	RunDir string
	// Log receives the backend's logs; default slog.Default().
	Log *slog.Logger
	// InitPath is the binary re-executed as each sandbox's init; default
	// /proc/self/exe. It must call InitMain when IsInit(args).
	InitPath string
	// InitArgs are its arguments; default []string{"init"}.
	InitArgs []string
	// CgroupParent is the parent cgroup of all sandboxes, relative to the
	// hierarchy root; default "agent-sandbox".
	CgroupParent string
	// NoNewPrivs sets no_new_privs for envd and everything it starts, which
	// disables setuid programs such as sudo. See the package doc.
	NoNewPrivs bool
	// Network is the host's sandbox networking, which makes each
	// sandbox's network namespace (and veth, lease and firewall pieces);
	// the caller prepares it (Host.Prepare) before Adopt and Start. nil:
	// loopback only, namespaces under RunDir.
	Network *network.Host
	// Userns says whether each sandbox's processes run in a user namespace
	// that maps its ids 0..65535 onto a host range of its own (see the
	// package doc); default UsernsAuto.
	Userns UsernsMode
	// UsernsBase is the first host id of the first range; default
	// idmap.DefaultBase. Ranges follow every 65536 ids.
	UsernsBase uint32
	// UsernsDir holds the host-wide reservations of those ranges; default
	// /run/agent-sandbox/userns, shared by every server on the host
	// whatever its RunDir.
	UsernsDir string
}

// UsernsMode is a choice of Config.Userns.
type UsernsMode string

// The user namespace modes.
const (
	// UsernsAuto uses user namespaces where the host allows them and
	// otherwise starts sandboxes without, logging why once.
	UsernsAuto UsernsMode = "auto"
	// UsernsOn requires them: a sandbox that cannot have one fails.
	UsernsOn UsernsMode = "on"
	// UsernsOff never uses them: root in a sandbox is host uid 0, held
	// down by the other layers only.
	UsernsOff UsernsMode = "off"
)

func (c *Config) setDefaults() {
	if c.RunDir == "" {
		c.RunDir = "/run/agent-sandbox"
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	if c.InitPath == "" {
		c.InitPath = "/proc/self/exe"
	}
	if c.InitArgs == nil {
		c.InitArgs = []string{initCommand}
	}
	if c.CgroupParent == "" {
		c.CgroupParent = "agent-sandbox"
	}
	if c.Userns == "" {
		c.Userns = UsernsAuto
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
	if !filepath.IsAbs(c.StateDir) {
		errs = append(errs, fmt.Errorf("state dir %q is not an absolute path", c.StateDir))
	}
	if !filepath.IsAbs(c.RunDir) {
		errs = append(errs, fmt.Errorf("run dir %q is not an absolute path", c.RunDir))
	}
	if strings.Trim(c.CgroupParent, "/") == "" || strings.Contains(c.CgroupParent, "..") {
		errs = append(errs, fmt.Errorf("invalid cgroup parent %q", c.CgroupParent))
	}
	switch c.Userns {
	case UsernsAuto, UsernsOn, UsernsOff:
	default:
		errs = append(errs, fmt.Errorf("user namespace mode %q: want auto, on or off", c.Userns))
	}
	if err := idmap.CheckBase(c.UsernsBase); err != nil {
		errs = append(errs, err)
	}
	if !filepath.IsAbs(c.UsernsDir) {
		errs = append(errs, fmt.Errorf("uid range dir %q is not an absolute path", c.UsernsDir))
	}
	return errors.Join(errs...)
}

// initCommand is the hidden CLI command that runs InitMain.
const initCommand = "init"

// IsInit reports whether args (without the program name) ask for the
// sandbox init, which the CLI must then run with InitMain.
func IsInit(args []string) bool { return len(args) > 0 && args[0] == initCommand }
