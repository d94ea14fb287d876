package control

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/agent-sandbox/agent-sandbox/internal/cluster/v1alpha1"
)

// DefaultRetention is how long an ended Sandbox object stays, its state
// and reason readable (the API's get says why it ended; `kubectl get
// sandboxes` shows it), before the leader deletes it.
const DefaultRetention = time.Hour

// MaxStart bounds how long a Sandbox object waits for its node to start
// it: the creating replica deletes it then (replica.DefaultStartTimeout),
// so one still not started later lost its replica.
const MaxStart = 10 * time.Minute

// OverdueGrace is how long past its end a sandbox that its object still
// shows live is left to its node, which marks it Killed within a second
// of its timeout, before the leader marks it so.
const OverdueGrace = time.Minute

// DefaultCollectInterval is how often the leader collects: a pass reads
// the cache alone, and writes only what is due.
const DefaultCollectInterval = time.Second

// Collector is the leader's cleanup of Sandbox objects: it deletes those
// that ended (Killed, Lost, Error) a retention ago, so that they do not
// pile up, and marks Killed those whose end is OverdueGrace past while
// they still show live: their node did not report their end (a node with
// no Lease, which the LostMarker leaves alone; an agent stuck or gone),
// or they never started and their create is over. Either way the API
// counts them as sandboxes no more, and the retention then deletes them.
type Collector struct {
	cache     *Cache
	client    *rest.RESTClient // agent-sandbox.dev/v1alpha1
	namespace string
	retention time.Duration
	interval  time.Duration
	log       *slog.Logger
}

// NewCollector collects the Sandboxes of cache's namespace every
// interval, deleting those ended retention ago.
func NewCollector(kube *rest.Config, c *Cache, retention, interval time.Duration, log *slog.Logger) (*Collector, error) {
	if retention <= 0 || interval <= 0 {
		return nil, fmt.Errorf("collector: retention %s, interval %s: want both more than 0", retention, interval)
	}
	client, err := v1alpha1.NewClient(kube)
	if err != nil {
		return nil, err
	}
	return &Collector{cache: c, client: client, namespace: c.namespace, retention: retention, interval: interval, log: log}, nil
}

// Run collects every interval until ctx ends, once the cache is synced.
func (c *Collector) Run(ctx context.Context) {
	if err := c.cache.WaitSynced(ctx); err != nil {
		return // ctx ended
	}
	tick := time.NewTicker(c.interval)
	defer tick.Stop()
	for {
		c.pass(ctx, time.Now())
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// chore is what a pass does with one object.
type chore int

const (
	keep chore = iota
	collect
	expire // mark Killed: overdue
)

// choose is the chore o is due at now, and for expire the reason.
func choose(o *v1alpha1.Sandbox, now time.Time, retention time.Duration) (chore, string) {
	if o.Deleting() {
		return keep, "" // its node, or the lost marker, completes the deletion
	}
	if o.Status.State.Ended() {
		if now.Sub(o.StatusTime()) >= retention {
			return collect, ""
		}
		return keep, ""
	}
	end, started := o.EndAt()
	if !started {
		if now.Sub(o.CreationTimestamp.Time) >= MaxStart+OverdueGrace {
			return expire, fmt.Sprintf("not started by node %s within %s", o.Spec.Node, MaxStart)
		}
		return keep, ""
	}
	// A paused sandbox's timeout does not run: its node keeps it for its
	// paused retention, as a single host does.
	if o.Status.State != v1alpha1.SandboxPaused && now.Sub(end) >= OverdueGrace {
		return expire, fmt.Sprintf("timed out at %s; node %s did not report it", end.UTC().Format(time.RFC3339), o.Spec.Node)
	}
	return keep, ""
}

// pass does what is due at now.
func (c *Collector) pass(ctx context.Context, now time.Time) {
	for _, sb := range c.cache.Sandboxes() {
		if ctx.Err() != nil {
			return
		}
		log := c.log.With("sandbox", sb.Name, "node", sb.Spec.Node)
		switch what, reason := choose(sb, now, c.retention); what {
		case collect:
			switch deleted, err := c.delete(ctx, sb); {
			case err != nil:
				log.Warn("deleting an ended sandbox", "err", err)
			case deleted:
				log.Info("ended sandbox deleted", "state", sb.Status.State, "ended_at", sb.StatusTime().UTC().Format(time.RFC3339))
			}
		case expire:
			switch marked, err := markEnded(ctx, c.client, c.namespace, sb, v1alpha1.SandboxKilled, reason); {
			case err != nil:
				log.Warn("marking an overdue sandbox killed", "err", err)
			case marked:
				log.Info("overdue sandbox marked killed", "reason", reason)
			}
		}
	}
}

// delete deletes sb as the pass saw it, and says whether it did: an
// object changed since (a new resourceVersion) or gone is left to the
// next pass.
func (c *Collector) delete(ctx context.Context, sb *v1alpha1.Sandbox) (bool, error) {
	opts := metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &sb.UID, ResourceVersion: &sb.ResourceVersion}}
	err := c.client.Delete().Namespace(c.namespace).Resource(v1alpha1.SandboxResource).Name(sb.Name).Body(&opts).Do(ctx).Error()
	switch {
	case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("deleting Sandbox %s: %w", sb.Name, err)
	}
	return true, nil
}
