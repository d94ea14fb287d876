package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/agent-sandbox/agent-sandbox/internal/cluster/kubetest"
	"github.com/agent-sandbox/agent-sandbox/internal/cluster/node"
	"github.com/agent-sandbox/agent-sandbox/internal/cluster/v1alpha1"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
)

// fakeLocal is a node's sandboxes in memory, for the agent's side of the
// protocol without a server (TestServeNode runs the real one).
type fakeLocal struct {
	mu      sync.Mutex
	live    map[string]node.LocalSandbox // by key
	ended   map[string]string            // sandbox ID → why it ended
	creates []string                     // the keys Create was called with
	kills   []string                     // the IDs Kill was called with
	endAt   map[string]time.Time         // by ID, what SetEndAt set
	// gate, if set, holds every Create until it is closed; inFlight
	// counts the Creates held there now.
	gate     chan struct{}
	inFlight int
}

var _ node.Local = (*fakeLocal)(nil)

func newFakeLocal() *fakeLocal {
	return &fakeLocal{live: map[string]node.LocalSandbox{}, ended: map[string]string{}}
}

func (f *fakeLocal) Held(context.Context) (map[string]node.LocalSandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]node.LocalSandbox)
	for k, ls := range f.live {
		if _, gone := f.ended[ls.ID]; !gone {
			out[k] = ls
		}
	}
	return out, nil
}

func (f *fakeLocal) Create(_ context.Context, _, key string, spec v1alpha1.SandboxSpec) (node.LocalSandbox, error) {
	f.mu.Lock()
	f.creates = append(f.creates, key)
	id := fmt.Sprintf("local-%d", len(f.creates))
	if gate := f.gate; gate != nil {
		f.inFlight++
		f.mu.Unlock()
		<-gate
		f.mu.Lock()
		f.inFlight--
	}
	defer f.mu.Unlock()
	if spec.Template != "base" {
		return node.LocalSandbox{}, fmt.Errorf("template %q not found", spec.Template)
	}
	ls := node.LocalSandbox{ID: id, StartedAt: time.Now()}
	f.live[key] = ls
	return ls, nil
}

func (f *fakeLocal) Ended(_ context.Context, id string) (bool, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	reason, gone := f.ended[id]
	return gone, reason, nil
}

func (f *fakeLocal) Kill(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.kills = append(f.kills, id)
	if _, gone := f.ended[id]; !gone {
		f.ended[id] = "killed"
	}
	return nil
}

func (f *fakeLocal) SetEndAt(_ context.Context, id string, at time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.endAt == nil {
		f.endAt = make(map[string]time.Time)
	}
	f.endAt[id] = at
	return nil
}

// Pause refuses as a backend that cannot pause does: the request's
// fault, which the replica answers 400.
func (f *fakeLocal) Pause(context.Context, string, bool) error {
	return fmt.Errorf("%w: the fake node does not pause", sandbox.ErrInvalid)
}

func (f *fakeLocal) Resume(context.Context, string, time.Time) (node.LocalSandbox, error) {
	return node.LocalSandbox{}, fmt.Errorf("%w: the fake node does not resume", sandbox.ErrInvalid)
}

// calls returns copies of what Create and Kill were called with.
func (f *fakeLocal) calls() (creates, kills []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.creates), slices.Clone(f.kills)
}

