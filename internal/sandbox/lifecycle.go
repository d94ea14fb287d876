package sandbox

import (
	"context"
	"fmt"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
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

// drop forgets sb, closes its connections and stops its instance; the
// snapshots it ran from may go then. An instance that can halt
// (isolation.Halter) and has no volumes is only halted before drop
// returns, so that a kill is answered once nothing in the sandbox runs:
// the rest of its stop (network, cgroup, disk) runs in the background.
// The record says killed already, so what a crash leaves of it is a
// leftover that the next reconcile cleans up.
func (m *Manager) drop(ctx context.Context, sb *sandbox, state store.State, reason string) {
	ctx = context.WithoutCancel(ctx)
	sb.mu.Lock()
	sb.state = store.StateKilled // gone, whatever the record says
	conns := sb.takeConnsLocked()
	inst := sb.inst
	sb.mu.Unlock()
	closeConns(conns)
	m.forget(sb)
	m.detachNetwork(sb.id)
	// A sandbox's volumes are detached once it has stopped, before the
	// kill returns: a create may mount them next.
	halted := false
	if h, ok := inst.(isolation.Halter); ok && len(sb.volumes) == 0 {
		if err := h.Halt(ctx); err != nil {
			sb.log.Warn("halting sandbox, stopping it instead", "err", err)
		} else {
			halted = true
		}
	}
	m.collectGuestLog(sb)
	sb.log.Info("sandbox ended", "state", state, "reason", reason)
	stop := func() {
		if err := inst.Stop(ctx); err != nil {
			// The record says killed; whatever is left is found as a
			// leftover by the next reconcile, which detaches its
			// volumes then.
			sb.log.Error("stopping sandbox", "reason", reason, "err", err)
		} else {
			m.detachVolumes(ctx, sb.id, sb.backend, sb.volumes, sb.log)
		}
		m.collectSnapshotsLater()
		m.goroutine(m.purgeLogs)
	}
	if halted {
		m.background(stop)
	} else {
		stop()
	}
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
			toDisk := !sb.expiring && !due && m.toDiskLocked(sb, now)
			if due || toDisk {
				sb.expiring = true
			}
			sb.mu.Unlock()
			switch {
			case due:
				m.goroutine(func() { m.expire(sb) })
			case toDisk:
				m.goroutine(func() { m.moveToDisk(sb) })
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
	state := sb.state
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
	case sb.autoPause:
		sb.log.Info("timeout: pausing sandbox", "files_only", sb.autoPauseFiles)
		err = m.pause(ctx, sb, !sb.autoPauseFiles)
	default:
		err = m.terminate(ctx, sb, store.StateKilled, store.ReasonTimeout)
	}
	if err != nil {
		sb.log.Error("ending sandbox on timeout", "err", err)
	}
}

// watch waits for inst, sb's instance, to end by itself and records why.
func (m *Manager) watch(sb *sandbox, inst isolation.Instance) {
	select {
	case <-inst.Done():
	case <-m.stop:
		return
	}
	sb.op.Lock()
	defer sb.op.Unlock()
	if sb.current() == store.StateKilled || sb.instance() != inst {
		return // we stopped it, or a pause did and another runs now
	}
	exit := inst.Exit()
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
