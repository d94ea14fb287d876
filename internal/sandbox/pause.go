package sandbox

// Pauses and resumes. A paused sandbox is kept one of three ways
// (store.PauseKind):
//
//   - in RAM: its backend freezes it in place (Capabilities.Pause); a
//     resume thaws it;
//   - on disk: its backend saves it with its processes and memory (a
//     MemorySnapshot) and it is stopped, freeing its memory; a resume
//     starts it again from that snapshot where it was. A sandbox paused
//     in RAM moves to disk after Config.PauseInRAM where its backend can;
//   - files only: its file system is saved (a FilesSnapshot) and it is
//     stopped; a resume boots it again over those files, with its ID,
//     access token and env vars, a new boot id and no processes.
//
// A pause that keeps memory is in RAM where the backend can freeze, else
// on disk; one without (E2B's pause {memory: false}, autoPauseMemory
// false) is files only. A resume comes from connect, or from traffic
// through the router (Wake) for a sandbox created with autoResume.

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/network"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
)

// What resumed a sandbox (store.Sandbox.ResumedBy).
const (
	ResumedByConnect = "connect"
	ResumedByTraffic = "traffic"
)

// Bounds of a resume by traffic (E2B's): the sandbox lives at least
// minWakeTimeout again, and a request waits at most wakeWait for a
// transition in flight.
const (
	minWakeTimeout = 300 * time.Second
	wakeWait       = time.Minute
)

// Pause pauses a running sandbox (ErrConflict if it is paused already);
// keepMemory false keeps its file system only.
func (m *Manager) Pause(ctx context.Context, id string, keepMemory bool) error {
	sb, err := m.lockLive(id)
	if err != nil {
		return err
	}
	defer sb.op.Unlock()
	return m.pause(ctx, sb, keepMemory)
}

// pause pauses sb; the caller holds sb.op.
func (m *Manager) pause(ctx context.Context, sb *sandbox, keepMemory bool) error {
	switch sb.current() {
	case store.StateRunning:
	case store.StatePaused:
		return conflict("sandbox %q is already paused", sb.id)
	default:
		return notFound(sb.id)
	}
	switch {
	case !keepMemory && m.canSnapshot(sb.backend, isolation.FilesSnapshot):
		return m.park(ctx, sb, store.PausedFiles)
	case !keepMemory:
		return cannot(sb.backend, fmt.Sprintf("pause sandbox %q without its memory (a filesystem-only pause): it makes no snapshots", sb.id))
	case sb.backend.Capabilities().Pause:
		return m.freeze(ctx, sb)
	case m.canSnapshot(sb.backend, isolation.MemorySnapshot):
		return m.park(ctx, sb, store.PausedOnDisk)
	}
	return cannot(sb.backend, fmt.Sprintf("pause sandbox %q", sb.id))
}

// freeze pauses sb in RAM; the caller holds sb.op.
func (m *Manager) freeze(ctx context.Context, sb *sandbox) error {
	_, err := m.cfg.Store.UpdateSandbox(ctx, sb.id, func(r *store.Sandbox) error {
		r.State, r.Reason, r.PausedAs = store.StatePaused, "", store.PausedInRAM
		return nil
	})
	if err != nil {
		return fmt.Errorf("pausing sandbox %s: recording state: %w", sb.id, err)
	}
	sb.mu.Lock()
	sb.state, sb.pausedAs = store.StatePaused, store.PausedInRAM // Dial refuses from here on
	sb.pausedAt = m.cfg.Now()
	conns := sb.takeConnsLocked()
	inst := sb.inst
	sb.mu.Unlock()
	closeConns(conns)
	if err := inst.Pause(ctx); err != nil {
		bg := context.WithoutCancel(ctx)
		if _, serr := m.cfg.Store.UpdateSandbox(bg, sb.id, func(r *store.Sandbox) error {
			r.State, r.PausedAs = store.StateRunning, ""
			return nil
		}); serr != nil {
			sb.log.Error("recording failed pause", "err", serr)
		}
		sb.mu.Lock()
		sb.state, sb.pausedAs, sb.pausedAt = store.StateRunning, "", time.Time{}
		sb.mu.Unlock()
		return fmt.Errorf("pausing sandbox %s: %w", sb.id, err)
	}
	sb.log.Info("sandbox paused", "as", store.PausedInRAM)
	return nil
}

