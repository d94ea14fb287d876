package control

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/agent-sandbox/agent-sandbox/internal/cluster/node"
	"github.com/agent-sandbox/agent-sandbox/internal/cluster/v1alpha1"
)

// DefaultLostInterval is how often the leader looks for expired Leases: a
// second past a node's expiry at most, against the 40 s a Lease lasts.
const DefaultLostInterval = time.Second

// LostMarker marks Lost, with the reason "node N: lease expired at T",
// the sandboxes of every node whose Lease has expired (node.Expired):
// their node is gone, or cut off, and nobody reports on them any more. It
// is the leader's job: one replica runs it.
type LostMarker struct {
	cache     *Cache
	client    *rest.RESTClient // agent-sandbox.dev/v1alpha1
	namespace string
	interval  time.Duration
	log       *slog.Logger
}

// NewLostMarker marks the sandboxes of cache's namespace, checking every
// interval.
func NewLostMarker(kube *rest.Config, c *Cache, interval time.Duration, log *slog.Logger) (*LostMarker, error) {
	if interval <= 0 {
		return nil, fmt.Errorf("lost marker: interval %s: want more than 0", interval)
	}
	client, err := v1alpha1.NewClient(kube)
	if err != nil {
		return nil, err
	}
	return &LostMarker{cache: c, client: client, namespace: c.namespace, interval: interval, log: log}, nil
}

// Run checks every interval until ctx ends, once the cache is synced (a
// Lease not listed yet must not pass for a missing one).
func (m *LostMarker) Run(ctx context.Context) {
	if err := m.cache.WaitSynced(ctx); err != nil {
		return // ctx ended
	}
	tick := time.NewTicker(m.interval)
	defer tick.Stop()
	for {
		m.pass(ctx, time.Now())
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// pass marks what is lost at now, and lets the deletions of a lost
// node's Sandboxes complete: it removes the finalizer by which that node
// would have confirmed the kill. A node without a Lease is left alone:
// the cache may have a new node's first Sandbox before its Lease.
func (m *LostMarker) pass(ctx context.Context, now time.Time) {
	for _, sb := range m.cache.Sandboxes() {
		if ctx.Err() != nil {
			return
		}
		lease, ok := m.cache.Lease(sb.Spec.Node)
		if !ok || !node.Expired(lease, now) {
			continue
		}
		if sb.Deleting() {
			if err := v1alpha1.RemoveNodeFinalizer(ctx, m.client, sb); err != nil {
				m.log.Warn("completing the deletion of a lost node's sandbox", "sandbox", sb.Name, "node", sb.Spec.Node, "err", err)
			}
			continue
		}
		if sb.Status.State.Ended() {
			continue
		}
		at, _ := node.Expiry(lease)
		reason := fmt.Sprintf("node %s: lease expired at %s", sb.Spec.Node, at.UTC().Format(time.RFC3339))
		switch marked, err := markEnded(ctx, m.client, m.namespace, sb, v1alpha1.SandboxLost, reason); {
		case err != nil:
			m.log.Warn("marking a sandbox lost", "sandbox", sb.Name, "node", sb.Spec.Node, "err", err)
		case marked:
			m.log.Info("sandbox lost", "sandbox", sb.Name, "node", sb.Spec.Node, "reason", reason)
		}
	}
}

// markEnded writes state and reason to the status of sb, of namespace, and says whether it
// did. The merge patch carries the resourceVersion the decision was made
// on, so a status the node wrote meanwhile (Killed, say) is not
// overwritten: the write fails with a conflict, and the next pass decides
// on the new status.
func markEnded(ctx context.Context, client *rest.RESTClient, namespace string, sb *v1alpha1.Sandbox, state v1alpha1.SandboxState, reason string) (bool, error) {
	body, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": sb.ResourceVersion},
		"status":   map[string]any{"state": state, "reason": reason},
	})
	if err != nil {
		return false, fmt.Errorf("encoding the status of sandbox %s: %w", sb.Name, err)
	}
	err = client.Patch(types.MergePatchType).Namespace(namespace).Resource(v1alpha1.SandboxResource).Name(sb.Name).SubResource("status").
		Body(body).Do(ctx).Error()
	switch {
	case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
		return false, nil // changed or deleted since: the next pass sees it
	case err != nil:
		return false, fmt.Errorf("writing the status of sandbox %s: %w", sb.Name, err)
	}
	return true, nil
}
