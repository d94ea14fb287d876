package replica

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/api"
	"github.com/agent-sandbox/agent-sandbox/internal/egress"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
)

// What a single host serves and cluster mode does not yet: each is
// answered 501 (api.ErrNotImplemented) naming the call, so an SDK learns
// which call it was rather than getting a generic failure.

var _ api.Sandboxes = (*Sandboxes)(nil)

func unsupported(what string) error {
	return fmt.Errorf("%s: %w in cluster mode yet", what, api.ErrNotImplemented)
}

// Fork implements api.Sandboxes: not yet.
func (*Sandboxes) Fork(context.Context, string, time.Duration, int) ([]sandbox.ForkResult, string, error) {
	return nil, "", unsupported("fork")
}

// CreateSnapshot implements api.Sandboxes: not yet.
func (*Sandboxes) CreateSnapshot(context.Context, string, sandbox.SnapshotRequest) (store.Snapshot, error) {
	return store.Snapshot{}, unsupported("snapshots")
}

// ListSnapshots implements api.Sandboxes: not yet.
func (*Sandboxes) ListSnapshots(context.Context, sandbox.SnapshotQuery) ([]store.Snapshot, string, error) {
	return nil, "", unsupported("snapshots")
}

// DeleteSnapshot implements api.Sandboxes: not yet.
func (*Sandboxes) DeleteSnapshot(context.Context, string) error { return unsupported("snapshots") }

// DeleteTemplate implements api.Sandboxes: not yet.
func (*Sandboxes) DeleteTemplate(context.Context, string, func(context.Context) error) error {
	return unsupported("deleting templates")
}

// Metrics implements api.Sandboxes: not yet.
func (*Sandboxes) Metrics(context.Context, string, time.Time, time.Time) ([]sandbox.Metric, error) {
	return nil, unsupported("metrics")
}

// Logs implements api.Sandboxes: not yet.
func (*Sandboxes) Logs(context.Context, string, store.SandboxLogQuery) ([]store.SandboxLog, error) {
	return nil, unsupported("logs")
}

// UpdateNetwork implements api.Sandboxes: not yet.
func (*Sandboxes) UpdateNetwork(context.Context, string, sandbox.NetworkUpdate) error {
	return unsupported("network updates")
}

// EgressEvents implements api.Sandboxes: not yet.
func (*Sandboxes) EgressEvents(string, uint64, int) ([]egress.Event, uint64, error) {
	return nil, 0, unsupported("the egress audit")
}

// Exec implements api.Sandboxes: not yet.
func (*Sandboxes) Exec(context.Context, string, map[string]string, ...string) ([]byte, error) {
	return nil, unsupported("exec")
}

// OpenTerminal implements api.Sandboxes: not yet.
func (*Sandboxes) OpenTerminal(context.Context, string, uint32, uint32) (*sandbox.Terminal, error) {
	return nil, unsupported("terminals")
}

// ListDir implements api.Sandboxes: not yet.
func (*Sandboxes) ListDir(context.Context, string, string) (sandbox.Directory, error) {
	return sandbox.Directory{}, unsupported("files")
}

// ReadFile implements api.Sandboxes: not yet.
func (*Sandboxes) ReadFile(context.Context, string, string) (io.ReadCloser, error) {
	return nil, unsupported("files")
}

// WriteFile implements api.Sandboxes: not yet.
func (*Sandboxes) WriteFile(context.Context, string, string, io.Reader) error {
	return unsupported("files")
}

// Host implements api.Sandboxes: not yet (the dashboard's host page).
func (*Sandboxes) Host() (sandbox.HostStatus, error) {
	return sandbox.HostStatus{}, unsupported("the host status")
}
