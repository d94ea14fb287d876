package cluster

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/agent-sandbox/agent-sandbox/client"
	"github.com/agent-sandbox/agent-sandbox/internal/cluster/kubetest"
	"github.com/agent-sandbox/agent-sandbox/internal/cluster/v1alpha1"
	"github.com/agent-sandbox/agent-sandbox/internal/server"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv/servertest"
)

// TestServeNode runs a real `serve --cluster kubernetes` on the jail
// backend, as the node role, against the test API server, and drives it
// through Sandbox objects alone: one placed on the node is created there
// and reported Running, and runs a command through the node's own E2B
// API; the server restarted, the node adopts it (one local sandbox still,
// the same), and reports a Sandbox of an unknown template Error with the
// reason; a changed spec.timeout moves the local sandbox's end; one
// killed through the node's API is marked Killed; a deleted object's
// sandbox is killed before the deletion completes (the node's finalizer,
// which an API replica's objects carry).
func TestServeNode(t *testing.T) {
	testenv.RequireRoot(t)
	c := kubetest.Start(t)
	applyBase(t, c)
	const nodeName = "node-serve"
	kubeconfig, err := c.KubeconfigAs(nodeAccount.user, nodeAccount.groups...)
	if err != nil {
		t.Fatal(err)
	}
	srv := servertest.New(t, "--backend", "jail", "--address-pool", "10.244.1.0/24", "--warm-pool", "none",
		"--cluster", "kubernetes", "--kubeconfig", kubeconfig, "--cluster-namespace", namespace, "--node-name", nodeName)
	srv.Start()
	rc := adminClient(t, c)
	tag := servertest.RandomHex(t, 6)

	// Placed on the node: Running, and real.
	obj := createSandbox(t, rc, "sbxrun", v1alpha1.SandboxSpec{Template: client.DefaultTemplate, Timeout: metav1.Duration{Duration: 5 * time.Minute}, Metadata: map[string]string{"clusterTest": tag}, Node: nodeName},
		v1alpha1.NodeFinalizer)
	got, took := waitState(t, rc, obj.Name, v1alpha1.SandboxRunning, time.Minute)
	t.Logf("Sandbox %s: create → Running in %s (status %+v)", obj.Name, took.Round(time.Millisecond), got.Status)
	if got.Status.Node != nodeName || got.Status.StartedAt == nil {
		t.Errorf("status %+v: want node %s and a start time", got.Status, nodeName)
	}
	id := localSandbox(t, srv, obj.UID, tag)
	srv.Made = append(srv.Made, id)
	sb, err := srv.Client().Connect(t.Context(), id, client.ConnectOptions{})
	if err != nil {
		t.Fatalf("connecting to sandbox %s: %v", id, err)
	}
	var out strings.Builder
	if code, err := sb.Run(t.Context(), "echo ran in $(cat /proc/sys/kernel/hostname)", client.RunOptions{Stdout: &out}); err != nil || code != 0 {
		t.Fatalf("sandbox %s: exit %d, %v: %s", id, code, err, out.String())
	}
	t.Logf("sandbox %s of Sandbox %s: %s", id, obj.Name, strings.TrimSpace(out.String()))

	// Restarted: adopted, not created again. The Sandbox of a template
	// the node does not have, created after the restart, is reported Error
	// with the reason, which also shows the new agent has listed and
	// handled the node's objects.
	srv.Stop()
	srv.Start()
	bad := createSandbox(t, rc, "sbxbad", v1alpha1.SandboxSpec{Template: "no-such-template", Timeout: metav1.Duration{Duration: time.Minute}, Node: nodeName})
	got, _ = waitState(t, rc, bad.Name, v1alpha1.SandboxError, time.Minute)
	t.Logf("Sandbox %s: %s: %s", bad.Name, got.Status.State, got.Status.Reason)
	if !strings.Contains(got.Status.Reason, "no-such-template") {
		t.Errorf("Sandbox %s: reason %q does not name the template", bad.Name, got.Status.Reason)
	}
	if again := localSandbox(t, srv, obj.UID, tag); again != id {
		t.Errorf("after a restart the node holds sandbox %s for %s, want %s", again, obj.Name, id)
	}
	if got, _ := waitState(t, rc, obj.Name, v1alpha1.SandboxRunning, time.Second); got.Status.Node != nodeName {
		t.Errorf("after a restart: status %+v", got.Status)
	}

	// Its spec.timeout changed (an API replica's setTimeout): the node's
	// sandbox ends that long after the object's startedAt.
	patch := []byte(`{"spec":{"timeout":"20m0s"}}`)
	if err := rc.Patch(types.MergePatchType).Namespace(namespace).Resource(v1alpha1.SandboxResource).Name(obj.Name).Body(patch).Do(t.Context()).Error(); err != nil {
		t.Fatalf("patching Sandbox %s's timeout: %v", obj.Name, err)
	}
	startedAt := readSandbox(t, rc, obj.Name).Status.StartedAt.Time
	wantEnd := startedAt.Add(20 * time.Minute)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		info, err := srv.Client().GetSandbox(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if info.EndAt.Sub(wantEnd).Abs() < time.Second {
			t.Logf("Sandbox %s: spec.timeout 20m; the node's sandbox %s ends at %s (started %s)", obj.Name, id, info.EndAt.Format(time.RFC3339), startedAt.Format(time.RFC3339))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s ends at %s 10 s after spec.timeout became 20m, want %s", id, info.EndAt, wantEnd)
		}
	}

	// Killed through the node's own API: the object says so.
	short := createSandbox(t, rc, "sbxkill", v1alpha1.SandboxSpec{Template: client.DefaultTemplate, Timeout: metav1.Duration{Duration: 5 * time.Minute}, Metadata: map[string]string{"clusterTest": tag}, Node: nodeName})
	waitState(t, rc, short.Name, v1alpha1.SandboxRunning, time.Minute)
	shortID := localSandbox(t, srv, short.UID, tag)
	if err := srv.Client().KillSandbox(t.Context(), shortID); err != nil {
		t.Fatal(err)
	}
	got, took = waitState(t, rc, short.Name, v1alpha1.SandboxKilled, 10*time.Second)
	t.Logf("Sandbox %s: its sandbox killed through the node's API, marked %s in %s: %s", short.Name, got.Status.State, took.Round(time.Millisecond), got.Status.Reason)

	// Deleted: the deletion completes once the sandbox is killed.
	took = deleteSandbox(t, rc, obj.Name, 30*time.Second)
	_, err = srv.Client().GetSandbox(t.Context(), id)
	var apiErr *client.APIError
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusNotFound {
		t.Fatalf("Sandbox %s deleted (%s after the request), yet GET /sandboxes/%s on its node: %v, want 404", obj.Name, took.Round(time.Millisecond), id, err)
	}
	t.Logf("Sandbox %s deleted %s after the request, its sandbox %s gone by then (%s)", obj.Name, took.Round(time.Millisecond), id, apiErr.Message)
	srv.Stop()
}

// localSandbox returns the one sandbox the node runs for the object of
// uid, found through the node's E2B API by its metadata.
func localSandbox(t *testing.T, srv *servertest.Server, uid types.UID, tag string) string {
	t.Helper()
	infos, _, err := srv.Client().ListSandboxes(t.Context(), client.ListOptions{Metadata: map[string]string{server.ClusterKeyMetadata: string(uid)}})
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 {
		t.Fatalf("the node holds %d sandboxes for object %s, want 1: %+v", len(infos), uid, infos)
	}
	if infos[0].Metadata["clusterTest"] != tag {
		t.Errorf("sandbox %s: metadata %v, want the Sandbox's clusterTest %s", infos[0].ID, infos[0].Metadata, tag)
	}
	return infos[0].ID
}
