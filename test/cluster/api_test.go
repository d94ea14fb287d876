package cluster

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/agent-sandbox/agent-sandbox/client"
	"github.com/agent-sandbox/agent-sandbox/internal/cluster/control"
	"github.com/agent-sandbox/agent-sandbox/internal/cluster/kubetest"
	"github.com/agent-sandbox/agent-sandbox/internal/cluster/node"
	"github.com/agent-sandbox/agent-sandbox/internal/cluster/v1alpha1"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv/servertest"
)

const testAPIKey = "e2b_0123456789abcdef0123456789abcdef01234567"

// apiReplica is a `serve --cluster kubernetes --role api` process.
type apiReplica struct {
	cmd    *exec.Cmd
	url    string
	exited chan struct{}
}

// startAPIReplica runs the server at bin as an API replica, as the api
// role, with serve's flags besides those it sets, and returns once GET
// /health answers 204. It is killed when the test ends.
func startAPIReplica(t *testing.T, c *kubetest.Cluster, bin string, flags ...string) *apiReplica {
	t.Helper()
	kubeconfig, err := c.KubeconfigAs(apiAccount.user, apiAccount.groups...)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	r := &apiReplica{url: "http://" + addr, exited: make(chan struct{})}
	r.cmd = exec.Command(bin, append([]string{"serve", "--cluster", "kubernetes", "--role", "api", "--listen", addr,
		"--kubeconfig", kubeconfig, "--cluster-namespace", namespace, "--api-key", testAPIKey}, flags...)...)
	r.cmd.Stdout, r.cmd.Stderr = os.Stderr, os.Stderr
	if err := r.cmd.Start(); err != nil {
		t.Fatalf("starting the API replica: %v", err)
	}
	go func() {
		_ = r.cmd.Wait() // killed at the end: the status says nothing
		close(r.exited)
	}()
	t.Cleanup(r.kill)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get(r.url + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusNoContent {
				return r
			}
		}
		select {
		case <-r.exited:
			t.Fatalf("the API replica exited before it was ready")
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the API replica at %s not ready after a minute (last: %v)", r.url, err)
		}
	}
}

// kill ends the replica with SIGKILL, as a node's failure would.
func (r *apiReplica) kill() {
	_ = r.cmd.Process.Kill()
	<-r.exited
}

