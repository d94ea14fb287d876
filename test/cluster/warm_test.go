package cluster

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/client"
	"github.com/agent-sandbox/agent-sandbox/internal/cluster/kubetest"
	"github.com/agent-sandbox/agent-sandbox/internal/cluster/node"
	"github.com/agent-sandbox/agent-sandbox/internal/cluster/v1alpha1"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv/servertest"
)

// warmLocal is a fakeLocal with a warm pool of base members, as a node's
// sandbox manager keeps it: a create named by a ready member takes it, one
// named by a member already handed out is refused as a sandbox manager
// refuses an ID in use, any other boots.
type warmLocal struct {
	*fakeLocal
	changed chan struct{} // node.Config.UsageChanged

	wmu    sync.Mutex
	ready  []string        // oldest first
	handed map[string]bool // members handed out
	names  []string        // every create's name, in order
}

func newWarmLocal(members ...string) *warmLocal {
	return &warmLocal{fakeLocal: newFakeLocal(), changed: make(chan struct{}, 1), ready: members, handed: map[string]bool{}}
}

func (w *warmLocal) Create(ctx context.Context, name, key string, spec v1alpha1.SandboxSpec) (node.LocalSandbox, error) {
	w.wmu.Lock()
	w.names = append(w.names, name)
	if w.handed[name] {
		w.wmu.Unlock()
		return node.LocalSandbox{}, fmt.Errorf("%w: a sandbox with ID %s exists already", sandbox.ErrConflict, name)
	}
	if i := slices.Index(w.ready, name); i >= 0 {
		w.ready = slices.Delete(w.ready, i, i+1)
		w.handed[name] = true
		w.signal()
	}
	w.wmu.Unlock()
	return w.fakeLocal.Create(ctx, name, key, spec)
}

// handOutBehindTheBack hands member id out as a create through the node's
// own API would, before the node published the change.
func (w *warmLocal) handOutBehindTheBack(id string) {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	w.ready = slices.DeleteFunc(w.ready, func(r string) bool { return r == id })
	w.handed[id] = true
}

// publish lets the agent publish what the pool holds now.
func (w *warmLocal) publish() {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	w.signal()
}

func (w *warmLocal) signal() {
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

func (w *warmLocal) usage() node.Usage {
	u := w.fakeLocal.usage()
	w.wmu.Lock()
	defer w.wmu.Unlock()
	u.Warm = map[string][]string{"base": slices.Clone(w.ready)}
	return u
}

func (w *warmLocal) createNames() []string {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	return slices.Clone(w.names)
}

// TestWarmMembersThroughReplica runs a real API replica (no root) and a
// node agent in this process over warmLocal, whose pool holds two base
// members and whose usage it publishes when the pool changes (the renewal
// is a minute apart, so only that publish counts): a create through the
// replica is named by the oldest member, which the node takes, and the
// node publishes the pool without it; a create named by a member the node
// had handed out meanwhile (through its own API, not published yet) is
// refused by the node as an ID in use, and the replica creates again
// under a fresh name, once, which the node boots, leaving no object of the
// refused name; with the pool empty, a create gets a fresh name.
func TestWarmMembersThroughReplica(t *testing.T) {
	c := kubetest.Start(t)
	applyBase(t, c)
	bin := servertest.Build(t)
	rc := adminClient(t, c)
	const nodeName = "node-warm"
	local := newWarmLocal("iwarmone", "iwarmtwo")
	stop := startAgent(t, c, node.Config{
		Namespace: namespace, Name: nodeName, Address: "127.0.0.1:3000",
		Capacity: v1alpha1.NodeCapacity{Sandboxes: 4, CPUs: 2, MemoryMiB: 4096},
		Usage:    local.usage, UsageChanged: local.changed,
		LeaseDuration: 2 * time.Minute, RenewInterval: time.Minute,
		Local: local, CheckInterval: 100 * time.Millisecond,
	})
	defer stop()
	waitJoined(t, c, nodeName)
	if got := waitWarm(t, rc, nodeName, "base", ""); got != "iwarmone" {
		t.Fatalf("the node published warm member %s first, want iwarmone", got)
	}
	cl := startAPIReplica(t, c, bin).client(t)
	ctx := t.Context()
	create := func(what string) *client.Sandbox {
		t.Helper()
		t0 := time.Now()
		sb, err := cl.CreateSandbox(ctx, client.CreateOptions{Template: "base", Timeout: time.Minute})
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		t.Logf("%s: sandbox %s in %s; the node's creates so far: %q", what, sb.ID, time.Since(t0).Round(time.Millisecond), local.createNames())
		return sb
	}

	// The oldest member names the Sandbox; the node publishes its pool
	// without it.
	if sb := create("a create with two members ready"); sb.ID != "iwarmone" {
		t.Errorf("sandbox %s, want the oldest warm member iwarmone", sb.ID)
	}
	if got := waitWarm(t, rc, nodeName, "base", "iwarmone"); got != "iwarmtwo" {
		t.Errorf("after the take the node publishes %s first, want iwarmtwo", got)
	}

	// A member handed out behind the replica's back: refused, and
	// created again under a fresh name.
	local.handOutBehindTheBack("iwarmtwo")
	sb := create("a create named by a member already handed out")
	names := local.createNames()
	if sb.ID == "iwarmtwo" || !slices.Equal(names[1:2], []string{"iwarmtwo"}) || len(names) != 3 || names[2] != sb.ID {
		t.Errorf("sandbox %s after the node's creates %q: want iwarmtwo refused, then one fresh name, the sandbox's", sb.ID, names)
	}
	waitGone(t, rc, "iwarmtwo", 10*time.Second) // the refused object, removed

	// No member left, once published: a fresh name.
	local.publish()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var n v1alpha1.SandboxNode
		if err := rc.Get().Namespace(namespace).Resource(v1alpha1.SandboxNodeResource).Name(nodeName).Do(ctx).Into(&n); err != nil {
			t.Fatal(err)
		}
		if len(n.Status.Warm["base"]) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the node still publishes warm members %v 10 s after its pool emptied", n.Status.Warm)
		}
	}
	if sb := create("a create with the pool empty"); sb.ID == "iwarmone" || sb.ID == "iwarmtwo" {
		t.Errorf("sandbox %s: want a fresh name", sb.ID)
	}
}
