package cluster

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/agent-sandbox/agent-sandbox/internal/cluster/control"
	"github.com/agent-sandbox/agent-sandbox/internal/cluster/kubetest"
	"github.com/agent-sandbox/agent-sandbox/internal/cluster/node"
	"github.com/agent-sandbox/agent-sandbox/internal/cluster/v1alpha1"
)

// Short figures for the tests: a node's Lease lasts 3 s and is renewed
// every second; the leader's lasts 3 s.
const (
	testNodeLease   = 3 * time.Second
	testNodeRenew   = time.Second
	testLeaderLease = 3 * time.Second
)

// startReplica runs what an API replica runs beside the API, in this
// process and as the api role: a Cache, and a candidate for leader that,
// while leading, marks lost sandboxes. Each time it starts leading, it
// sends its identity on led. stop ends it (releasing the lead).
func startReplica(t *testing.T, c *kubetest.Cluster, identity string, led chan<- string) (stop func()) {
	t.Helper()
	kube := apiAccount.config(c)
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("replica", identity)
	cache, err := control.NewCache(kube, namespace)
	if err != nil {
		t.Fatal(err)
	}
	el, err := control.NewElector(kube, control.ElectionConfig{
		Namespace: namespace, Name: control.LeaderLease, Identity: identity,
		LeaseDuration: testLeaderLease, RenewDeadline: 2 * time.Second, RetryPeriod: 250 * time.Millisecond,
	}, log)
	if err != nil {
		t.Fatal(err)
	}
	lost, err := control.NewLostMarker(kube, cache, 100*time.Millisecond, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cacheDone, elDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(cacheDone)
		cache.Run(ctx)
	}()
	go func() {
		defer close(elDone)
		el.Run(ctx, func(ctx context.Context) {
			led <- identity
			lost.Run(ctx)
		})
	}()
	return func() {
		cancel()
		<-elDone
		<-cacheDone
	}
}

// TestLostAndLeader runs two node agents (over fakeLocal) and two API
// replicas' control planes against the real API server. One node stops
// renewing its Lease: its sandboxes are marked Lost with the reason
// within the Lease's duration, the other node's stay Running. The leading
// replica is stopped: the other takes the lead, marks the next sandbox
// placed on the dead node, and completes its deletion, which the node's
// finalizer would hold.
func TestLostAndLeader(t *testing.T) {
	c := kubetest.Start(t)
	applyBase(t, c)
	rc := adminClient(t, c)
	agent := func(name string) (stop func()) {
		return startAgent(t, c, node.Config{
			Namespace: namespace, Name: name, Address: "127.0.0.1:3000",
			Usage:         func() node.Usage { return node.Usage{} },
			LeaseDuration: testNodeLease, RenewInterval: testNodeRenew,
			Local: newFakeLocal(), CheckInterval: 100 * time.Millisecond,
		})
	}
	stopA := agent("node-a")
	defer stopA()
	stopB := agent("node-b")
	waitJoined(t, c, "node-a", "node-b")

	led := make(chan string, 2)
	stops := map[string]func(){
		"api-1": startReplica(t, c, "api-1", led),
		"api-2": startReplica(t, c, "api-2", led),
	}
	defer func() {
		for _, stop := range stops {
			stop()
		}
	}()
	leader := awaitLeader(t, led, 30*time.Second)
	t.Logf("leader: %s", leader)
	checkHolder(t, c, leader)

	spec := func(node string) v1alpha1.SandboxSpec {
		return v1alpha1.SandboxSpec{Template: "base", Timeout: metav1.Duration{Duration: time.Minute}, Node: node}
	}
	onA := createSandbox(t, rc, "sbx-a", spec("node-a"))
	onB := createSandbox(t, rc, "sbx-b", spec("node-b"))
	waitState(t, rc, onA.Name, v1alpha1.SandboxRunning, 30*time.Second)
	waitState(t, rc, onB.Name, v1alpha1.SandboxRunning, 30*time.Second)

	// node-b stops renewing: within its Lease's duration (plus the
	// marker's interval and the writes) its sandbox is Lost.
	stopB()
	got, took := waitState(t, rc, onB.Name, v1alpha1.SandboxLost, testNodeLease+5*time.Second)
	t.Logf("node-b stopped renewing; Sandbox %s marked %s %s later: %q", onB.Name, got.Status.State, took.Round(time.Millisecond), got.Status.Reason)
	if !strings.HasPrefix(got.Status.Reason, "node node-b: lease expired at ") {
		t.Errorf("reason %q", got.Status.Reason)
	}
	if took > testNodeLease+time.Second {
		t.Errorf("marked Lost %s after node-b's last chance to renew, want within the lease's %s (and the marker's interval)", took, testNodeLease)
	}
	checkRunning(t, rc, onA.Name)

	// The leader stops (its Lease released): the other leads, and does
	// the leader's job.
	t0 := time.Now()
	stops[leader]()
	delete(stops, leader)
	next := awaitLeader(t, led, 2*testLeaderLease)
	t.Logf("leader %s stopped; %s leads %s later", leader, next, time.Since(t0).Round(time.Millisecond))
	if next == leader {
		t.Fatalf("%s leads again after it stopped", next)
	}
	checkHolder(t, c, next)
	late := createSandbox(t, rc, "sbx-b-late", spec("node-b"), v1alpha1.NodeFinalizer)
	got, took = waitState(t, rc, late.Name, v1alpha1.SandboxLost, 10*time.Second)
	t.Logf("Sandbox %s placed on the dead node-b: marked %s by %s in %s: %q", late.Name, got.Status.State, next, took.Round(time.Millisecond), got.Status.Reason)
	checkRunning(t, rc, onA.Name)

	// Deleted, it goes: the leader completes the deletion that the dead
	// node's finalizer holds.
	took = deleteSandbox(t, rc, late.Name, 10*time.Second)
	t.Logf("Sandbox %s of the dead node-b, with the node's finalizer, deleted: gone %s later", late.Name, took.Round(time.Millisecond))
}

func awaitLeader(t *testing.T, led <-chan string, within time.Duration) string {
	t.Helper()
	select {
	case id := <-led:
		return id
	case <-time.After(within):
		t.Fatalf("no replica leads after %s", within)
		return ""
	}
}

// checkHolder checks the leader Lease names who leads.
func checkHolder(t *testing.T, c *kubetest.Cluster, identity string) {
	t.Helper()
	cc, err := coordinationclient.NewForConfig(c.Admin)
	if err != nil {
		t.Fatal(err)
	}
	l, err := cc.Leases(namespace).Get(t.Context(), control.LeaderLease, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading lease %s: %v", control.LeaderLease, err)
	}
	if h := ptr.Deref(l.Spec.HolderIdentity, ""); h != identity {
		t.Errorf("lease %s held by %q, want %q", control.LeaderLease, h, identity)
	}
}

// checkRunning checks Sandbox name is Running now.
func checkRunning(t *testing.T, rc *rest.RESTClient, name string) {
	t.Helper()
	o := new(v1alpha1.Sandbox)
	if err := rc.Get().Namespace(namespace).Resource(v1alpha1.SandboxResource).Name(name).Do(t.Context()).Into(o); err != nil {
		t.Fatalf("reading Sandbox %s: %v", name, err)
	}
	if o.Status.State != v1alpha1.SandboxRunning {
		t.Errorf("Sandbox %s: %s (%s), want Running: its node is alive", name, o.Status.State, o.Status.Reason)
	}
}
