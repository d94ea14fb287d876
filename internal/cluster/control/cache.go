package control

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/agent-sandbox/agent-sandbox/internal/cluster/kubeclient"
	"github.com/agent-sandbox/agent-sandbox/internal/cluster/v1alpha1"
)

// byNode indexes Sandboxes by spec.node.
const byNode = "node"

// Cache is a replica's view of one namespace: its Leases, SandboxNodes and
// Sandboxes, listed once and then kept current by watches (client-go
// informers). The objects it returns are shared: callers must not change
// them.
type Cache struct {
	namespace string
	leases    cache.SharedIndexInformer
	nodes     cache.SharedIndexInformer
	sandboxes cache.SharedIndexInformer

	mu sync.Mutex
	// waiters are closed when the Sandbox of their name changes, by name:
	// guarded by mu.
	waiters map[string][]chan struct{}
}

// NewCache is a Cache of namespace on kube's API server. Run it.
func NewCache(kube *rest.Config, namespace string) (*Cache, error) {
	leaseClient, err := kubeclient.New(kube, coordinationv1.SchemeGroupVersion, coordinationv1.AddToScheme)
	if err != nil {
		return nil, err
	}
	ours, err := v1alpha1.NewClient(kube)
	if err != nil {
		return nil, err
	}
	inform := func(c *rest.RESTClient, resource string, example runtime.Object, idx cache.Indexers) cache.SharedIndexInformer {
		lw := cache.NewListWatchFromClient(c, resource, namespace, fields.Everything())
		return cache.NewSharedIndexInformer(lw, example, 0, idx)
	}
	c := &Cache{
		namespace: namespace,
		leases:    inform(leaseClient, "leases", &coordinationv1.Lease{}, cache.Indexers{}),
		nodes:     inform(ours, v1alpha1.SandboxNodeResource, &v1alpha1.SandboxNode{}, cache.Indexers{}),
		sandboxes: inform(ours, v1alpha1.SandboxResource, &v1alpha1.Sandbox{}, cache.Indexers{
			byNode: func(obj any) ([]string, error) { return []string{obj.(*v1alpha1.Sandbox).Spec.Node}, nil },
		}),
	}
	c.waiters = make(map[string][]chan struct{})
	wake := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if o, ok := obj.(*v1alpha1.Sandbox); ok {
			c.wake(o.Name)
		}
	}
	if _, err := c.sandboxes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    wake,
		UpdateFunc: func(_, obj any) { wake(obj) },
		DeleteFunc: wake,
	}); err != nil {
		return nil, fmt.Errorf("watching sandboxes for waiters: %w", err)
	}
	return c, nil
}

// Run watches until ctx ends. API-server errors are retried by the
// informers (with backoff), not returned.
func (c *Cache) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, inf := range []cache.SharedIndexInformer{c.leases, c.nodes, c.sandboxes} {
		wg.Go(func() { inf.RunWithContext(ctx) })
	}
	wg.Wait()
}

// WaitSynced returns once every kind has been listed, or ctx's error.
func (c *Cache) WaitSynced(ctx context.Context) error {
	if !cache.WaitForCacheSync(ctx.Done(), c.leases.HasSynced, c.nodes.HasSynced, c.sandboxes.HasSynced) {
		return fmt.Errorf("listing leases, sandboxnodes and sandboxes: %w", context.Cause(ctx))
	}
	return nil
}

// Lease returns the Lease called name.
func (c *Cache) Lease(name string) (*coordinationv1.Lease, bool) {
	return get[*coordinationv1.Lease](c.leases, c.namespace, name)
}

// Nodes returns every SandboxNode.
func (c *Cache) Nodes() []*v1alpha1.SandboxNode {
	return all[*v1alpha1.SandboxNode](c.nodes.GetStore().List())
}

// Node returns the SandboxNode called name.
func (c *Cache) Node(name string) (*v1alpha1.SandboxNode, bool) {
	return get[*v1alpha1.SandboxNode](c.nodes, c.namespace, name)
}

// Sandbox returns the Sandbox called name.
func (c *Cache) Sandbox(name string) (*v1alpha1.Sandbox, bool) {
	return get[*v1alpha1.Sandbox](c.sandboxes, c.namespace, name)
}

// Sandboxes returns every Sandbox.
func (c *Cache) Sandboxes() []*v1alpha1.Sandbox {
	return all[*v1alpha1.Sandbox](c.sandboxes.GetStore().List())
}

// SandboxesOn returns the Sandboxes placed on node (spec.node).
func (c *Cache) SandboxesOn(node string) []*v1alpha1.Sandbox {
	objs, err := c.sandboxes.GetIndexer().ByIndex(byNode, node)
	if err != nil {
		panic(err) // only for an index that does not exist: ours does
	}
	return all[*v1alpha1.Sandbox](objs)
}

// ErrDeleted is returned by Await when the Sandbox it waits on is
// deleted.
var ErrDeleted = errors.New("sandbox deleted")

// Await waits until the cache holds Sandbox name and ok says yes of it,
// and returns it; it gives up after within, when ctx ends, or when the
// Sandbox, once seen, is deleted (ErrDeleted).
func (c *Cache) Await(ctx context.Context, name string, within time.Duration, ok func(*v1alpha1.Sandbox) bool) (*v1alpha1.Sandbox, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, within, fmt.Errorf("not there after %s", within))
	defer cancel()
	seen := false
	for {
		// Registered before the look, so that no change falls between.
		changed := c.wait(name)
		o, found := c.Sandbox(name)
		switch {
		case found && ok(o):
			c.unwait(name, changed)
			return o, nil
		case found:
			seen = true
		case seen:
			c.unwait(name, changed)
			return nil, fmt.Errorf("waiting on %s: %w", name, ErrDeleted)
		}
		select {
		case <-changed:
		case <-ctx.Done():
			c.unwait(name, changed)
			return nil, context.Cause(ctx)
		}
	}
}

func (c *Cache) wait(name string) chan struct{} {
	ch := make(chan struct{})
	c.mu.Lock()
	defer c.mu.Unlock()
	c.waiters[name] = append(c.waiters[name], ch)
	return ch
}

func (c *Cache) unwait(name string, ch chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	rest := slices.DeleteFunc(c.waiters[name], func(w chan struct{}) bool { return w == ch })
	if len(rest) == 0 {
		delete(c.waiters, name)
		return
	}
	c.waiters[name] = rest
}

func (c *Cache) wake(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ch := range c.waiters[name] {
		close(ch)
	}
	delete(c.waiters, name)
}

// get reads object namespace/name from inf's store.
func get[T runtime.Object](inf cache.SharedIndexInformer, namespace, name string) (T, bool) {
	obj, ok, err := inf.GetStore().GetByKey(namespace + "/" + name)
	if err != nil || !ok { // the informers' stores never fail a read
		var zero T
		return zero, false
	}
	return obj.(T), true
}

func all[T any](objs []any) []T {
	out := make([]T, len(objs))
	for i, o := range objs {
		out[i] = o.(T)
	}
	return out
}
