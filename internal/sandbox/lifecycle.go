package sandbox

import (
	"context"
	"fmt"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/store"
)

// timeoutTick is how often the timeout loop looks for expired sandboxes;
// it bounds the slack of endAt.
const timeoutTick = 200 * time.Millisecond

// Kill kills a sandbox, aborts its open connections and frees everything.
func (m *Manager) Kill(ctx context.Context, id string) error {
	sb, err := m.lockLive(id)
	if err != nil {
		return err
	}
	defer sb.op.Unlock()
	return m.terminate(ctx, sb, store.StateKilled, store.ReasonKilled)
}

// lockLive looks up sandbox id and takes its op lock, which the caller
// releases. A killed sandbox is not found, like an unknown one.
func (m *Manager) lockLive(id string) (*sandbox, error) {
	sb, err := m.lookup(id)
	if err != nil {
		return nil, err
	}
	sb.op.Lock()
	if sb.current() == store.StateKilled {
		sb.op.Unlock()
		return nil, notFound(id)
	}
	return sb, nil
}

// terminate records the end of sb (state killed or error, with reason),
// drops its connections, forgets it and stops its instance. The caller
// holds sb.op.
func (m *Manager) terminate(ctx context.Context, sb *sandbox, state store.State, reason string) error {
	if err := m.cfg.Store.SetState(ctx, sb.id, state, reason); err != nil {
		return fmt.Errorf("killing sandbox %s: recording state: %w", sb.id, err)
	}
	m.drop(ctx, sb, state, reason)
	return nil
}

// drop forgets sb, closes its connections and stops its instance.
func (m *Manager) drop(ctx context.Context, sb *sandbox, state store.State, reason string) {
	sb.mu.Lock()
	sb.state = store.StateKilled // gone, whatever the record says
	conns := sb.takeConnsLocked()
	sb.mu.Unlock()
	closeConns(conns)
	m.forget(sb)
	m.detachNetwork(sb.id)
	if err := sb.inst.Stop(context.WithoutCancel(ctx)); err != nil {
		// The record says killed; whatever is left is found as a
		// leftover by the next reconcile.
		sb.log.Error("stopping sandbox", "reason", reason, "err", err)
	}
	sb.log.Info("sandbox ended", "state", state, "reason", reason)
}

// SetTimeout sets endAt = now + d (it may shorten).
func (m *Manager) SetTimeout(ctx context.Context, id string, d time.Duration) error {
	if err := m.checkTimeout(d); err != nil {
		return err
	}
	sb, err := m.lockLive(id)
	if err != nil {
		return err
	}
	defer sb.op.Unlock()
	endAt := m.cfg.Now().Add(d)
	if err := m.cfg.Store.SetEndAt(ctx, id, endAt); err != nil {
		return fmt.Errorf("setting timeout of sandbox %s: %w", id, err)
	}
	sb.mu.Lock()
	sb.endAt = endAt
	sb.mu.Unlock()
	return nil
}

// Connect extends a running sandbox's endAt to at least now + d, or resumes a
// paused one (resumed = true).
func (m *Manager) Connect(ctx context.Context, id string, d time.Duration) (sb store.Sandbox, resumed bool, err error) {
	if err := m.checkTimeout(d); err != nil {
		return store.Sandbox{}, false, err
	}
	s, err := m.lookup(id)
	if err != nil {
		return store.Sandbox{}, false, err
	}
	s.op.Lock()
	defer s.op.Unlock()
	endAt := m.cfg.Now().Add(d)
	switch s.current() {
	case store.StateRunning:
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
	case store.StatePaused:
		rec, err := m.cfg.Store.UpdateSandbox(ctx, id, func(r *store.Sandbox) error {
			r.State, r.Reason, r.EndAt = store.StateRunning, "", endAt
			return nil
		})
		if err != nil {
			return store.Sandbox{}, false, fmt.Errorf("resuming sandbox %s: recording state: %w", id, err)
		}
		if err := s.inst.Resume(ctx); err != nil {
			if serr := m.cfg.Store.SetState(context.WithoutCancel(ctx), id, store.StatePaused, ""); serr != nil {
				s.log.Error("recording failed resume", "err", serr)
			}
			return store.Sandbox{}, false, fmt.Errorf("resuming sandbox %s: %w", id, err)
		}
		s.mu.Lock()
		s.state, s.endAt, s.pausedAt = store.StateRunning, rec.EndAt, time.Time{}
		s.mu.Unlock()
		s.log.Info("sandbox resumed")
		return rec, true, nil
	default:
		return store.Sandbox{}, false, notFound(id)
	}
}

// Pause freezes a running sandbox (ErrConflict if already paused).
func (m *Manager) Pause(ctx context.Context, id string) error {
	sb, err := m.lookup(id)
	if err != nil {
		return err
	}
	sb.op.Lock()
	defer sb.op.Unlock()
	return m.pause(ctx, sb)
}

