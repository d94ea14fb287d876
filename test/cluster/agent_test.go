package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"

	"github.com/agent-sandbox/agent-sandbox/internal/cluster/kubetest"
	"github.com/agent-sandbox/agent-sandbox/internal/cluster/node"
	"github.com/agent-sandbox/agent-sandbox/internal/cluster/v1alpha1"
)

// agentEnv carries an agentProcess to the test binary run as a node agent.
const agentEnv = "AGENT_SANDBOX_TEST_NODE_AGENT"

// agentProcess is what a node agent process needs: the API server, as the
// node role, and the agent's config.
type agentProcess struct {
	Host, Token string
	CA          []byte
	User        string
	Groups      []string
	// The agent's config, but for its Usage func, which reports Usage.
	Name, Address string
	Capacity      v1alpha1.NodeCapacity
	LeaseDuration time.Duration
	RenewInterval time.Duration
	Usage         node.Usage
}

func (p agentProcess) config() node.Config {
	return node.Config{
		Namespace: namespace, Name: p.Name, Address: p.Address, Capacity: p.Capacity,
		Usage:         func() node.Usage { return p.Usage },
		LeaseDuration: p.LeaseDuration, RenewInterval: p.RenewInterval,
	}
}

// TestMain runs the test binary as a node agent when agentEnv says so:
// the agent then lives in a process of its own, which the test kills.
func TestMain(m *testing.M) {
	if spec := os.Getenv(agentEnv); spec != "" {
		os.Exit(runAgent(spec))
	}
	os.Exit(m.Run())
}

