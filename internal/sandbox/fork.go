package sandbox

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
	"github.com/agent-sandbox/agent-sandbox/internal/template"
)

// Fork bounds and defaults (E2B's).
const (
	MaxForks = 100
	// DefaultForkTimeout is how long forks live when the request says
	// nothing: E2B's 15 s, not a create's 300.
	DefaultForkTimeout = 15 * time.Second
)

// ForkResult is one fork: the sandbox, or why it did not start.
type ForkResult struct {
	Sandbox store.Sandbox
	Err     error
}

// Fork saves running sandbox id once, at one instant, and starts count
// sandboxes from that snapshot in parallel, each with timeout; the parent
// runs on. The children get the parent's file system and, where its
// backend saves memory, its processes and memory (mode: ModeFull);
// elsewhere they boot afresh over its files (ModeFilesystem). Each
// inherits the parent's template, resources, metadata, env vars, network
// and lifecycle policy, with an ID and tokens of its own. An error means
// nothing was forked; a child that failed has its Err.
func (m *Manager) Fork(ctx context.Context, id string, timeout time.Duration, count int) (_ []ForkResult, mode string, _ error) {
	switch {
	case count < 1:
		return nil, "", invalid("Count must be at least 1")
	case count > MaxForks:
		return nil, "", invalid("Count cannot be greater than %d", MaxForks)
	}
	if err := m.checkTimeout(timeout); err != nil {
		return nil, "", err
	}
	sb, err := m.lockLive(id)
	if err != nil {
		return nil, "", err
	}
	sn, parent, unpin, err := m.forkSnapshot(ctx, sb)
	sb.op.Unlock()
	if err != nil {
		return nil, "", err
	}
	defer m.collectSnapshotsLater() // used by no child, if all failed
	defer unpin()
	kind := kindOf(sn.Kind)
	t0 := m.cfg.Now()
	out := make([]ForkResult, count)
	var wg sync.WaitGroup
	for i := range out {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sb, err := m.forkChild(ctx, parent, sn, kind, timeout)
			out[i] = ForkResult{Sandbox: sb, Err: err}
		}()
	}
	wg.Wait()
	sb.log.Info("sandbox forked", "count", count, "mode", ModeOf(sn.Kind), "took", m.cfg.Now().Sub(t0).Round(time.Millisecond))
	return out, ModeOf(sn.Kind), nil
}

// forkSnapshot saves sb, whose op the caller holds, for its forks.
func (m *Manager) forkSnapshot(ctx context.Context, sb *sandbox) (store.Snapshot, store.Sandbox, func(), error) {
	switch st := sb.current(); st {
	case store.StateRunning:
	case store.StatePaused:
		return store.Snapshot{}, store.Sandbox{}, nil, conflict("Sandbox '%s' is paused and cannot be forked; resume it first", sb.id)
	default:
		return store.Snapshot{}, store.Sandbox{}, nil, conflict("Sandbox '%s' cannot be forked while in '%s' state", sb.id, st)
	}
	if holdsVolumes(sb) {
		return store.Snapshot{}, store.Sandbox{}, nil, invalid("Sandbox '%s' mounts volumes, each a disk of its own VM's that no other sandbox may mount meanwhile, "+
			"and its forks would mount them too: snapshot it (createSnapshot: its files) and create sandboxes from the snapshot, each with volumes of its own", sb.id)
	}
	kind, err := m.snapshotKind(sb, "", "fork sandboxes")
	if err != nil {
		return store.Snapshot{}, store.Sandbox{}, nil, err
	}
	parent, err := m.cfg.Store.GetSandbox(ctx, sb.id)
	if err != nil {
		return store.Snapshot{}, store.Sandbox{}, nil, err
	}
	sn, _, unpin, err := m.takeSnapshot(ctx, sb, kind, store.Snapshot{}, nil)
	return sn, parent, unpin, err
}

// forkChild starts one fork of parent from sn.
func (m *Manager) forkChild(ctx context.Context, parent store.Sandbox, sn store.Snapshot, kind isolation.SnapshotKind, timeout time.Duration) (store.Sandbox, error) {
	tmpl, res, err := m.snapshotTemplate(sn)
	if err != nil {
		return store.Sandbox{}, err
	}
	now := m.cfg.Now()
	rec := parent
	rec.ID, rec.State, rec.Reason, rec.BackendState = "", store.StateStarting, "", nil
	rec.StartedAt, rec.EndAt, rec.Timeout = now, now.Add(timeout), timeout
	rec.EnvdAccessToken = newToken()
	if parent.TrafficAccessToken != "" {
		rec.TrafficAccessToken = newToken()
	}
	rec.SnapshotID, rec.PausedAs, rec.ResumedBy, rec.Reboots = sn.ID, "", "", 0
	return m.startFromSnapshot(ctx, rec, tmpl, res, sn, kind, parent.EnvVars, now)
}

