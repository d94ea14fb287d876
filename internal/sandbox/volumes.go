package sandbox

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
	"github.com/agent-sandbox/agent-sandbox/internal/volume"
)

// Volumes finds volumes' files for the sandboxes that mount them;
// *volume.Service implements it.
type Volumes interface {
	// Path returns the host directory of the volume named name; an error
	// wrapping volume.ErrNotFound when there is none.
	Path(ctx context.Context, name string) (string, error)
}

var _ Volumes = (*volume.Service)(nil)

// reservedMounts are where a volume may not go: the sandbox's own views
// of the kernel and its devices.
var reservedMounts = []string{"/proc", "/sys", "/dev"}

// checkMounts refuses volume mounts that backend cannot make or that are
// malformed, naming each as E2B does ("invalid mounts:" and a line per
// mount).
func (m *Manager) checkMounts(ctx context.Context, backend isolation.Backend, mounts []store.VolumeMount) error {
	if len(mounts) == 0 {
		return nil
	}
	if !backend.Capabilities().Volumes || m.cfg.Volumes == nil {
		return cannot(backend, "mount volumes")
	}
	var problems []string
	used := map[string]bool{}
	for i, vm := range mounts {
		reason := ""
		switch p := vm.Path; {
		case !path.IsAbs(p):
			reason = "path must be absolute"
		case path.Clean(p) != p:
			reason = "path must not contain any '.' or '..' components"
		case used[p]:
			reason = fmt.Sprintf("path '%s' is already used", p)
		case p == "/" || reserved(p):
			reason = fmt.Sprintf("path '%s' is reserved: the sandbox's root, /proc, /sys or /dev", p)
		}
		used[vm.Path] = true
		if reason == "" {
			if _, err := m.cfg.Volumes.Path(ctx, vm.Name); errors.Is(err, volume.ErrNotFound) {
				reason = fmt.Sprintf("volume '%s' not found", vm.Name)
			} else if err != nil {
				return fmt.Errorf("looking up volume %s: %w", vm.Name, err)
			}
		}
		if reason != "" {
			problems = append(problems, fmt.Sprintf("\t- volume mount #%d: %s", i, reason))
		}
	}
	if len(problems) > 0 {
		return invalid("invalid mounts:\n%s", strings.Join(problems, "\n"))
	}
	return nil
}

func reserved(p string) bool {
	for _, r := range reservedMounts {
		if p == r || strings.HasPrefix(p, r+"/") {
			return true
		}
	}
	return false
}

// volumeSpecs resolves rec's volume mounts to host directories.
func (m *Manager) volumeSpecs(ctx context.Context, rec store.Sandbox) ([]isolation.VolumeMount, error) {
	var out []isolation.VolumeMount
	for _, vm := range rec.VolumeMounts {
		dir, err := m.cfg.Volumes.Path(ctx, vm.Name)
		if err != nil {
			return nil, fmt.Errorf("volume %s: %w", vm.Name, err)
		}
		out = append(out, isolation.VolumeMount{Source: dir, Target: vm.Path})
	}
	return out, nil
}