func runAgent(spec string) int {
	var p agentProcess
	if err := json.Unmarshal([]byte(spec), &p); err != nil {
		fmt.Fprintln(os.Stderr, "node agent:", err)
		return 2
	}
	cfg := &rest.Config{
		Host: p.Host, BearerToken: p.Token, TLSClientConfig: rest.TLSClientConfig{CAData: p.CA},
		Impersonate: rest.ImpersonationConfig{UserName: p.User, Groups: p.Groups},
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	a, err := node.New(cfg, p.config(), log)
	if err != nil {
		log.Error("node agent", "err", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := a.Run(ctx); err != nil {
		log.Error("node agent", "err", err)
		return 1
	}
	return 0
}

// TestNodeAgentHeartbeat runs a node agent as the node role in a process
// of its own: its Lease is created and renewed and its SandboxNode
// published, with its Kubernetes Node's cordon and uncordon; killed with SIGKILL, its Lease stops moving and expires
// within its duration.
func TestNodeAgentHeartbeat(t *testing.T) {
	c := kubetest.Start(t)
	applyBase(t, c)
	const (
		name     = "node-1"
		duration = 3 * time.Second
		renew    = time.Second
	)
	p := agentProcess{
		Host: c.Admin.Host, Token: c.Admin.BearerToken, CA: c.Admin.CAData,
		User: nodeAccount.user, Groups: nodeAccount.groups,
		Name: name, Address: "127.0.0.1:3000",
		Capacity:      v1alpha1.NodeCapacity{Sandboxes: 100, CPUs: 2, MemoryMiB: 24 << 10},
		LeaseDuration: duration, RenewInterval: renew,
		Usage: node.Usage{Sandboxes: 3, Templates: []string{"code-interpreter-v1", "base"}},
	}
	spec, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), agentEnv+"="+string(spec))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the node agent: %v", err)
	}
	exited := make(chan struct{}) // closed once the agent is reaped
	go func() {
		_ = cmd.Wait() // it is killed: the status says nothing
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})

	cc, err := coordinationclient.NewForConfig(c.Admin)
	if err != nil {
		t.Fatal(err)
	}
	leases := cc.Leases(namespace)
	ctx := t.Context()

	// Created, held by the node, with its duration.
	first := waitLease(t, leases, name, 30*time.Second, func(l *coordinationv1.Lease) bool { return true })
	if h := first.Spec.HolderIdentity; h == nil || *h != name {
		t.Errorf("holder %v, want %s", h, name)
	}
	if d := first.Spec.LeaseDurationSeconds; d == nil || *d != int32(duration/time.Second) {
		t.Errorf("duration %v s, want %d", d, int32(duration/time.Second))
	}
	// Renewed: twice more, each later than the last.
	prev := first.Spec.RenewTime.Time
	for i := range 2 {
		l := waitLease(t, leases, name, 10*renew, func(l *coordinationv1.Lease) bool { return l.Spec.RenewTime.After(prev) })
		t.Logf("renewal %d: renewTime %s, %s after the one before", i+1, l.Spec.RenewTime.Format(time.RFC3339Nano), l.Spec.RenewTime.Sub(prev).Round(time.Millisecond))
		prev = l.Spec.RenewTime.Time
	}
	checkPublished(t, c, p)

	// Cordoned (kubectl cordon on its Kubernetes Node, as drain does
	// first): published within a renewal or two, and so uncordoned.
	for _, on := range []bool{true, false} {
		took := cordon(t, c, name, on, 5*renew)
		t.Logf("unschedulable %v published %s after kubectl", on, took.Round(time.Millisecond))
	}

	// Killed: the Lease stops moving and is expired within its duration.
	if err := cmd.Process.Kill(); err != nil {
		t.Fatalf("killing the node agent (pid %d): %v", cmd.Process.Pid, err)
	}
	<-exited
	killed := time.Now()
	last, err := leases.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if node.Expired(last, killed) {
		t.Fatalf("the lease was expired before the agent was killed (renewed %s)", last.Spec.RenewTime)
	}
	for !node.Expired(last, time.Now()) {
		if time.Since(killed) > duration+2*time.Second {
			t.Fatalf("lease not expired %s after the kill (renewed %s)", time.Since(killed), last.Spec.RenewTime)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("agent killed (SIGKILL, pid %d); its lease expired %s later (duration %s)", cmd.Process.Pid, time.Since(killed).Round(time.Millisecond), duration)
	after, err := leases.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !after.Spec.RenewTime.Equal(last.Spec.RenewTime) {
		t.Errorf("the lease was renewed after the kill: %s, then %s", last.Spec.RenewTime, after.Spec.RenewTime)
	}
	if !node.Expired(after, time.Now()) {
		t.Errorf("the lease read from the API server is not expired")
	}
}

// waitLease polls the lease until ok says yes.
func waitLease(t *testing.T, leases coordinationclient.LeaseInterface, name string, timeout time.Duration, ok func(*coordinationv1.Lease) bool) *coordinationv1.Lease {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		l, err := leases.Get(t.Context(), name, metav1.GetOptions{})
		switch {
		case err == nil && l.Spec.RenewTime != nil && ok(l):
			return l
		case err != nil && !apierrors.IsNotFound(err):
			t.Fatalf("reading lease %s: %v", name, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("lease %s: not as awaited after %s (last: %v)", name, timeout, l)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkPublished reads the agent's SandboxNode.
func checkPublished(t *testing.T, c *kubetest.Cluster, p agentProcess) {
	t.Helper()
	rc := adminClient(t, c)
	var n v1alpha1.SandboxNode
	if err := rc.Get().Namespace(namespace).Resource(v1alpha1.SandboxNodeResource).Name(p.Name).Do(t.Context()).Into(&n); err != nil {
		t.Fatalf("reading the sandboxnode: %v", err)
	}
	want := v1alpha1.SandboxNodeStatus{Capacity: p.Capacity, Sandboxes: 3, Templates: []string{"base", "code-interpreter-v1"}}
	if n.Spec.Address != p.Address || !reflect.DeepEqual(n.Status, want) {
		t.Errorf("sandboxnode %s: address %q status %+v, want %q %+v", p.Name, n.Spec.Address, n.Status, p.Address, want)
	}
	t.Logf("kubectl get sandboxnodes -n %s:\n%s", namespace, kubectl(t, c, "get", "sandboxnodes", "-n", namespace))
}

// cordon runs kubectl cordon (on) or uncordon on the Kubernetes Node name,
// creating the Node first if there is none (no kubelet registers one
// here), and waits until the node agent has published it in the
// SandboxNode's status; it returns how long that took.
func cordon(t *testing.T, c *kubetest.Cluster, name string, on bool, within time.Duration) time.Duration {
	t.Helper()
	core, err := corev1client.NewForConfig(c.Admin)
	if err != nil {
		t.Fatal(err)
	}
	_, err = core.Nodes().Create(t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating Node %s: %v", name, err)
	}
	verb := map[bool]string{true: "cordon", false: "uncordon"}[on]
	t0 := time.Now()
	t.Logf("kubectl %s %s: %s", verb, name, strings.TrimSpace(kubectl(t, c, verb, name)))
	rc := adminClient(t, c)
	for {
		var n v1alpha1.SandboxNode
		err := rc.Get().Namespace(namespace).Resource(v1alpha1.SandboxNodeResource).Name(name).Do(t.Context()).Into(&n)
		if err == nil && n.Status.Unschedulable == on {
			return time.Since(t0)
		}
		if time.Since(t0) > within {
			t.Fatalf("sandboxnode %s: status.unschedulable not %v %s after kubectl %s (%v)", name, on, within, verb, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