// createFromSnapshot is Create from the listed snapshot sn: the
// request's settings, the snapshot's template, backend and resources.
func (m *Manager) createFromSnapshot(ctx context.Context, req CreateRequest, sn store.Snapshot) (store.Sandbox, error) {
	backend := m.backends[sn.Backend]
	if backend == nil {
		return store.Sandbox{}, invalid("snapshot '%s' was taken on the %s backend, which this server does not run", req.Template, sn.Backend)
	}
	if err := m.checkPolicy(backend, req); err != nil {
		return store.Sandbox{}, err
	}
	if kindOf(sn.Kind) == isolation.MemorySnapshot && len(req.VolumeMounts) > 0 && backend.Capabilities().VolumeImages {
		return store.Sandbox{}, invalid("snapshot '%s' holds a VM's memory, and a VM restored from memory has the disks it was saved with: it cannot mount volumes; "+
			"create it without volumeMounts, or from a filesystem snapshot", req.Template)
	}
	if err := m.checkMounts(ctx, backend, req.VolumeMounts); err != nil {
		return store.Sandbox{}, err
	}
	tmpl, res, err := m.snapshotTemplate(sn)
	if err != nil {
		return store.Sandbox{}, err
	}
	ec, err := m.parseEgress(req.Network, req.AllowInternetAccess, tmpl)
	if err != nil {
		return store.Sandbox{}, err
	}
	req.Network = ec.network
	now := m.cfg.Now()
	rec := m.newRecord(req, tmpl, res, backend, now)
	rec.SnapshotID = sn.ID
	return m.startFromSnapshot(ctx, rec, tmpl, res, sn, kindOf(sn.Kind), req.EnvVars, now)
}

// snapshotTemplate returns the template a sandbox from sn runs over and
// the resources it gets: the saved sandbox's.
func (m *Manager) snapshotTemplate(sn store.Snapshot) (*template.Template, isolation.Resources, error) {
	tmpl, err := m.cfg.Templates.Lookup(sn.TemplateID)
	if errors.Is(err, template.ErrNotFound) {
		return nil, isolation.Resources{}, invalid("the template of snapshot %s (%s) is no longer on this server", sn.ID, sn.TemplateID)
	}
	if err != nil {
		return nil, isolation.Resources{}, err
	}
	res, err := m.resources(tmpl)
	if err != nil {
		return nil, isolation.Resources{}, err
	}
	res.CPUCount, res.MemoryMB, res.DiskSizeMB = sn.CPUCount, sn.MemoryMB, sn.DiskSizeMB
	return tmpl, res, nil
}

// startFromSnapshot records rec (not yet stored) and starts it from sn as
// kind, initialising envd with the template's env and envVars.
func (m *Manager) startFromSnapshot(ctx context.Context, rec store.Sandbox, tmpl *template.Template, res isolation.Resources,
	sn store.Snapshot, kind isolation.SnapshotKind, envVars map[string]string, t0 time.Time) (store.Sandbox, error) {
	if err := m.checkDisk(res.DiskSizeMB); err != nil {
		return store.Sandbox{}, err
	}
	if err := m.admit(); err != nil {
		return store.Sandbox{}, err
	}
	defer m.release()
	rec, err := m.record(ctx, rec)
	if err != nil {
		return store.Sandbox{}, err
	}
	log := m.sandboxLog(rec.ID)
	log.Info("creating sandbox from a snapshot", "snapshot", sn.ID, "of", sn.SandboxID, "kind", kind)
	inst, err := m.boot(ctx, rec, tmpl, res, &startFrom{snap: sn, kind: kind}, log)
	if err != nil {
		return store.Sandbox{}, err
	}
	return m.finish(ctx, rec, inst, rec.EnvdAccessToken, tmpl, envVars, kind == isolation.MemorySnapshot, nil, log, t0)
}

// kindOf reads a snapshot record's kind.
func kindOf(kind string) isolation.SnapshotKind {
	if kind == isolation.MemorySnapshot.String() {
		return isolation.MemorySnapshot
	}
	return isolation.FilesSnapshot
}
