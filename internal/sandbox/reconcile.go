package sandbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/agent-sandbox/agent-sandbox/internal/store"
)

// Reasons reconcile records.
const (
	reasonLost        = "lost on server restart"
	reasonInterrupted = "interrupted by a server restart while starting"
)

// leftoverFinder is offered by backends that can list what sandboxes they
// left on the host (jail.Backend). Each is asked, with the sandboxes of
// every backend as known.
type leftoverFinder interface {
	Leftovers(known map[string]bool) ([]string, error)
}

// reconcile adopts the sandboxes the store says are alive, cleans up those
// that are not and those left half-started, and then anything on the host
// that no live record mentions.
func (m *Manager) reconcile(ctx context.Context) error {
	recs, err := m.cfg.Store.ListSandboxesByState(ctx, store.StateStarting, store.StateRunning, store.StatePaused)
	if err != nil {
		return fmt.Errorf("reconciling: %w", err)
	}
	known := map[string]bool{}
	var adopted, lost int
	for _, rec := range recs {
		if m.adopt(ctx, rec) {
			known[rec.ID] = true
			adopted++
		} else {
			lost++
		}
	}
	var cleaned int
	m.mu.Lock()
	for id := range m.steps { // build steps running in this process
		known[id] = true
	}
	m.mu.Unlock()
	for _, b := range m.backends {
		lf, ok := b.(leftoverFinder)
		if !ok {
			continue
		}
		ids, err := lf.Leftovers(known)
		if err != nil && !errors.Is(err, errors.ErrUnsupported) {
			m.log.Warn("listing leftover sandboxes", "backend", b.Name(), "err", err) // clean what was found
		}
		for _, id := range ids {
			if err := b.Cleanup(ctx, id, nil); err != nil {
				m.log.Error("cleaning up leftover sandbox", "backend", b.Name(), "sandbox_id", id, "err", err)
				continue
			}
			cleaned++
		}
	}
	m.log.Info("reconciled sandboxes", "adopted", adopted, "lost", lost, "leftovers_cleaned", cleaned)
	if err := m.sweepSnapshots(ctx); err != nil {
		return fmt.Errorf("reconciling: %w", err)
	}
	if err := m.sweepVolumes(ctx); err != nil {
		return fmt.Errorf("reconciling: %w", err)
	}
	m.collectSnapshots(ctx)
	return nil
}

// adopt takes over the sandbox of rec with the backend that started it,
// or cleans it up and records why not. It reports whether the sandbox is
// live.
func (m *Manager) adopt(ctx context.Context, rec store.Sandbox) bool {
	log := m.sandboxLog(rec.ID)
	backend := m.backends[rec.Backend]
	end := func(state store.State, reason string, cleanup bool) {
		if cleanup {
			if err := backend.Cleanup(ctx, rec.ID, rec.BackendState); err != nil {
				log.Error("cleaning up sandbox", "err", err)
			}
		}
		if err := m.cfg.Store.SetState(ctx, rec.ID, state, reason); err != nil {
			log.Error("recording lost sandbox", "err", err)
		}
	}
	if backend == nil {
		log.Warn("sandbox of another backend: not adopted", "backend", rec.Backend)
		end(store.StateKilled, fmt.Sprintf("%s: backend %q is not configured", reasonLost, rec.Backend), false)
		return false
	}
	if rec.State == store.StateStarting {
		log.Info("cleaning up sandbox left starting")
		end(store.StateError, reasonInterrupted, true)
		return false
	}
	if rec.State == store.StatePaused && (rec.PausedAs == store.PausedOnDisk || rec.PausedAs == store.PausedFiles) {
		// Saved and stopped when it paused: what a crash left running
		// between the record and the stop, or while it resumed, goes.
		if err := backend.Cleanup(ctx, rec.ID, rec.BackendState); err != nil {
			log.Error("cleaning up after a sandbox paused to disk", "err", err)
		}
		m.register(m.newSandbox(rec, backend, parked{id: rec.ID}, log))
		log.Info("sandbox paused to disk kept", "as", rec.PausedAs, "snapshot", rec.SnapshotID)
		return true
	}
	inst, err := backend.Adopt(ctx, rec.ID, rec.BackendState)
	if err != nil {
		log.Info("sandbox not adoptable, cleaning up", "err", err)
		end(store.StateKilled, reasonLost, true)
		return false
	}
	// The record is the truth: a crash between writing it and acting on it
	// leaves the instance in the other state. A backend that cannot pause
	// has no sandbox paused.
	canPause := backend.Capabilities().Pause
	switch {
	case rec.State == store.StatePaused && canPause:
		err = inst.Pause(ctx)
	case rec.State == store.StatePaused:
		err = fmt.Errorf("recorded paused, but the %s backend cannot pause", backend.Name())
	case canPause:
		err = inst.Resume(ctx)
	}
	if err == nil {
		if err = m.attachNetwork(ctx, rec, inst, nil); err != nil {
			err = fmt.Errorf("attaching the network gateway: %w", err)
		}
	}
	if err != nil {
		log.Error("adopted sandbox cannot be taken over, killing it", "state", rec.State, "err", err)
		if serr := inst.Stop(ctx); serr != nil {
			log.Error("stopping sandbox", "err", serr)
		}
		end(store.StateKilled, reasonLost, true)
		return false
	}
	sb := m.newSandbox(rec, backend, inst, log)
	sb.skipGuestLog()
	m.register(sb)
	log.Info("adopted sandbox", "state", rec.State)
	return true
}
