package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/cluster/node"
	"github.com/agent-sandbox/agent-sandbox/internal/cluster/v1alpha1"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
)

// ClusterKeyMetadata is the metadata key of a sandbox made for a Sandbox
// object, holding the object's UID: a restarted node agent finds by it the
// sandboxes it made, and adopts them rather than creating them twice. The
// E2B API lists it with the sandbox's other metadata.
const ClusterKeyMetadata = "agent-sandbox.dev/uid"

// clusterSandboxes are the node's sandboxes as the node agent drives them.
type clusterSandboxes struct {
	manager *sandbox.Manager
	store   *store.Store
}

var _ node.Local = clusterSandboxes{}

// Held implements node.Local.
func (c clusterSandboxes) Held(ctx context.Context) (map[string]node.LocalSandbox, error) {
	out := make(map[string]node.LocalSandbox)
	q := store.ListQuery{Limit: store.MaxListLimit}
	for {
		page, next, err := c.manager.List(ctx, q)
		if err != nil {
			return nil, err
		}
		for _, sb := range page {
			if key, ok := sb.Metadata[ClusterKeyMetadata]; ok {
				out[key] = localSandbox(sb)
			}
		}
		if next == "" {
			return out, nil
		}
		q.NextToken = next
	}
}

// Create implements node.Local.
func (c clusterSandboxes) Create(ctx context.Context, name, key string, spec v1alpha1.SandboxSpec) (node.LocalSandbox, error) {
	md := maps.Clone(spec.Metadata)
	if md == nil {
		md = make(map[string]string, 1)
	}
	md[ClusterKeyMetadata] = key
	sb, err := c.manager.Create(ctx, sandbox.CreateRequest{
		ID: name, Template: spec.Template, Timeout: spec.Timeout.Duration, Metadata: md, Secure: spec.Secure,
		EnvVars: spec.EnvVars, AllowInternetAccess: spec.AllowInternetAccess, Network: spec.Network,
	})
	if err != nil {
		return node.LocalSandbox{}, err
	}
	return localSandbox(sb), nil
}

// localSandbox is what the agent reports of sb.
func localSandbox(sb store.Sandbox) node.LocalSandbox {
	return node.LocalSandbox{
		ID: sb.ID, StartedAt: sb.StartedAt, EnvdAccessToken: sb.EnvdAccessToken, TrafficAccessToken: sb.TrafficAccessToken,
		TemplateID: sb.TemplateID, Alias: sb.Alias, CPUCount: sb.CPUCount, MemoryMB: sb.MemoryMB, DiskSizeMB: sb.DiskSizeMB,
	}
}

// Ended implements node.Local: the sandbox's record says why it ended; a
// record already purged says nothing more than that it did.
func (c clusterSandboxes) Ended(ctx context.Context, id string) (bool, string, error) {
	sb, err := c.store.GetSandbox(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return true, "ended; its record is gone", nil
	case err != nil:
		return false, "", fmt.Errorf("reading sandbox %s: %w", id, err)
	case sb.State == store.StateRunning || sb.State == store.StatePaused:
		return false, "", nil
	}
	return true, cmp.Or(sb.Reason, string(sb.State)), nil
}

// Kill implements node.Local.
func (c clusterSandboxes) Kill(ctx context.Context, id string) error {
	if err := c.manager.Kill(ctx, id); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
		return err
	}
	return nil
}

// SetEndAt implements node.Local. An end already past, or less than a
// second away, is a second away: the manager takes timeouts of at least
// that, and the sandbox ends by its timeout, as it should.
func (c clusterSandboxes) SetEndAt(ctx context.Context, id string, at time.Time) error {
	return c.manager.SetTimeout(ctx, id, max(time.Until(at), time.Second))
}

// Pause implements node.Local.
func (c clusterSandboxes) Pause(ctx context.Context, id string, keepMemory bool) error {
	return c.manager.Pause(ctx, id, keepMemory)
}

// Resume implements node.Local, as a connect to a paused sandbox resumes
// it on a single host.
func (c clusterSandboxes) Resume(ctx context.Context, id string, at time.Time) (node.LocalSandbox, error) {
	sb, _, err := c.manager.Connect(ctx, id, max(time.Until(at), time.Second), false)
	if err != nil {
		return node.LocalSandbox{}, err
	}
	return localSandbox(sb), nil
}
