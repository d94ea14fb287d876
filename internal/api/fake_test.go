package api

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/egress"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
)

// The manager is what the server wires in.
var _ Sandboxes = (*sandbox.Manager)(nil)

// The store is what the server wires in.
var _ Keys = (*store.Store)(nil)

// fakeSandboxes is a hand-written Sandboxes keeping sandboxes in a map.
type fakeSandboxes struct {
	mu      sync.Mutex
	sbs     map[string]store.Sandbox
	nextID  int
	fail    error // returned by every call when set
	created []sandbox.CreateRequest
	// timeouts records SetTimeout and Connect durations by sandbox.
	timeouts map[string][]time.Duration
	queries  []store.ListQuery
	// pages are returned by List in turn (then empty); the token of each
	// but the last is "page<N+1>".
	pages   [][]store.Sandbox
	metrics []sandbox.Metric
	// metricWindows records the Metrics windows asked for.
	metricWindows [][2]time.Time
	// networkUpdates records UpdateNetwork calls; events is the audit trail.
	networkUpdates []sandbox.NetworkUpdate
	events         []egress.Event
}

func newFake(sbs ...store.Sandbox) *fakeSandboxes {
	f := &fakeSandboxes{sbs: map[string]store.Sandbox{}, timeouts: map[string][]time.Duration{}}
	for _, sb := range sbs {
		f.sbs[sb.ID] = sb
	}
	return f
}

func (f *fakeSandboxes) Create(ctx context.Context, req sandbox.CreateRequest) (store.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return store.Sandbox{}, f.fail
	}
	if req.Template == "missing" {
		return store.Sandbox{}, fmt.Errorf("template %q not found: %w", req.Template, sandbox.ErrInvalid)
	}
	f.created = append(f.created, req)
	f.nextID++
	sb := store.Sandbox{
		ID:         fmt.Sprintf("isb%d", f.nextID),
		TemplateID: "tpl" + req.Template,
		Alias:      req.Template,
		State:      store.StateRunning,
		StartedAt:  testNow,
		EndAt:      testNow.Add(req.Timeout),
		Metadata:   req.Metadata,
		// As the manager does: a token whatever Secure says.
		EnvdAccessToken: "tok",
		Secure:          req.Secure,
	}
	f.sbs[sb.ID] = sb
	return sb, nil
}

func (f *fakeSandboxes) Get(ctx context.Context, id string) (store.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return store.Sandbox{}, f.fail
	}
	sb, ok := f.sbs[id]
	if !ok {
		return store.Sandbox{}, fmt.Errorf("getting %s: %w", id, sandbox.ErrNotFound)
	}
	return sb, nil
}

func (f *fakeSandboxes) List(ctx context.Context, q store.ListQuery) ([]store.Sandbox, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return nil, "", f.fail
	}
	f.queries = append(f.queries, q)
	n := len(f.queries) - 1
	if n >= len(f.pages) {
		return []store.Sandbox{}, "", nil
	}
	next := ""
	if n < len(f.pages)-1 {
		next = fmt.Sprintf("page%d", n+1)
	}
	return f.pages[n], next, nil
}

func (f *fakeSandboxes) Kill(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return f.fail
	}
	if _, ok := f.sbs[id]; !ok {
		return sandbox.ErrNotFound
	}
	delete(f.sbs, id)
	return nil
}

func (f *fakeSandboxes) SetTimeout(ctx context.Context, id string, d time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return f.fail
	}
	if _, ok := f.sbs[id]; !ok {
		return sandbox.ErrNotFound
	}
	if d > 24*time.Hour {
		return fmt.Errorf("timeout cannot be greater than 24 hours: %w", sandbox.ErrInvalid)
	}
	f.timeouts[id] = append(f.timeouts[id], d)
	return nil
}

func (f *fakeSandboxes) Connect(ctx context.Context, id string, d time.Duration) (store.Sandbox, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return store.Sandbox{}, false, f.fail
	}
	sb, ok := f.sbs[id]
	if !ok {
		return store.Sandbox{}, false, sandbox.ErrNotFound
	}
	f.timeouts[id] = append(f.timeouts[id], d)
	resumed := sb.State == store.StatePaused
	sb.State = store.StateRunning
	f.sbs[id] = sb
	return sb, resumed, nil
}

func (f *fakeSandboxes) Pause(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return f.fail
	}
	sb, ok := f.sbs[id]
	if !ok {
		return sandbox.ErrNotFound
	}
	if sb.State == store.StatePaused {
		return fmt.Errorf("sandbox %s is already paused: %w", id, sandbox.ErrConflict)
	}
	sb.State = store.StatePaused
	f.sbs[id] = sb
	return nil
}

func (f *fakeSandboxes) Metrics(ctx context.Context, id string, start, end time.Time) ([]sandbox.Metric, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return nil, f.fail
	}
	if _, ok := f.sbs[id]; !ok {
		return nil, sandbox.ErrNotFound
	}
	f.metricWindows = append(f.metricWindows, [2]time.Time{start, end})
	var out []sandbox.Metric
	for _, m := range f.metrics {
		if !m.Timestamp.Before(start) && !m.Timestamp.After(end) {
			out = append(out, m)
		}
	}
	return out, nil
}

func (f *fakeSandboxes) UpdateNetwork(ctx context.Context, id string, u sandbox.NetworkUpdate) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return f.fail
	}
	if _, ok := f.sbs[id]; !ok {
		return sandbox.ErrNotFound
	}
	f.networkUpdates = append(f.networkUpdates, u)
	return nil
}

func (f *fakeSandboxes) EgressEvents(id string, after uint64, limit int) ([]egress.Event, uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return nil, 0, f.fail
	}
	if _, ok := f.sbs[id]; !ok {
		return nil, 0, sandbox.ErrNotFound
	}
	var out []egress.Event
	next := after
	for _, e := range f.events {
		if e.Seq > after && len(out) < limit {
			out = append(out, e)
			next = e.Seq
		}
	}
	return out, next, nil
}