// park pauses sb as kind (PausedOnDisk or PausedFiles): it saves it, then
// stops it; the caller holds sb.op. sb runs or is paused in RAM.
func (m *Manager) park(ctx context.Context, sb *sandbox, kind store.PauseKind) error {
	snapKind := isolation.FilesSnapshot
	if kind == store.PausedOnDisk {
		snapKind = isolation.MemorySnapshot
	}
	sb.mu.Lock()
	wasState, wasKind, wasAt := sb.state, sb.pausedAs, sb.pausedAt
	sb.state = store.StatePaused // Dial refuses from here on
	if wasState != store.StatePaused {
		sb.pausedAt = m.cfg.Now()
	}
	conns := sb.takeConnsLocked()
	inst := sb.inst
	sb.mu.Unlock()
	closeConns(conns)
	revert := func(err error) error {
		sb.mu.Lock()
		sb.state, sb.pausedAs, sb.pausedAt = wasState, wasKind, wasAt
		sb.mu.Unlock()
		return fmt.Errorf("pausing sandbox %s: %w", sb.id, err)
	}
	// Frozen first where it can be, so that nothing runs on between the
	// save and the stop.
	frozen := false
	if wasState == store.StateRunning && sb.backend.Capabilities().Pause {
		if err := inst.Pause(ctx); err != nil {
			return revert(err)
		}
		frozen = true
	}
	sn, _, unpin, err := m.takeSnapshot(ctx, sb, snapKind, store.Snapshot{}, func(r *store.Sandbox, snapshotID string) error {
		r.State, r.Reason, r.PausedAs, r.SnapshotID = store.StatePaused, "", kind, snapshotID
		return nil
	})
	if err != nil {
		if frozen {
			if rerr := inst.Resume(context.WithoutCancel(ctx)); rerr != nil {
				sb.log.Error("resuming after a failed pause", "err", rerr)
			}
		}
		return revert(err)
	}
	defer unpin()
	m.collectGuestLog(sb) // before the stop removes it
	sb.mu.Lock()
	sb.inst, sb.pausedAs = parked{id: sb.id}, kind
	sb.mu.Unlock()
	m.detachNetwork(sb.id)
	if err := inst.Stop(context.WithoutCancel(ctx)); err != nil {
		// Saved and recorded paused: the next reconcile cleans up.
		sb.log.Error("stopping a sandbox paused to disk", "err", err)
	}
	sb.log.Info("sandbox paused", "as", kind, "snapshot", sn.ID, "size", sn.SizeBytes)
	m.collectSnapshotsLater() // the one it ran from, if any
	return nil
}

// toDiskLocked reports whether sb, paused in RAM, is due to move to disk;
// the caller holds sb.mu.
func (m *Manager) toDiskLocked(sb *sandbox, now time.Time) bool {
	return sb.state == store.StatePaused && sb.pausedAs == store.PausedInRAM &&
		m.canSnapshot(sb.backend, isolation.MemorySnapshot) && now.Sub(sb.pausedAt) >= m.cfg.PauseInRAM
}

// moveToDisk saves sb, paused in RAM for Config.PauseInRAM, with its
// memory and stops it, if it is still due.
func (m *Manager) moveToDisk(sb *sandbox) {
	sb.op.Lock()
	defer sb.op.Unlock()
	sb.mu.Lock()
	sb.expiring = false
	due := m.toDiskLocked(sb, m.cfg.Now())
	sb.mu.Unlock()
	if !due {
		return
	}
	if err := m.park(context.Background(), sb, store.PausedOnDisk); err != nil {
		sb.log.Error("moving a paused sandbox to disk", "err", err)
	}
}

// Connect extends a running sandbox's endAt to at least now + d, or
// resumes a paused one (resumed = true) until now + d. reboot (E2B's
// onResume 'reboot') resumes a sandbox whose memory was kept by booting
// it again over its files instead; it changes nothing for one that runs
// or was paused without memory.
func (m *Manager) Connect(ctx context.Context, id string, d time.Duration, reboot bool) (sb store.Sandbox, resumed bool, err error) {
	if err := m.checkTimeout(d); err != nil {
		return store.Sandbox{}, false, err
	}
	s, err := m.lockLive(id)
	if err != nil {
		return store.Sandbox{}, false, err
	}
	defer s.op.Unlock()
	endAt := m.cfg.Now().Add(d)
	if s.current() == store.StatePaused {
		rec, err := m.resume(ctx, s, endAt, ResumedByConnect, reboot)
		return rec, err == nil, err
	}
	rec, err := m.cfg.Store.UpdateSandbox(ctx, id, func(r *store.Sandbox) error {
		if endAt.After(r.EndAt) {
			r.EndAt = endAt
		}
		return nil
	})
	if err != nil {
		return store.Sandbox{}, false, fmt.Errorf("connecting to sandbox %s: recording timeout: %w", id, err)
	}
	s.mu.Lock()
	s.endAt = rec.EndAt
	s.mu.Unlock()
	return rec, false, nil
}

