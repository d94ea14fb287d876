package sandbox

// Volume mounts. A backend mounts a volume as a host directory that
// every sandbox mounting it shares with the content API (the jail), or,
// with Capabilities.VolumeImages (the vm), as a disk of its own that its
// kernel mounts: then the volume is the sandbox's alone from its start
// until its record stops being live (a sandbox paused to disk still has
// it mounted in its saved memory), since two kernels mounting one ext4
// file system corrupt it. The store says who mounts what (checkMounts
// refuses a create that would share such a volume); the volumes' storage
// holds the loan (Volumes.Attach), so that the host does not mount it
// meanwhile, also across a restart.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path"
	"slices"
	"strings"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
	"github.com/agent-sandbox/agent-sandbox/internal/volume"
)

// Volumes finds volumes' files for the sandboxes that mount them;
// *volume.Service implements it.
type Volumes interface {
	// Path returns the host directory of the volume named name, mounted
	// on the host; an error wrapping volume.ErrNotFound when there is
	// none, volume.ErrInUse while it is attached to a sandbox.
	Path(ctx context.Context, name string) (string, error)
	// Attach returns the ext4 image of the volume named name, lent to
	// holder alone until Detach (volume.Attacher); volume.ErrInUse
	// while another holds it or the host cannot let go of it.
	Attach(ctx context.Context, name, holder string) (string, error)
	// Detach ends holder's loan of the volume named name; none is no
	// error.
	Detach(ctx context.Context, name, holder string) error
	// Attachments returns the holder of each volume lent, by name.
	Attachments(ctx context.Context) (map[string]string, error)
}

var _ Volumes = (*volume.Service)(nil)

// reservedMounts are where a volume may not go: the sandbox's own views
// of the kernel and its devices.
var reservedMounts = []string{"/proc", "/sys", "/dev"}

// checkMounts refuses volume mounts that backend cannot make or that are
// malformed, naming each as E2B does ("invalid mounts:" and a line per
// mount), and then, with ErrConflict, those that would share a volume
// with a sandbox that has it as a disk of its own (or, on a backend with
// VolumeImages, with any sandbox).
func (m *Manager) checkMounts(ctx context.Context, backend isolation.Backend, mounts []store.VolumeMount) error {
	if len(mounts) == 0 {
		return nil
	}
	if !backend.Capabilities().Volumes || m.cfg.Volumes == nil {
		return cannot(backend, "mount volumes")
	}
	images := backend.Capabilities().VolumeImages
	var problems []string
	used, named := map[string]bool{}, map[string]bool{}
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
		case images && named[vm.Name]:
			reason = fmt.Sprintf("volume '%s' is mounted twice: the %s backend mounts a volume as a disk of the sandbox's kernel, once", vm.Name, backend.Name())
		}
		used[vm.Path], named[vm.Name] = true, true
		if reason == "" {
			if _, err := m.cfg.Store.VolumeByName(ctx, vm.Name); errors.Is(err, store.ErrNotFound) {
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
	for _, vm := range mounts {
		users, err := m.cfg.Store.VolumeUsers(ctx, vm.Name)
		if err != nil {
			return err
		}
		for _, u := range users {
			other := m.backends[u.Backend]
			switch {
			case other != nil && other.Capabilities().VolumeImages:
				return conflict("volume '%s' is attached to sandbox %s as a disk of its own (a VM's kernel mounts it), which no other sandbox may mount meanwhile: "+
					"kill %s first, or give this sandbox another volume", vm.Name, u.SandboxID, u.SandboxID)
			case images:
				return conflict("volume '%s' is mounted by sandbox %s, and the %s backend mounts a volume as a disk of the sandbox's kernel, which no other sandbox may mount meanwhile: "+
					"kill %s first, or give this sandbox another volume", vm.Name, u.SandboxID, backend.Name(), u.SandboxID)
			}
		}
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

// volumeSpecs resolves rec's volume mounts for backend: host directories,
// or images lent to rec's sandbox.
func (m *Manager) volumeSpecs(ctx context.Context, rec store.Sandbox, backend isolation.Backend) ([]isolation.VolumeMount, error) {
	images := backend.Capabilities().VolumeImages
	var out []isolation.VolumeMount
	for _, vm := range rec.VolumeMounts {
		mount := isolation.VolumeMount{Target: vm.Path}
		var err error
		if images {
			mount.Image, err = m.cfg.Volumes.Attach(ctx, vm.Name, rec.ID)
		} else {
			mount.Source, err = m.cfg.Volumes.Path(ctx, vm.Name)
		}
		if errors.Is(err, volume.ErrInUse) {
			// Another create took it first (checkMounts ran before).
			return nil, &userError{kind: ErrConflict, msg: err.Error(), cause: err}
		}
		if err != nil {
			return nil, fmt.Errorf("volume %s: %w", vm.Name, err)
		}
		out = append(out, mount)
	}
	return out, nil
}

// holdsVolumes reports whether sb has volumes as disks of its own.
func holdsVolumes(sb *sandbox) bool {
	return sb.backend.Capabilities().VolumeImages && len(sb.volumes) > 0
}

// detachVolumes ends sandbox id's loans of the volumes it mounts, once
// nothing of it runs and its record is no longer live: other sandboxes,
// and the host, may mount them from then on.
func (m *Manager) detachVolumes(ctx context.Context, id string, backend isolation.Backend, mounts []store.VolumeMount, log *slog.Logger) {
	if len(mounts) == 0 || !backend.Capabilities().VolumeImages || m.cfg.Volumes == nil {
		return
	}
	for _, vm := range mounts {
		if err := m.cfg.Volumes.Detach(context.WithoutCancel(ctx), vm.Name, id); err != nil {
			log.Error("detaching a volume", "volume", vm.Name, "err", err)
		}
	}
}

// sweepVolumes detaches the volumes lent to sandboxes that are no longer
// live: what a crash left between a sandbox's end and its detach.
func (m *Manager) sweepVolumes(ctx context.Context) error {
	if m.cfg.Volumes == nil {
		return nil
	}
	held, err := m.cfg.Volumes.Attachments(ctx)
	if err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(held)) {
		holder := held[name]
		if _, err := m.lookup(holder); err == nil {
			continue
		}
		m.log.Info("detaching a volume its sandbox left attached", "volume", name, "sandbox_id", holder)
		if err := m.cfg.Volumes.Detach(ctx, name, holder); err != nil {
			return err
		}
	}
	return nil
}