// TestNodeSandboxes runs a node agent in this process, as the node role,
// over fakeLocal: a local sandbox whose object does not exist is killed at
// the first list; an object placed on the node is created once and
// reported Running, and one placed on another node is left alone; a
// restarted agent adopts the sandbox rather than creating it again; one
// that ends locally is marked Killed with its reason; a deleted object's
// sandbox is killed, while the agent's watch resumes across these.
func TestNodeSandboxes(t *testing.T) {
	c := kubetest.Start(t)
	applyBase(t, c)
	rc := adminClient(t, c)
	const name = "node-fake"
	local := &fakeLocal{
		live:  map[string]node.LocalSandbox{"uid-of-nothing": {ID: "orphan", StartedAt: time.Now()}},
		ended: map[string]string{},
	}
	start := func() (stop func()) {
		return startAgent(t, c, node.Config{
			Namespace: namespace, Name: name, Address: "127.0.0.1:3000",
			Usage:         func() node.Usage { return node.Usage{} },
			LeaseDuration: 5 * time.Second, RenewInterval: time.Second,
			Local: local, CheckInterval: 100 * time.Millisecond,
		})
	}
	stop := start()
	defer func() { stop() }()

	spec := v1alpha1.SandboxSpec{Template: "base", Timeout: metav1.Duration{Duration: time.Minute}, Node: name}
	elsewhere := spec
	elsewhere.Node = "node-other"
	createSandbox(t, rc, "sbx-elsewhere", elsewhere)
	obj := createSandbox(t, rc, "sbx-1", spec)
	got, took := waitState(t, rc, obj.Name, v1alpha1.SandboxRunning, 30*time.Second)
	t.Logf("Sandbox %s: Running in %s, status %+v", obj.Name, took.Round(time.Millisecond), got.Status)
	creates, kills := local.calls()
	if !slices.Equal(creates, []string{string(obj.UID)}) || !slices.Equal(kills, []string{"orphan"}) {
		t.Fatalf("creates %v and kills %v, want [%s] and [orphan]", creates, kills, obj.UID)
	}

	// Restarted: adopted. A second object shows the new agent is past its
	// list, and Error carries the create's message.
	stop()
	stop = start()
	bad := createSandbox(t, rc, "sbx-bad", v1alpha1.SandboxSpec{Template: "nope", Timeout: metav1.Duration{Duration: time.Minute}, Node: name})
	got, _ = waitState(t, rc, bad.Name, v1alpha1.SandboxError, 30*time.Second)
	if got.Status.Reason != `template "nope" not found` {
		t.Errorf("Sandbox %s: reason %q", bad.Name, got.Status.Reason)
	}
	if creates, _ := local.calls(); !slices.Equal(creates, []string{string(obj.UID), string(bad.UID)}) {
		t.Fatalf("after a restart, creates %v: want %s adopted, not created again", creates, obj.UID)
	}

	// Ended locally: Killed, with the local reason.
	local.mu.Lock()
	local.ended["local-1"] = "timeout"
	local.mu.Unlock()
	got, took = waitState(t, rc, obj.Name, v1alpha1.SandboxKilled, 10*time.Second)
	t.Logf("Sandbox %s: its sandbox ended locally, marked %s in %s: %q", obj.Name, got.Status.State, took.Round(time.Millisecond), got.Status.Reason)
	if got.Status.Reason != "timeout" {
		t.Errorf("Sandbox %s: reason %q, want timeout", obj.Name, got.Status.Reason)
	}

	// Deleted: killed.
	two := createSandbox(t, rc, "sbx-2", spec)
	waitState(t, rc, two.Name, v1alpha1.SandboxRunning, 30*time.Second)
	if err := rc.Delete().Namespace(namespace).Resource(v1alpha1.SandboxResource).Name(two.Name).Do(t.Context()).Error(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, kills := local.calls(); slices.Contains(kills, "local-3") {
			break
		}
		if time.Now().After(deadline) {
			_, kills := local.calls()
			t.Fatalf("Sandbox %s deleted, its sandbox local-3 not killed within 10 s (kills %v)", two.Name, kills)
		}
	}
	if creates, _ := local.calls(); len(creates) != 3 {
		t.Errorf("creates %v: want three, none for %s on another node", creates, "sbx-elsewhere")
	}
}

