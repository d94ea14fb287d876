package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/agent-sandbox/agent-sandbox/internal/cluster/kubeclient"
	"github.com/agent-sandbox/agent-sandbox/internal/cluster/v1alpha1"
)

// Defaults of Config, kubelet's node lease figures: a node is stale after
// 40 s without a renewal, and renews four times within that.
const (
	DefaultLeaseDuration = 40 * time.Second
	DefaultRenewInterval = 10 * time.Second
)

// Usage is what a node holds now, read at every renewal and when
// Config.UsageChanged says so, and published when it changed.
type Usage struct {
	Sandboxes int32
	Templates []string
	// Warm are the ready warm pool members' IDs, by template name.
	Warm map[string][]string
}

// publishGap is the least time between two publishes that
// Config.UsageChanged asks for: under a burst of creates, each a take and
// a refill of a warm pool, the node writes its SandboxNode a few times a
// second, not twice per create.
const publishGap = 100 * time.Millisecond

// Config is one node agent's.
type Config struct {
	// Namespace holds the node's Lease and SandboxNode.
	Namespace string
	// Name is the node's, and so its Lease's and SandboxNode's.
	Name string
	// Address is where API replicas reach this node's sandbox traffic.
	Address  string
	Capacity v1alpha1.NodeCapacity
	// Usage reports what the node holds.
	Usage func() Usage
	// UsageChanged, if set, receives when the warm pools' members
	// changed: the agent publishes then (publishGap apart at most), so
	// that API replicas name new Sandboxes by members that are there.
	UsageChanged <-chan struct{}

	LeaseDuration time.Duration
	RenewInterval time.Duration

	// Local runs the sandboxes placed on the node (Sandbox objects whose
	// spec.node is Name); nil, the agent keeps the heartbeat alone.
	Local Local
	// CheckInterval is how often the sandboxes reported Running are
	// checked for an end (a timeout, a kill through the node's own API).
	CheckInterval time.Duration
}

// Validate names the first field that cannot work.
func (c Config) Validate() error {
	switch {
	case c.Namespace == "":
		return errors.New("node agent: namespace is empty")
	case c.Name == "":
		return errors.New("node agent: node name is empty")
	case c.Address == "":
		return errors.New("node agent: address is empty")
	case c.Usage == nil:
		return errors.New("node agent: no usage reporter")
	case c.LeaseDuration < time.Second:
		return fmt.Errorf("node agent: lease duration %s: want at least 1s", c.LeaseDuration)
	case c.RenewInterval <= 0 || c.RenewInterval >= c.LeaseDuration:
		return fmt.Errorf("node agent: renew interval %s: want more than 0 and less than the lease duration %s", c.RenewInterval, c.LeaseDuration)
	case c.Local != nil && c.CheckInterval <= 0:
		return fmt.Errorf("node agent: check interval %s: want more than 0", c.CheckInterval)
	}
	return nil
}

// Agent keeps one node's Lease and SandboxNode, and runs the sandboxes
// placed on it. Run it once.
type Agent struct {
	cfg    Config
	leases *rest.RESTClient // coordination.k8s.io/v1
	nodes  *rest.RESTClient // agent-sandbox.dev/v1alpha1
	log    *slog.Logger

	lease     *coordinationv1.Lease // the last one written, for its resourceVersion
	published *v1alpha1.SandboxNode // the last one written
	cordoned  bool                  // the Kubernetes Node's spec.unschedulable, last read
	sandboxes *sandboxes            // nil without Config.Local
}

// New is an agent talking to the API server of kube.
func New(kube *rest.Config, cfg Config, log *slog.Logger) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	leases, err := kubeclient.New(kube, coordinationv1.SchemeGroupVersion, coordinationv1.AddToScheme)
	if err != nil {
		return nil, err
	}
	nodes, err := v1alpha1.NewClient(kube)
	if err != nil {
		return nil, err
	}
	a := &Agent{
		cfg:    cfg,
		leases: leases,
		nodes:  nodes,
		log:    log.With("node", cfg.Name),
	}
	if cfg.Local != nil {
		a.sandboxes = newSandboxes(nodes, cfg.Namespace, cfg.Name, cfg.Local, cfg.CheckInterval, a.log)
	}
	return a, nil
}

