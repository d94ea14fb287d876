package qmp

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"
)

// Event is an asynchronous message from QEMU, such as STOP, RESUME,
// SHUTDOWN or MIGRATION.
type Event struct {
	Name string          // QMP's "event", e.g. "MIGRATION"
	Data json.RawMessage // QMP's "data"; empty for events without
	Time time.Time       // when QEMU emitted it
}

// Subscription receives, in order, every event QEMU sends from Subscribe
// until Close. Events queue without bound, so the reader never waits for a
// slow subscriber (QEMU sends few of them); Close a subscription when done.
type Subscription struct {
	c *Client

	mu    sync.Mutex // guards queue
	queue []Event

	ready chan struct{} // holds a token while queue may be non-empty
}

// Subscribe starts a subscription to QEMU's events. Subscribe before the
// command whose event you wait for, so that it cannot slip by.
func (c *Client) Subscribe() *Subscription {
	s := &Subscription{c: c, ready: make(chan struct{}, 1)}
	c.mu.Lock()
	c.subs[s] = struct{}{}
	c.mu.Unlock()
	return s
}

// Close ends the subscription; events queued and not read are dropped.
func (s *Subscription) Close() {
	s.c.mu.Lock()
	delete(s.c.subs, s)
	s.c.mu.Unlock()
}

// Next returns the oldest event not yet returned, waiting for one until ctx
// ends or the connection does (then the error wraps ErrClosed; events that
// arrived before the end are returned first).
func (s *Subscription) Next(ctx context.Context) (Event, error) {
	for {
		s.mu.Lock()
		if len(s.queue) > 0 {
			e := s.queue[0]
			s.queue = s.queue[1:]
			s.mu.Unlock()
			return e, nil
		}
		s.mu.Unlock()
		select {
		case <-s.ready:
		case <-ctx.Done():
			return Event{}, fmt.Errorf("waiting for a QMP event: %w", ctx.Err())
		case <-s.c.done:
			s.mu.Lock()
			empty := len(s.queue) == 0
			s.mu.Unlock()
			if empty {
				return Event{}, fmt.Errorf("waiting for a QMP event: %w", s.c.err)
			}
		}
	}
}

// publish queues e on every subscription.
func (c *Client) publish(e Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for s := range c.subs {
		s.mu.Lock()
		s.queue = append(s.queue, e)
		s.mu.Unlock()
		select {
		case s.ready <- struct{}{}:
		default: // a token is already there
		}
	}
}