// Asleep reports whether sandbox id is paused and traffic would wake it
// (Wake): it was created with autoResume and kept its memory. It reads
// memory only: the router asks it on every request.
func (m *Manager) Asleep(id string) bool {
	sb, err := m.lookup(id)
	if err != nil || !sb.autoResume {
		return false
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.state == store.StatePaused && sb.pausedAs != store.PausedFiles
}

// Wake resumes sandbox id for a request through the router, if it is
// asleep (Asleep), until now plus its create-time timeout, at least
// minWakeTimeout. It returns nil when the sandbox runs; ErrConflict when
// another transition holds it for longer than wakeWait.
func (m *Manager) Wake(ctx context.Context, id string) error {
	sb, err := m.lookup(id)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(wakeWait)
	for !sb.op.TryLock() {
		if time.Now().After(deadline) {
			return conflict("The sandbox is still transitioning. Try again in a moment.")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	defer sb.op.Unlock()
	if !m.Asleep(id) {
		return nil // running, or it stays paused: the dial says which
	}
	d := min(max(sb.timeout, minWakeTimeout), m.cfg.MaxTimeout)
	t0 := m.cfg.Now()
	if _, err := m.resume(ctx, sb, t0.Add(d), ResumedByTraffic, false); err != nil {
		return err
	}
	sb.log.Info("sandbox resumed by traffic", "took", m.cfg.Now().Sub(t0).Round(time.Millisecond))
	return nil
}

// resume runs paused sandbox s again until endAt; the caller holds s.op.
func (m *Manager) resume(ctx context.Context, s *sandbox, endAt time.Time, by string, reboot bool) (store.Sandbox, error) {
	s.mu.Lock()
	kind := s.pausedAs
	s.mu.Unlock()
	if reboot && kind == store.PausedInRAM {
		if !m.canSnapshot(s.backend, isolation.FilesSnapshot) {
			return store.Sandbox{}, cannot(s.backend, fmt.Sprintf("reboot sandbox %q (onResume 'reboot'): it makes no snapshots; resume it without", s.id))
		}
		if err := m.park(ctx, s, store.PausedFiles); err != nil {
			return store.Sandbox{}, err
		}
		kind = store.PausedFiles
	}
	switch kind {
	case store.PausedOnDisk:
		if reboot {
			return m.restart(ctx, s, endAt, by, isolation.FilesSnapshot)
		}
		return m.restart(ctx, s, endAt, by, isolation.MemorySnapshot)
	case store.PausedFiles:
		return m.restart(ctx, s, endAt, by, isolation.FilesSnapshot)
	}
	return m.thaw(ctx, s, endAt, by)
}

// thaw resumes s, paused in RAM; the caller holds s.op.
func (m *Manager) thaw(ctx context.Context, s *sandbox, endAt time.Time, by string) (store.Sandbox, error) {
	rec, err := m.cfg.Store.UpdateSandbox(ctx, s.id, func(r *store.Sandbox) error {
		r.State, r.Reason, r.PausedAs, r.EndAt, r.ResumedBy = store.StateRunning, "", "", endAt, by
		return nil
	})
	if err != nil {
		return store.Sandbox{}, fmt.Errorf("resuming sandbox %s: recording state: %w", s.id, err)
	}
	if err := s.instance().Resume(ctx); err != nil {
		if _, serr := m.cfg.Store.UpdateSandbox(context.WithoutCancel(ctx), s.id, func(r *store.Sandbox) error {
			r.State, r.PausedAs = store.StatePaused, store.PausedInRAM
			return nil
		}); serr != nil {
			s.log.Error("recording failed resume", "err", serr)
		}
		return store.Sandbox{}, fmt.Errorf("resuming sandbox %s: %w", s.id, err)
	}
	s.mu.Lock()
	s.state, s.pausedAs, s.endAt, s.pausedAt = store.StateRunning, "", rec.EndAt, time.Time{}
	s.mu.Unlock()
	s.log.Info("sandbox resumed", "by", by)
	return rec, nil
}

// restart starts s, stopped by its pause, again from the snapshot its
// record names, as kind, under its ID and access token; the caller holds
// s.op. Until it runs, the record says paused: a crash meanwhile leaves
// a paused sandbox, which reconcile cleans up after.
func (m *Manager) restart(ctx context.Context, s *sandbox, endAt time.Time, by string, kind isolation.SnapshotKind) (store.Sandbox, error) {
	fail := func(step string, err error) (store.Sandbox, error) {
		return store.Sandbox{}, fmt.Errorf("resuming sandbox %s: %s: %w", s.id, step, err)
	}
	rec, err := m.cfg.Store.GetSandbox(ctx, s.id)
	if err != nil {
		return fail("reading its record", err)
	}
	sn, err := m.cfg.Store.GetSnapshot(ctx, rec.SnapshotID)
	if err != nil {
		return fail("reading its snapshot", err)
	}
	tmpl, res, err := m.snapshotTemplate(sn)
	if err != nil {
		return fail("finding its template", err)
	}
	if err := m.checkDisk(res.DiskSizeMB); err != nil {
		return store.Sandbox{}, err
	}
	t0 := m.cfg.Now()
	inst, step, err := m.launch(ctx, rec, tmpl, res, &startFrom{snap: sn, kind: kind}, s.log)
	if err != nil {
		return fail(step, err)
	}
	booted := kind == isolation.FilesSnapshot
	if step, err := m.initialise(ctx, rec, inst, rec.EnvdAccessToken, tmpl, rec.EnvVars, booted, nil); err != nil {
		m.undo(context.WithoutCancel(ctx), rec, inst, s.log)
		return fail(step, err)
	}
	rec, err = m.cfg.Store.UpdateSandbox(ctx, s.id, func(r *store.Sandbox) error {
		r.State, r.Reason, r.PausedAs, r.EndAt, r.ResumedBy = store.StateRunning, "", "", endAt, by
		r.BackendState = inst.State()
		if booted {
			r.Reboots++
		}
		return nil
	})
	if err != nil {
		m.undo(context.WithoutCancel(ctx), rec, inst, s.log)
		return fail("recording running state", err)
	}
	s.mu.Lock()
	s.inst, s.state, s.pausedAs, s.endAt, s.pausedAt = inst, store.StateRunning, "", rec.EndAt, time.Time{}
	s.mu.Unlock()
	m.goroutine(func() { m.watch(s, inst) })
	s.log.Info("sandbox resumed", "by", by, "from", kind, "snapshot", sn.ID, "took", m.cfg.Now().Sub(t0).Round(time.Millisecond))
	return rec, nil
}

// parked stands for the instance of a sandbox paused to disk or files
// only: nothing runs; a resume starts a new instance from the snapshot.
type parked struct{ id string }

var _ isolation.Instance = parked{}

// State implements isolation.Instance.
func (parked) State() json.RawMessage { return nil }

// Dial implements isolation.Instance.
func (p parked) Dial(context.Context, int) (net.Conn, error) {
	return nil, fmt.Errorf("dialing sandbox %s: %w", p.id, isolation.ErrPaused)
}

// Pause implements isolation.Instance: it is paused.
func (parked) Pause(context.Context) error { return nil }

// Resume implements isolation.Instance: only a restart runs it again.
func (p parked) Resume(context.Context) error {
	return fmt.Errorf("resuming sandbox %s: it is stopped; it restarts from its snapshot", p.id)
}

// Snapshot implements isolation.Instance.
func (p parked) Snapshot(context.Context, string, isolation.SnapshotKind) error {
	return fmt.Errorf("snapshotting sandbox %s: %w", p.id, isolation.ErrPaused)
}

// Stats implements isolation.Instance.
func (p parked) Stats(context.Context) (isolation.Stats, error) {
	return isolation.Stats{}, fmt.Errorf("sampling sandbox %s: %w", p.id, isolation.ErrPaused)
}

// Link implements isolation.Instance: it has none while stopped.
func (parked) Link() network.Link { return network.Link{} }

// Done implements isolation.Instance: it never ends by itself.
func (parked) Done() <-chan struct{} { return nil }

// Exit implements isolation.Instance.
func (parked) Exit() isolation.Exit { return isolation.Exit{} }

// Stop implements isolation.Instance: nothing runs.
func (parked) Stop(context.Context) error { return nil }