// Run renews the Lease and publishes the SandboxNode every RenewInterval
// until ctx ends, and, with Config.Local, runs the sandboxes placed on the
// node. A failed round is logged and tried again at the next tick: an API
// server away for less than the lease duration costs nothing. It returns
// an error only when the first round fails, so that a misconfigured agent
// (no RBAC, wrong namespace) stops at start.
func (a *Agent) Run(ctx context.Context) error {
	// The first round has no Lease to keep alive yet, and may meet an API
	// server slow at its first write of a kind (over a second here).
	if err := a.round(ctx, a.cfg.LeaseDuration); err != nil {
		return err
	}
	if a.sandboxes != nil {
		done := make(chan struct{})
		go func() {
			defer close(done)
			a.sandboxes.run(ctx)
		}()
		defer func() { <-done }()
	}
	tick := time.NewTicker(a.cfg.RenewInterval)
	defer tick.Stop()
	var soon <-chan time.Time // a publish UsageChanged asked for
	lastPublish := time.Time{}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			if err := a.round(ctx, a.cfg.RenewInterval); err != nil && ctx.Err() == nil {
				a.log.Warn("node heartbeat", "err", err)
			}
		case <-a.cfg.UsageChanged:
			if soon == nil {
				soon = time.After(time.Until(lastPublish.Add(publishGap)))
			}
		case <-soon:
			soon, lastPublish = nil, time.Now()
			pctx, cancel := context.WithTimeout(ctx, a.cfg.RenewInterval)
			if err := a.publish(pctx); err != nil && ctx.Err() == nil {
				a.log.Warn("publishing the node's usage", "err", err)
			}
			cancel()
		}
	}
}

// round renews and publishes within timeout: after the first, one
// RenewInterval, so that a request hung on a lost connection does not
// hold back the next renewal.
func (a *Agent) round(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := a.renew(ctx); err != nil {
		return err
	}
	if err := a.readCordon(ctx); err != nil {
		return err
	}
	return a.publish(ctx)
}

// readCordon reads whether the Kubernetes Node of the node's name is
// unschedulable (kubectl cordon, or drain), which the SandboxNode
// publishes. A host that is no Node of the cluster (none of that name) is
// schedulable. Only spec.unschedulable is decoded: the Node's kind is not
// in the agent's scheme (kubeclient).
func (a *Agent) readCordon(ctx context.Context) error {
	res := a.nodes.Get().AbsPath("/api/v1/nodes", a.cfg.Name).Do(ctx)
	raw, _ := res.Raw()
	err := res.Error() // the API server's Status, which Raw leaves undecoded
	if apierrors.IsNotFound(err) {
		a.cordoned = false
		return nil
	}
	var n struct {
		Spec struct {
			Unschedulable bool `json:"unschedulable"`
		} `json:"spec"`
	}
	if err == nil {
		err = json.Unmarshal(raw, &n)
	}
	if err != nil {
		return fmt.Errorf("reading whether node %s is cordoned: %w", a.cfg.Name, err)
	}
	a.cordoned = n.Spec.Unschedulable
	return nil
}

// renew writes the Lease's renewTime, creating the Lease the first time.
func (a *Agent) renew(ctx context.Context) error {
	ref := fmt.Sprintf("lease %s/%s", a.cfg.Namespace, a.cfg.Name)
	now := metav1.NowMicro()
	if a.lease == nil {
		l := new(coordinationv1.Lease)
		err := a.leases.Get().Namespace(a.cfg.Namespace).Resource("leases").Name(a.cfg.Name).Do(ctx).Into(l)
		switch {
		case apierrors.IsNotFound(err):
			created := new(coordinationv1.Lease)
			if err := a.leases.Post().Namespace(a.cfg.Namespace).Resource("leases").Body(a.newLease(now)).Do(ctx).Into(created); err != nil {
				return fmt.Errorf("creating %s: %w", ref, err)
			}
			a.lease = created
			return nil
		case err != nil:
			return fmt.Errorf("reading %s: %w", ref, err)
		}
		a.lease = l
	}
	l := a.lease.DeepCopy()
	l.Spec.HolderIdentity = ptr.To(a.cfg.Name)
	l.Spec.LeaseDurationSeconds = ptr.To(int32(a.cfg.LeaseDuration / time.Second))
	l.Spec.RenewTime = &now
	updated := new(coordinationv1.Lease)
	if err := a.leases.Put().Namespace(a.cfg.Namespace).Resource("leases").Name(a.cfg.Name).Body(l).Do(ctx).Into(updated); err != nil {
		a.lease = nil // read it again next time: a conflict or a deleted lease
		return fmt.Errorf("renewing %s: %w", ref, err)
	}
	a.lease = updated
	return nil
}