// startAgent runs a node agent with cfg in this process, as the node
// role, until the returned stop is called.
func startAgent(t *testing.T, c *kubetest.Cluster, cfg node.Config) (stop func()) {
	t.Helper()
	a, err := node.New(nodeAccount.config(c), cfg, slog.New(slog.NewTextHandler(os.Stderr, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("node agent %s: %v", cfg.Name, err)
		}
	}
}

// TestNodeCreatesAtOnce runs a node agent over a Local whose creates wait
// for the test: three Sandboxes placed at once are all being created at
// the same moment (a burst of creates is a burst of boots, as on a single
// host), and one deleted while its create waits is killed once the create
// is done, its deletion then complete (the node's finalizer removed).
func TestNodeCreatesAtOnce(t *testing.T) {
	c := kubetest.Start(t)
	applyBase(t, c)
	rc := adminClient(t, c)
	const name = "node-burst"
	gate := make(chan struct{})
	local := newFakeLocal()
	local.gate = gate
	stop := startAgent(t, c, node.Config{
		Namespace: namespace, Name: name, Address: "127.0.0.1:3000",
		Usage:         func() node.Usage { return node.Usage{} },
		LeaseDuration: 5 * time.Second, RenewInterval: time.Second,
		Local: local, CheckInterval: 100 * time.Millisecond,
	})
	released := false
	defer func() {
		if !released {
			close(gate)
		}
		stop()
	}()

	spec := v1alpha1.SandboxSpec{Template: "base", Timeout: metav1.Duration{Duration: time.Minute}, Node: name}
	var objs []*v1alpha1.Sandbox
	for i := range 3 {
		objs = append(objs, createSandbox(t, rc, fmt.Sprintf("sbx-burst-%d", i), spec, v1alpha1.NodeFinalizer))
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		local.mu.Lock()
		n := local.inFlight
		local.mu.Unlock()
		if n == len(objs) {
			t.Logf("%d creates in flight at once", n)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d creates in flight 10 s after %d Sandboxes were placed, want all at once", n, len(objs))
		}
	}
	doomed := objs[2]
	if err := rc.Delete().Namespace(namespace).Resource(v1alpha1.SandboxResource).Name(doomed.Name).Do(t.Context()).Error(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the deletion reaches the agent while the create waits
	close(gate)
	released = true
	for _, o := range objs[:2] {
		got, took := waitState(t, rc, o.Name, v1alpha1.SandboxRunning, 10*time.Second)
		t.Logf("Sandbox %s: Running %s after the creates were let go (local %s)", o.Name, took.Round(time.Millisecond), got.Status.Node)
	}
	took := waitGone(t, rc, doomed.Name, 10*time.Second)
	creates, kills := local.calls()
	t.Logf("Sandbox %s, deleted while its create waited: gone %s after; creates %v, kills %v", doomed.Name, took.Round(time.Millisecond), creates, kills)
	if len(creates) != 3 || len(kills) != 1 {
		t.Errorf("creates %v, kills %v: want three creates and the deleted one's sandbox killed", creates, kills)
	}
}

// adminClient is a client of c's agent-sandbox.dev kinds as its admin.
func adminClient(t *testing.T, c *kubetest.Cluster) *rest.RESTClient {
	t.Helper()
	rc, err := v1alpha1.NewClient(c.Admin)
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

// createSandbox creates Sandbox name with spec (and finalizers, which an
// API replica gives every Sandbox: v1alpha1.NodeFinalizer).
func createSandbox(t *testing.T, rc *rest.RESTClient, name string, spec v1alpha1.SandboxSpec, finalizers ...string) *v1alpha1.Sandbox {
	t.Helper()
	in := &v1alpha1.Sandbox{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "Sandbox"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Finalizers: finalizers},
		Spec:       spec,
	}
	out := new(v1alpha1.Sandbox)
	if err := rc.Post().Namespace(namespace).Resource(v1alpha1.SandboxResource).Body(in).Do(t.Context()).Into(out); err != nil {
		t.Fatalf("creating Sandbox %s: %v", name, err)
	}
	return out
}

// waitGone polls Sandbox name until it is gone, and returns the time since
// the call; it fails after within.
func waitGone(t *testing.T, rc *rest.RESTClient, name string, within time.Duration) time.Duration {
	t.Helper()
	t0 := time.Now()
	for {
		err := rc.Get().Namespace(namespace).Resource(v1alpha1.SandboxResource).Name(name).Do(t.Context()).Error()
		if apierrors.IsNotFound(err) {
			return time.Since(t0)
		}
		if err != nil {
			t.Fatalf("reading Sandbox %s: %v", name, err)
		}
		if time.Since(t0) > within {
			t.Fatalf("Sandbox %s still there after %s", name, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// deleteSandbox deletes Sandbox name and waits until it is gone (within),
// and returns the time that took.
func deleteSandbox(t *testing.T, rc *rest.RESTClient, name string, within time.Duration) time.Duration {
	t.Helper()
	t0 := time.Now()
	if err := rc.Delete().Namespace(namespace).Resource(v1alpha1.SandboxResource).Name(name).Do(t.Context()).Error(); err != nil {
		t.Fatalf("deleting Sandbox %s: %v", name, err)
	}
	waitGone(t, rc, name, within)
	return time.Since(t0)
}

// waitState polls Sandbox name until its status is state, and returns it
// with the time since the call; any other end state fails at once.
func waitState(t *testing.T, rc *rest.RESTClient, name string, state v1alpha1.SandboxState, within time.Duration) (*v1alpha1.Sandbox, time.Duration) {
	t.Helper()
	t0 := time.Now()
	for {
		o := new(v1alpha1.Sandbox)
		if err := rc.Get().Namespace(namespace).Resource(v1alpha1.SandboxResource).Name(name).Do(t.Context()).Into(o); err != nil {
			t.Fatalf("reading Sandbox %s: %v", name, err)
		}
		switch s := o.Status.State; {
		case s == state:
			return o, time.Since(t0)
		case s == v1alpha1.SandboxError || s == v1alpha1.SandboxKilled || s == v1alpha1.SandboxLost:
			t.Fatalf("Sandbox %s: %s (%s), want %s", name, s, o.Status.Reason, state)
		case time.Since(t0) > within:
			t.Fatalf("Sandbox %s: status %+v after %s, want %s", name, o.Status, within, state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