// pause freezes sb; the caller holds sb.op.
func (m *Manager) pause(ctx context.Context, sb *sandbox) error {
	if !sb.backend.Capabilities().Pause {
		return cannot(sb.backend, fmt.Sprintf("pause sandbox %q", sb.id))
	}
	switch sb.current() {
	case store.StateRunning:
	case store.StatePaused:
		return conflict("sandbox %q is already paused", sb.id)
	default:
		return notFound(sb.id)
	}
	if err := m.cfg.Store.SetState(ctx, sb.id, store.StatePaused, ""); err != nil {
		return fmt.Errorf("pausing sandbox %s: recording state: %w", sb.id, err)
	}
	sb.mu.Lock()
	sb.state = store.StatePaused // Dial refuses from here on
	sb.pausedAt = m.cfg.Now()
	conns := sb.takeConnsLocked()
	sb.mu.Unlock()
	closeConns(conns)
	if err := sb.inst.Pause(ctx); err != nil {
		bg := context.WithoutCancel(ctx)
		if serr := m.cfg.Store.SetState(bg, sb.id, store.StateRunning, ""); serr != nil {
			sb.log.Error("recording failed pause", "err", serr)
		}
		sb.mu.Lock()
		sb.state, sb.pausedAt = store.StateRunning, time.Time{}
		sb.mu.Unlock()
		return fmt.Errorf("pausing sandbox %s: %w", sb.id, err)
	}
	sb.log.Info("sandbox paused")
	return nil
}

// current returns sb's in-memory state.
func (sb *sandbox) current() store.State {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.state
}

// timeoutLoop kills (or, with autoPause, pauses) running sandboxes whose
// endAt has passed, and kills sandboxes paused for longer than
// Config.PausedRetention.
func (m *Manager) timeoutLoop() {
	t := time.NewTicker(timeoutTick)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		now := m.cfg.Now()
		for _, sb := range m.live() {
			sb.mu.Lock()
			due := !sb.expiring && m.dueLocked(sb, now)
			if due {
				sb.expiring = true
			}
			sb.mu.Unlock()
			if due {
				m.goroutine(func() { m.expire(sb) })
			}
		}
	}
}

// dueLocked reports whether sb's lifetime has ended: running past its
// endAt, or paused for longer than the retention. The caller holds sb.mu.
func (m *Manager) dueLocked(sb *sandbox, now time.Time) bool {
	switch sb.state {
	case store.StateRunning:
		return !sb.endAt.IsZero() && !now.Before(sb.endAt)
	case store.StatePaused:
		r := m.cfg.PausedRetention
		return r > 0 && !sb.pausedAt.IsZero() && now.Sub(sb.pausedAt) >= r
	}
	return false
}

// expire ends sb's lifetime if it is still due.
func (m *Manager) expire(sb *sandbox) {
	sb.op.Lock()
	defer sb.op.Unlock()
	sb.mu.Lock()
	sb.expiring = false
	due := m.dueLocked(sb, m.cfg.Now())
	state, autoPause := sb.state, sb.autoPause
	sb.mu.Unlock()
	if !due { // extended, resumed or ended meanwhile
		return
	}
	ctx := context.Background()
	var err error
	switch {
	case state == store.StatePaused:
		sb.log.Info("paused for longer than the retention: killing sandbox", "retention", m.cfg.PausedRetention)
		err = m.terminate(ctx, sb, store.StateKilled, pausedTooLong(m.cfg.PausedRetention))
	case autoPause:
		sb.log.Info("timeout: pausing sandbox")
		err = m.pause(ctx, sb)
	default:
		err = m.terminate(ctx, sb, store.StateKilled, store.ReasonTimeout)
	}
	if err != nil {
		sb.log.Error("ending sandbox on timeout", "err", err)
	}
}

// watch waits for sb's instance to end by itself and records why.
func (m *Manager) watch(sb *sandbox) {
	select {
	case <-sb.inst.Done():
	case <-m.stop:
		return
	}
	sb.op.Lock()
	defer sb.op.Unlock()
	if sb.current() == store.StateKilled {
		return // we stopped it
	}
	exit := sb.inst.Exit()
	state, reason := store.StateError, "exited: "+exit.Reason
	if exit.OOM {
		state, reason = store.StateKilled, store.ReasonOOM
	}
	sb.log.Warn("sandbox died", "oom", exit.OOM, "exit", exit.Reason)
	if err := m.terminate(context.Background(), sb, state, reason); err != nil {
		sb.log.Error("recording sandbox death", "err", err)
		m.drop(context.Background(), sb, state, reason) // it is dead either way
	}
}
