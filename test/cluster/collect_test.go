package cluster

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/agent-sandbox/agent-sandbox/client"
	"github.com/agent-sandbox/agent-sandbox/internal/cluster/kubetest"
	"github.com/agent-sandbox/agent-sandbox/internal/cluster/v1alpha1"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv/servertest"
)

// TestCollector runs a real API replica with --ended-retention 5s over
// Sandbox objects the test writes, placed on a node that has neither Lease
// nor agent: one Killed is 404 through the API with its reason, then
// deleted about 5 s after its status was written; one Running an hour past
// its end (its node never reported it) is marked Killed by the leader,
// "timed out at T; node N did not report it", and deleted 5 s later; one
// Running within its timeout stays.
func TestCollector(t *testing.T) {
	c := kubetest.Start(t)
	applyBase(t, c)
	rc := adminClient(t, c)
	bin := servertest.Build(t) // first: the retention runs from the status writes below
	const gone = "node-gone"
	spec := func(timeout time.Duration) v1alpha1.SandboxSpec {
		return v1alpha1.SandboxSpec{Template: client.DefaultTemplate, Timeout: metav1.Duration{Duration: timeout}, Node: gone}
	}
	now := time.Now()
	killed := createSandbox(t, rc, "gckilled", spec(time.Hour))
	patchStatus(t, rc, killed.Name, map[string]any{"state": v1alpha1.SandboxKilled, "node": gone, "reason": "killed by the test",
		"startedAt": metav1.NewTime(now.Add(-time.Minute))})
	overdue := createSandbox(t, rc, "gcoverdue", spec(time.Minute))
	patchStatus(t, rc, overdue.Name, map[string]any{"state": v1alpha1.SandboxRunning, "node": gone, "startedAt": metav1.NewTime(now.Add(-time.Hour))})
	live := createSandbox(t, rc, "gclive", spec(10*time.Minute))
	patchStatus(t, rc, live.Name, map[string]any{"state": v1alpha1.SandboxRunning, "node": gone, "startedAt": metav1.NewTime(now)})

	replica := startAPIReplica(t, c, bin, "--ended-retention", "5s")
	cl := replica.client(t)
	_, err := cl.GetSandbox(t.Context(), killed.Name)
	if err == nil || !strings.Contains(err.Error(), "killed by the test") {
		t.Errorf("GET %s, ended: %v, want 404 with its reason", killed.Name, err)
	}
	t.Logf("GET %s before its retention is over: %v", killed.Name, err)

	t0 := time.Now()
	waitDeleted(t, rc, killed.Name, 15*time.Second)
	t.Logf("Sandbox %s (Killed) deleted %s after the replica was ready", killed.Name, time.Since(t0).Round(100*time.Millisecond))

	o, took := waitState(t, rc, overdue.Name, v1alpha1.SandboxKilled, 30*time.Second)
	t.Logf("Sandbox %s (Running, an hour past its end): %s in %s, %q", overdue.Name, o.Status.State, took.Round(100*time.Millisecond), o.Status.Reason)
	if !strings.Contains(o.Status.Reason, "node "+gone+" did not report it") || !strings.HasPrefix(o.Status.Reason, "timed out at ") {
		t.Errorf("Sandbox %s: reason %q, want a timeout its node did not report", overdue.Name, o.Status.Reason)
	}
	t1 := time.Now()
	waitDeleted(t, rc, overdue.Name, 15*time.Second)
	t.Logf("Sandbox %s deleted %s after it was marked Killed", overdue.Name, time.Since(t1).Round(100*time.Millisecond))

	if got := readSandbox(t, rc, live.Name); got.Status.State != v1alpha1.SandboxRunning {
		t.Errorf("Sandbox %s within its timeout: %s (%s), want Running still", live.Name, got.Status.State, got.Status.Reason)
	}
	if sb, err := cl.GetSandbox(t.Context(), live.Name); err != nil || sb.State != client.StateRunning {
		t.Errorf("GET %s: %+v, %v, want it running", live.Name, sb, err)
	}
}

// patchStatus merges status into Sandbox name's status, as a node writes it.
func patchStatus(t *testing.T, rc *rest.RESTClient, name string, status map[string]any) {
	t.Helper()
	body, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Patch(types.MergePatchType).Namespace(namespace).Resource(v1alpha1.SandboxResource).Name(name).SubResource("status").
		Body(body).Do(t.Context()).Error(); err != nil {
		t.Fatalf("writing the status of Sandbox %s: %v", name, err)
	}
}

// waitDeleted polls until Sandbox name is gone.
func waitDeleted(t *testing.T, rc *rest.RESTClient, name string, within time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(within); ; time.Sleep(100 * time.Millisecond) {
		err := rc.Get().Namespace(namespace).Resource(v1alpha1.SandboxResource).Name(name).Do(t.Context()).Error()
		if apierrors.IsNotFound(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Sandbox %s still there after %s (%v)", name, within, err)
		}
	}
}