func (r *apiReplica) client(t *testing.T) *client.Client {
	t.Helper()
	cl, err := client.New(client.Config{APIURL: r.url, APIKey: testAPIKey})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// usage is what a node over f publishes: its live sandboxes, and base.
func (f *fakeLocal) usage() node.Usage {
	held, _ := f.Held(context.Background()) // never fails
	return node.Usage{Sandboxes: int32(len(held)), Templates: []string{"base"}}
}

// TestAPIReplica runs two real `serve --cluster kubernetes --role api`
// processes (no root) against the real API server, with two node agents
// in this process over fakeLocal as the nodes (two slots each), and
// drives them through the Go client, as an SDK would: creates are placed
// on the nodes (the most free slots first, so spread) and come back
// Running; get, list and setTimeout (which the node applies) work through
// either replica; a template no node has is 400 and a full cluster 429,
// with no object written; kill deletes the object and the node kills its
// sandbox; the leading replica killed with SIGKILL, the other serves on,
// takes the lead once the leader Lease expires, and marks Lost the
// sandboxes of a node that stops renewing its Lease.
func TestAPIReplica(t *testing.T) {
	c := kubetest.Start(t)
	applyBase(t, c)
	bin := servertest.Build(t)
	rc := adminClient(t, c)
	locals := map[string]*fakeLocal{"node-a": newFakeLocal(), "node-b": newFakeLocal()}
	stopAgent := map[string]func(){}
	for name, local := range locals {
		stopAgent[name] = startAgent(t, c, node.Config{
			Namespace: namespace, Name: name, Address: "127.0.0.1:3000",
			Capacity: v1alpha1.NodeCapacity{Sandboxes: 2, CPUs: 2, MemoryMiB: 4096},
			Usage:    local.usage, LeaseDuration: 5 * time.Second, RenewInterval: time.Second,
			Local: local, CheckInterval: 100 * time.Millisecond,
		})
	}
	defer func() {
		for _, stop := range stopAgent {
			stop()
		}
	}()
	// Both nodes published before the replicas list them: else the first
	// creates would find no node.
	waitJoined(t, c, "node-a", "node-b")
	// One first: it leads, and the second is a candidate.
	one := startAPIReplica(t, c, bin)
	firstLeader := leaderHolder(t, c, "", 30*time.Second)
	two := startAPIReplica(t, c, bin)
	cl1, cl2 := one.client(t), two.client(t)
	ctx := t.Context()

	// Four creates fill the four slots, spread over the nodes.
	var ids []string
	perNode := map[string]int{}
	for i := range 4 {
		t0 := time.Now()
		sb, err := cl1.CreateSandbox(ctx, client.CreateOptions{Template: "base", Timeout: time.Minute, Metadata: map[string]string{"n": string(rune('0' + i))}})
		if err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
		o := readSandbox(t, rc, sb.ID)
		t.Logf("create %d: sandbox %s on %s, %s, in %s", i, sb.ID, o.Spec.Node, o.Status.State, time.Since(t0).Round(time.Millisecond))
		if o.Status.State != v1alpha1.SandboxRunning {
			t.Errorf("sandbox %s: %s after its create returned", sb.ID, o.Status.State)
		}
		ids = append(ids, sb.ID)
		perNode[o.Spec.Node]++
	}
	if perNode["node-a"] != 2 || perNode["node-b"] != 2 {
		t.Errorf("sandboxes per node %v, want two on each", perNode)
	}
	objects := countSandboxes(t, rc)

	// Refused before any write: an unknown template, a full cluster.
	checkStatus(t, "a template no node has", http.StatusBadRequest, func() error {
		_, err := cl1.CreateSandbox(ctx, client.CreateOptions{Template: "no-such-template"})
		return err
	})
	checkStatus(t, "a fifth sandbox on four slots", http.StatusTooManyRequests, func() error {
		_, err := cl1.CreateSandbox(ctx, client.CreateOptions{Template: "base"})
		return err
	})
	// A pause the node refuses (these nodes cannot) is answered in its
	// class, and the object no longer asks for it.
	checkStatus(t, "pause on a node that cannot", http.StatusBadRequest, func() error {
		return cl1.Pause(ctx, ids[0], true)
	})
	if o := readSandbox(t, rc, ids[0]); o.Spec.Pause != "" || o.Status.State != v1alpha1.SandboxRunning {
		t.Errorf("after the refused pause: spec.pause %q, state %s; want none, Running", o.Spec.Pause, o.Status.State)
	}
	if n := countSandboxes(t, rc); n != objects {
		t.Errorf("%d Sandbox objects after the refused creates, want %d", n, objects)
	}

	// A create waits for its node: on a node that never reports (its
	// Lease and SandboxNode written here, no agent), it waits until its
	// object is deleted, and is then 409.
	silentNode(t, c, rc, "node-silent", "slow")
	createErr := make(chan error, 1)
	go func() {
		// 400 until the replica's cache has the node's template.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			_, err := cl1.CreateSandbox(ctx, client.CreateOptions{Template: "slow"})
			var apiErr *client.APIError
			if !errors.As(err, &apiErr) || apiErr.Status != http.StatusBadRequest || time.Now().After(deadline) {
				createErr <- err
				return
			}
		}
	}()
	var waiting string
	for deadline := time.Now().Add(10 * time.Second); waiting == ""; time.Sleep(20 * time.Millisecond) {
		var l v1alpha1.SandboxList
		if err := rc.Get().Namespace(namespace).Resource(v1alpha1.SandboxResource).Do(ctx).Into(&l); err != nil {
			t.Fatal(err)
		}
		for _, o := range l.Items {
			if o.Spec.Node == "node-silent" {
				waiting = o.Name
			}
		}
		select {
		case err := <-createErr:
			t.Fatalf("the create on a silent node returned: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("no Sandbox placed on node-silent within 10 s")
		}
	}
	select {
	case err := <-createErr:
		t.Fatalf("the create on a silent node returned before its object was deleted: %v", err)
	case <-time.After(time.Second):
	}
	if err := rc.Delete().Namespace(namespace).Resource(v1alpha1.SandboxResource).Name(waiting).Do(ctx).Error(); err != nil {
		t.Fatal(err)
	}
	checkStatus(t, "a create whose object was deleted while it waited", http.StatusConflict, func() error {
		select {
		case err := <-createErr:
			return err
		case <-time.After(10 * time.Second):
			return errors.New("still waiting 10 s after its object was deleted")
		}
	})

	// Get, list and setTimeout through the other replica.
	info, err := cl2.GetSandbox(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if info.State != client.StateRunning || info.TemplateID != "base" || info.Metadata["n"] != "0" {
		t.Errorf("GET /sandboxes/%s through the other replica: %+v", ids[0], info)
	}
	// Connect extends (1 min → 5), and never shortens (5 → 2 stays 5).
	for _, d := range []time.Duration{5 * time.Minute, 2 * time.Minute} {
		sb, err := cl2.Connect(ctx, ids[0], client.ConnectOptions{Timeout: d})
		if err != nil || sb.ID != ids[0] {
			t.Fatalf("connect %s for %s: %v, %v", ids[0], d, sb, err)
		}
		want := time.Now().Add(5 * time.Minute)
		if info, err := cl1.GetSandbox(ctx, ids[0]); err != nil || info.EndAt.Sub(want).Abs() > 2*time.Second {
			t.Errorf("after connect for %s: endAt %v (%v), want about %v", d, info.EndAt, err, want)
		}
	}
	listed, next, err := cl2.ListSandboxes(ctx, client.ListOptions{Metadata: map[string]string{"n": "2"}})
	if err != nil || next != "" || len(listed) != 1 || listed[0].ID != ids[2] {
		t.Errorf("list by metadata n=2: %+v, %q, %v; want %s alone", listed, next, err, ids[2])
	}
	want := time.Now().Add(10 * time.Minute)
	if err := cl2.SetTimeout(ctx, ids[1], 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	if info, err := cl1.GetSandbox(ctx, ids[1]); err != nil || info.EndAt.Sub(want).Abs() > 2*time.Second {
		t.Errorf("after setTimeout 10m: endAt %v (%v), want about %v", info.EndAt, err, want)
	}
	o := readSandbox(t, rc, ids[1])
	local := locals[o.Spec.Node]
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		local.mu.Lock()
		var at time.Time
		for _, a := range local.endAt {
			if a.After(at) {
				at = a
			}
		}
		local.mu.Unlock()
		if at.Sub(want).Abs() <= 2*time.Second {
			t.Logf("setTimeout 10m: node %s set the local end to %s (asked: %s)", o.Spec.Node, at.Format(time.RFC3339Nano), want.Format(time.RFC3339Nano))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s did not apply the timeout within 10 s (last end set %v, want about %v)", o.Spec.Node, at, want)
		}
	}

	// One replica killed: the other serves every sandbox, and kills one.
	killedOn := readSandbox(t, rc, ids[3]).Spec.Node
	one.kill()
	killed := time.Now()
	t.Logf("replica %s killed (SIGKILL)", one.url)
	all, _, err := cl2.ListSandboxes(ctx, client.ListOptions{})
	if err != nil || len(all) != 4 {
		t.Fatalf("list through the replica left: %d sandboxes, %v; want 4", len(all), err)
	}
	if err := cl2.KillSandbox(ctx, ids[3]); err != nil {
		t.Fatal(err)
	}
	if _, err := cl2.GetSandbox(ctx, ids[3]); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("GET a killed sandbox: %v, want not found", err)
	}
	if err := cl2.KillSandbox(ctx, ids[3]); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("kill a killed sandbox again: %v, want not found", err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, kills := locals[killedOn].calls(); len(kills) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the node's sandbox not killed within 10 s of the kill")
		}
	}
	// Its slot is free again once the node published it: a create lands
	// there.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var n v1alpha1.SandboxNode
		if err := rc.Get().Namespace(namespace).Resource(v1alpha1.SandboxNodeResource).Name(killedOn).Do(ctx).Into(&n); err != nil {
			t.Fatal(err)
		}
		if n.Status.Sandboxes == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s publishes %d sandboxes 10 s after a kill, want 1", killedOn, n.Status.Sandboxes)
		}
	}
	sb, err := cl2.CreateSandbox(ctx, client.CreateOptions{Template: "base", Timeout: time.Minute})
	if err != nil {
		t.Fatalf("create after a kill freed a slot: %v", err)
	}
	t.Logf("after the kill, sandbox %s on %s", sb.ID, readSandbox(t, rc, sb.ID).Spec.Node)

	// The replica left took the lead from the one killed (which could not
	// release it): within the leader Lease's 15 s and a try.
	successor := leaderHolder(t, c, firstLeader, 30*time.Second)
	t.Logf("leader %s killed; %s leads, %s after the kill", firstLeader, successor, time.Since(killed).Round(time.Second))

	// And, leading, marks Lost the sandboxes of a node that went silent.
	stopAgent["node-b"]()
	delete(stopAgent, "node-b")
	for _, id := range []string{ids[0], ids[1], ids[2], sb.ID} {
		if readSandbox(t, rc, id).Spec.Node == "node-b" {
			got, took := waitState(t, rc, id, v1alpha1.SandboxLost, 15*time.Second)
			t.Logf("node-b stopped; Sandbox %s %s %s later: %s", id, got.Status.State, took.Round(time.Millisecond), got.Status.Reason)
			checkStatus(t, "GET a lost sandbox", http.StatusNotFound, func() error {
				_, err := cl2.GetSandbox(ctx, id)
				return err
			})
		}
	}
}