func (a *Agent) newLease(now metav1.MicroTime) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		TypeMeta:   metav1.TypeMeta{APIVersion: coordinationv1.SchemeGroupVersion.String(), Kind: "Lease"},
		ObjectMeta: metav1.ObjectMeta{Name: a.cfg.Name, Namespace: a.cfg.Namespace},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(a.cfg.Name),
			LeaseDurationSeconds: ptr.To(int32(a.cfg.LeaseDuration / time.Second)),
			AcquireTime:          &now,
			RenewTime:            &now,
		},
	}
}

// publish writes the SandboxNode when its spec or status differ from what
// was last written: at start, and when the node's usage changed.
func (a *Agent) publish(ctx context.Context) error {
	u := a.cfg.Usage()
	want := v1alpha1.SandboxNodeStatus{Capacity: a.cfg.Capacity, Sandboxes: u.Sandboxes, Templates: slices.Sorted(slices.Values(u.Templates)), Warm: u.Warm, Unschedulable: a.cordoned}
	if p := a.published; p != nil && p.Spec.Address == a.cfg.Address && statusEqual(p.Status, want) {
		return nil
	}
	n, err := a.ensureNode(ctx)
	if err != nil {
		return err
	}
	n.Status = want
	var out v1alpha1.SandboxNode
	err = a.nodes.Put().Namespace(a.cfg.Namespace).Resource(v1alpha1.SandboxNodeResource).Name(a.cfg.Name).SubResource("status").Body(n).Do(ctx).Into(&out)
	if err != nil {
		a.published = nil
		return fmt.Errorf("publishing sandboxnode %s/%s status: %w", a.cfg.Namespace, a.cfg.Name, err)
	}
	a.published = &out
	return nil
}

// ensureNode returns the SandboxNode with this agent's address, creating it
// or correcting its spec.
func (a *Agent) ensureNode(ctx context.Context) (*v1alpha1.SandboxNode, error) {
	if a.published != nil && a.published.Spec.Address == a.cfg.Address {
		return a.published.DeepCopy(), nil
	}
	ref := fmt.Sprintf("sandboxnode %s/%s", a.cfg.Namespace, a.cfg.Name)
	n := new(v1alpha1.SandboxNode)
	err := a.nodes.Get().Namespace(a.cfg.Namespace).Resource(v1alpha1.SandboxNodeResource).Name(a.cfg.Name).Do(ctx).Into(n)
	switch {
	case apierrors.IsNotFound(err):
		n = &v1alpha1.SandboxNode{
			TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "SandboxNode"},
			ObjectMeta: metav1.ObjectMeta{Name: a.cfg.Name, Namespace: a.cfg.Namespace},
			Spec:       v1alpha1.SandboxNodeSpec{Address: a.cfg.Address},
		}
		out := new(v1alpha1.SandboxNode)
		if err := a.nodes.Post().Namespace(a.cfg.Namespace).Resource(v1alpha1.SandboxNodeResource).Body(n).Do(ctx).Into(out); err != nil {
			return nil, fmt.Errorf("creating %s: %w", ref, err)
		}
		return out, nil
	case err != nil:
		return nil, fmt.Errorf("reading %s: %w", ref, err)
	case n.Spec.Address == a.cfg.Address:
		return n, nil
	}
	n.Spec.Address = a.cfg.Address
	out := new(v1alpha1.SandboxNode)
	if err := a.nodes.Put().Namespace(a.cfg.Namespace).Resource(v1alpha1.SandboxNodeResource).Name(a.cfg.Name).Body(n).Do(ctx).Into(out); err != nil {
		return nil, fmt.Errorf("updating %s address: %w", ref, err)
	}
	return out, nil
}

func statusEqual(a, b v1alpha1.SandboxNodeStatus) bool {
	return a.Capacity == b.Capacity && a.Sandboxes == b.Sandboxes && slices.Equal(a.Templates, b.Templates) &&
		maps.EqualFunc(a.Warm, b.Warm, slices.Equal) && a.Unschedulable == b.Unschedulable
}

// Expired says whether a node's Lease has gone unrenewed for longer than
// its duration at now: the node is to be taken as gone. A Lease without a
// renewal or a duration is expired.
func Expired(l *coordinationv1.Lease, now time.Time) bool {
	at, ok := Expiry(l)
	return !ok || now.After(at)
}

// Expiry is when l expires: its last renewal plus its duration; false if
// it has either not.
func Expiry(l *coordinationv1.Lease) (time.Time, bool) {
	if l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
		return time.Time{}, false
	}
	return l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second), true
}
