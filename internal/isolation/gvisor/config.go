package gvisor

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agent-sandbox/agent-sandbox/internal/network"
)

// Config configures the backend.
type Config struct {
	// StateDir holds one directory per sandbox (its disk image, runsc's
	// bundle and state, its log), e.g. <data-dir>/gvisor. Nothing else
	// may be in it but the platform probe's scratch directory.
	StateDir string
	// Log receives the backend's logs; default slog.Default().
	Log *slog.Logger
	// Network is the host's sandbox networking, which makes each
	// sandbox's network namespace (veth, lease, firewall pieces); runsc
	// runs in it with host networking, so what the host enforces on the
	// veth applies unchanged. Prepared by the caller.
	Network *network.Host
	// Runsc is the runsc binary; default from PATH.
	Runsc string
	// Init is the backend's helper (cmd/gvinit): each sandbox's init, its
	// launcher and the platform probe; default gvinit next to the running
	// executable.
	Init string
	// Platform is the gVisor platform: systrap, kvm, ptrace, or "" for
	// the first of these that runs a probe sandbox here.
	Platform string
	// CgroupParent is the parent cgroup of the sandboxes' runsc
	// processes; default "agent-sandbox-gvisor".
	CgroupParent string
	// NoNewPrivs sets no_new_privs for envd and what it starts, as in
	// the jail.
	NoNewPrivs bool
}

// The gVisor platforms, in the order Platform "" tries them: systrap and
// kvm (where /dev/kvm is hardware virtualisation) are faster than ptrace,
// which works wherever runsc does.
var platforms = []string{"systrap", "kvm", "ptrace"}

func (c *Config) setDefaults() {
	if c.Log == nil {
		c.Log = slog.Default()
	}
	if c.Runsc == "" {
		c.Runsc = "runsc"
	}
	if c.Init == "" {
		if exe, err := os.Executable(); err == nil {
			c.Init = filepath.Join(filepath.Dir(exe), "gvinit")
		}
	}
	if c.CgroupParent == "" {
		c.CgroupParent = "agent-sandbox-gvisor"
	}
}

// Validate reports what is wrong with c, after defaults.
func (c *Config) Validate() error {
	var errs []error
	for name, p := range map[string]string{"state dir": c.StateDir, "init": c.Init} {
		if !filepath.IsAbs(p) {
			errs = append(errs, fmt.Errorf("%s %q is not an absolute path", name, p))
		}
	}
	// The overlay's options name the sandbox's directories.
	if strings.ContainsAny(c.StateDir, ",:\\") {
		errs = append(errs, fmt.Errorf("state dir %q cannot be named in an overlay's options", c.StateDir))
	}
	if c.Network == nil {
		errs = append(errs, errors.New("no sandbox networking: runsc runs in each sandbox's network namespace"))
	}
	if c.Platform != "" && !slices.Contains(platforms, c.Platform) {
		errs = append(errs, fmt.Errorf("platform %q: want %s", c.Platform, strings.Join(platforms, ", ")))
	}
	if strings.Trim(c.CgroupParent, "/") == "" || strings.Contains(c.CgroupParent, "..") {
		errs = append(errs, fmt.Errorf("invalid cgroup parent %q", c.CgroupParent))
	}
	return errors.Join(errs...)
}