// leaderHolder waits until the leader Lease is held by someone other than
// not, and returns the holder.
func leaderHolder(t *testing.T, c *kubetest.Cluster, not string, within time.Duration) string {
	t.Helper()
	cc, err := coordinationclient.NewForConfig(c.Admin)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(within); ; time.Sleep(100 * time.Millisecond) {
		l, err := cc.Leases(namespace).Get(t.Context(), control.LeaderLease, metav1.GetOptions{})
		if err == nil {
			if h := ptr.Deref(l.Spec.HolderIdentity, ""); h != "" && h != not {
				return h
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no leader other than %q within %s (%v)", not, within, err)
		}
	}
}

// waitJoined waits until each of nodes has published its SandboxNode and
// renewed its Lease since: an agent's first round creates the Lease, then
// writes the SandboxNode (the first write of a custom kind can take
// seconds, longer than the tests' 3 s Leases), and renews from then on.
func waitJoined(t *testing.T, c *kubetest.Cluster, nodes ...string) {
	t.Helper()
	rc := adminClient(t, c)
	cc, err := coordinationclient.NewForConfig(c.Admin)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range nodes {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			var n v1alpha1.SandboxNode
			err := rc.Get().Namespace(namespace).Resource(v1alpha1.SandboxNodeResource).Name(name).Do(t.Context()).Into(&n)
			if err == nil {
				var l *coordinationv1.Lease
				if l, err = cc.Leases(namespace).Get(t.Context(), name, metav1.GetOptions{}); err == nil && l.Spec.RenewTime.After(n.CreationTimestamp.Time) {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %s: no SandboxNode, or no Lease renewal after it, within 30 s (%v)", name, err)
			}
		}
	}
}

// silentNode writes a live Lease (a minute) and a SandboxNode with room
// and template built for node name, as an agent would, but runs no agent:
// what is placed there is never reported.
func silentNode(t *testing.T, c *kubetest.Cluster, rc *rest.RESTClient, name, template string) {
	t.Helper()
	cc, err := coordinationclient.NewForConfig(c.Admin)
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.NowMicro()
	_, err = cc.Leases(namespace).Create(t.Context(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(name), LeaseDurationSeconds: ptr.To[int32](60), RenewTime: &now},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := &v1alpha1.SandboxNode{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "SandboxNode"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec:       v1alpha1.SandboxNodeSpec{Address: "127.0.0.1:1"},
	}
	if err := rc.Post().Namespace(namespace).Resource(v1alpha1.SandboxNodeResource).Body(n).Do(t.Context()).Into(n); err != nil {
		t.Fatal(err)
	}
	n.Status = v1alpha1.SandboxNodeStatus{Capacity: v1alpha1.NodeCapacity{Sandboxes: 10}, Templates: []string{template}}
	if err := rc.Put().Namespace(namespace).Resource(v1alpha1.SandboxNodeResource).Name(name).SubResource("status").Body(n).Do(t.Context()).Error(); err != nil {
		t.Fatal(err)
	}
}

// readSandbox reads Sandbox name from the API server.
func readSandbox(t *testing.T, rc *rest.RESTClient, name string) *v1alpha1.Sandbox {
	t.Helper()
	o := new(v1alpha1.Sandbox)
	if err := rc.Get().Namespace(namespace).Resource(v1alpha1.SandboxResource).Name(name).Do(t.Context()).Into(o); err != nil {
		t.Fatalf("reading Sandbox %s: %v", name, err)
	}
	return o
}

// countSandboxes counts the Sandbox objects.
func countSandboxes(t *testing.T, rc *rest.RESTClient) int {
	t.Helper()
	var l v1alpha1.SandboxList
	if err := rc.Get().Namespace(namespace).Resource(v1alpha1.SandboxResource).Do(t.Context()).Into(&l); err != nil {
		t.Fatalf("listing Sandboxes: %v", err)
	}
	return len(l.Items)
}

// checkStatus checks call fails with an API error of status.
func checkStatus(t *testing.T, what string, status int, call func() error) {
	t.Helper()
	err := call()
	var apiErr *client.APIError
	if !errors.As(err, &apiErr) || apiErr.Status != status {
		t.Errorf("%s: %v, want status %d", what, err, status)
		return
	}
	t.Logf("%s: %d %s", what, apiErr.Status, apiErr.Message)
}
