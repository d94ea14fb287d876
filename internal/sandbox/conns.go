package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
)

// Dial opens a connection to port inside a running sandbox. The connection
// is closed (reset) when the sandbox is killed or paused. Errors:
// ErrNotFound, ErrPaused, isolation.ErrPortClosed.
func (m *Manager) Dial(ctx context.Context, id string, port int) (net.Conn, error) {
	sb, err := m.lookup(id)
	if err != nil {
		return nil, err
	}
	sb.mu.Lock()
	state, epoch, inst := sb.state, sb.epoch, sb.inst
	sb.mu.Unlock()
	if err := dialable(id, state); err != nil {
		return nil, err
	}
	c, err := inst.Dial(ctx, port)
	if errors.Is(err, isolation.ErrGone) {
		return nil, fmt.Errorf("%w: %w", notFound(id), err)
	}
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, sb: sb}
	sb.mu.Lock()
	if sb.epoch != epoch || sb.state != store.StateRunning {
		// Paused or killed while we dialed: the connection must not outlive it.
		state := sb.state
		sb.mu.Unlock()
		c.Close()
		return nil, dialable(id, state)
	}
	sb.conns[tc] = struct{}{}
	sb.mu.Unlock()
	return tc, nil
}

func dialable(id string, state store.State) error {
	switch state {
	case store.StateRunning:
		return nil
	case store.StatePaused:
		return fmt.Errorf("dialing sandbox %s: %w", id, ErrPaused)
	default:
		return notFound(id)
	}
}

var _ net.Conn = (*trackedConn)(nil)

// trackedConn is a connection from Dial; the sandbox closes it on pause and
// kill.
type trackedConn struct {
	net.Conn
	sb   *sandbox
	once sync.Once
	err  error
}

// Close implements net.Conn.
func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.sb.mu.Lock()
		delete(c.sb.conns, c)
		c.sb.mu.Unlock()
		c.err = c.Conn.Close()
	})
	return c.err
}

// abort closes the connection with a reset where the transport allows it.
func (c *trackedConn) abort() {
	c.once.Do(func() {
		if l, ok := c.Conn.(interface{ SetLinger(int) error }); ok {
			_ = l.SetLinger(0)
		}
		c.err = c.Conn.Close()
	})
}

// takeConnsLocked empties sb's tracked connections and returns them for
// closeConns; it bumps the epoch so that a Dial in flight drops its
// connection. The caller holds sb.mu.
func (sb *sandbox) takeConnsLocked() []*trackedConn {
	sb.epoch++
	out := make([]*trackedConn, 0, len(sb.conns))
	for c := range sb.conns {
		out = append(out, c)
	}
	clear(sb.conns)
	return out
}

func closeConns(conns []*trackedConn) {
	for _, c := range conns {
		c.abort()
	}
}
