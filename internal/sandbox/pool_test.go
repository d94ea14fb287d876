package sandbox

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
)

func TestParseWarmPools(t *testing.T) {
	tests := []struct {
		in      string
		want    map[string]PoolSize
		wantErr bool
	}{
		{in: "none", want: map[string]PoolSize{}},
		{in: "0", want: map[string]PoolSize{}},
		{in: "base=2", want: map[string]PoolSize{"base": {2, 8}}},
		{in: "base=2:3, code-interpreter-v1=1", want: map[string]PoolSize{"base": {2, 3}, "code-interpreter-v1": {1, 4}}},
		{in: "base=0:5", want: map[string]PoolSize{"base": {0, 5}}},
		{in: "base=0", want: map[string]PoolSize{}},
		{in: "base", wantErr: true},
		{in: "base=-1", wantErr: true},
		{in: "base=3:2", wantErr: true},
		{in: "=2", wantErr: true},
	}
	for _, tt := range tests {
		got, err := ParseWarmPools(tt.in)
		if tt.wantErr {
			if err == nil {
				t.Errorf("ParseWarmPools(%q) = %v, want an error", tt.in, got)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseWarmPools(%q): %v", tt.in, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("ParseWarmPools(%q) (-want +got):\n%s", tt.in, diff)
		}
		if back, err := ParseWarmPools(FormatWarmPools(got)); err != nil || !cmp.Equal(back, got) {
			t.Errorf("FormatWarmPools(%v) does not parse back: %v, %v", got, back, err)
		}
	}
}

// newPoolEnv is a manager whose base template has a warm pool of size,
// waited until full.
func newPoolEnv(t *testing.T, size PoolSize, mod func(*Config)) *env {
	t.Helper()
	e := newEnv(t, func(c *Config) {
		c.WarmPools = map[string]PoolSize{"base": size}
		if mod != nil {
			mod(c)
		}
	})
	e.waitReady(t, size.Min)
	return e
}

// waitReady waits until base's pool has n members waiting.
func (e *env) waitReady(t *testing.T, n int) {
	t.Helper()
	waitFor(t, 5*time.Second, "warm pool filled", func() bool { return e.m.Pools()["base"].Ready == n })
}

func TestPoolTakeAndRefill(t *testing.T) {
	e := newPoolEnv(t, PoolSize{Min: 2, Max: 2}, nil)
	ctx := context.Background()
	members := e.fake.Running()
	if len(members) != 2 {
		t.Fatalf("running %v, want the 2 pool members", members)
	}
	// Members are neither listed nor found, and have never been initialised.
	if list, _, err := e.m.List(ctx, store.ListQuery{}); err != nil || len(list) != 0 {
		t.Errorf("List = %v, %v; want no pool members", list, err)
	}
	for _, id := range members {
		if _, err := e.m.Get(ctx, id); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get(member %s) = %v, want not found", id, err)
		}
		if _, err := e.m.Dial(ctx, id, EnvdPort); !errors.Is(err, ErrNotFound) {
			t.Errorf("Dial(member %s) = %v, want not found", id, err)
		}
	}
	if len(e.envd.inits) != 0 {
		t.Fatalf("pool members got /init: %+v", e.envd.inits)
	}
	// Each has run the SDK's command line once, as the template's user.
	e.envd.mu.Lock()
	runs := slices.Clone(e.envd.runs)
	e.envd.mu.Unlock()
	if want := []string{"user: /bin/bash -l -c true", "user: /bin/bash -l -c true"}; !slices.Equal(runs, want) {
		t.Errorf("pool members ran %q, want %q (a warm-up each)", runs, want)
	}

	sb := e.create(t, CreateRequest{
		Timeout: time.Minute, Secure: true,
		Metadata: map[string]string{"user": "a"},
		EnvVars:  map[string]string{"FOO": "request"},
	})
	if !slices.Contains(members, sb.ID) {
		t.Fatalf("created %s, want one of the pool's %v", sb.ID, members)
	}
	// The record is the request's, under the member's ID, everywhere.
	rec := e.record(t, sb.ID)
	if rec.State != store.StateRunning || rec.Metadata["user"] != "a" || rec.EnvVars["FOO"] != "request" ||
		rec.EnvdAccessToken == "" || rec.EnvdAccessToken != sb.EnvdAccessToken || len(rec.BackendState) == 0 {
		t.Errorf("record = %+v", rec)
	}
	if d := time.Until(rec.EndAt); d < 50*time.Second || d > time.Minute {
		t.Errorf("endAt in %v, want about a minute from the take", d)
	}
	if spec := e.fake.Instance(sb.ID).Spec(); spec.ID != sb.ID || spec.Hostname != sb.ID {
		t.Errorf("backend spec ID %q hostname %q, want %s", spec.ID, spec.Hostname, sb.ID)
	}
	// The member's envd started with a token of its own, which /init
	// presents and replaces with the request's.
	init, presented := e.envd.lastInitWithToken(t)
	if init.AccessToken != sb.EnvdAccessToken || init.EnvVars["FOO"] != "request" {
		t.Errorf("init = %+v, want the request's token and env", init)
	}
	if boot := e.fake.Instance(sb.ID).Spec().EnvdAccessToken; len(boot) != 64 || presented != boot || boot == sb.EnvdAccessToken {
		t.Errorf("init presented %q; envd started with %q; handed out with %q: want the member's own token, rotated", presented, boot, sb.EnvdAccessToken)
	}
	if list, _, _ := e.m.List(ctx, store.ListQuery{}); len(list) != 1 || list[0].ID != sb.ID {
		t.Errorf("List = %v, want just %s", list, sb.ID)
	}
	c, err := e.m.Dial(ctx, sb.ID, EnvdPort)
	if err != nil {
		t.Fatalf("Dial handed-out sandbox: %v", err)
	}
	c.Close()

	// The pool refills with a new member.
	e.waitReady(t, 2)
	if n := len(e.fake.Running()); n != 3 {
		t.Errorf("%d running, want the sandbox and 2 members", n)
	}
	if err := e.m.Kill(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
}

// gatedBackend is a Fake whose Start waits, while a gate is set, until
// the gate is closed.
type gatedBackend struct {
	*isolation.Fake
	mu   sync.Mutex
	gate chan struct{}
}

func (b *gatedBackend) Start(ctx context.Context, spec isolation.Spec) (isolation.Instance, error) {
	b.mu.Lock()
	g := b.gate
	b.mu.Unlock()
	if g != nil {
		<-g
	}
	return b.Fake.Start(ctx, spec)
}

func (b *gatedBackend) hold() (open func()) {
	g := make(chan struct{})
	b.mu.Lock()
	b.gate = g
	b.mu.Unlock()
	return func() {
		b.mu.Lock()
		b.gate = nil
		b.mu.Unlock()
		close(g)
	}
}

func TestPoolGrowsAndShrinks(t *testing.T) {
	// The gate wraps the env's own fake, whose envd handler is in place
	// before the manager starts filling the pool.
	var gb *gatedBackend
	e := newEnv(t, func(c *Config) {
		gb = &gatedBackend{Fake: c.Backend.(*isolation.Fake)}
		c.Backend = gb
		c.WarmPools = map[string]PoolSize{"base": {Min: 1, Max: 3}}
		c.PoolIdle = time.Second
	})
	e.waitReady(t, 1)

	// With starts held, the first create takes the member and the second
	// finds the pool empty while it refills: takes outpace refills, so
	// the pool grows.
	open := gb.hold()
	e.create(t, CreateRequest{})
	done := make(chan error, 1)
	go func() {
		_, err := e.m.Create(context.Background(), CreateRequest{Template: "base", Timeout: time.Minute})
		done <- err
	}()
	waitFor(t, 5*time.Second, "pool grown after a miss", func() bool { return e.m.Pools()["base"].Target == 2 })
	open()
	if err := <-done; err != nil {
		t.Fatalf("cold create: %v", err)
	}
	e.waitReady(t, 2)
	// Idle, it shrinks back to Min, stopping the surplus member.
	waitFor(t, 5*time.Second, "pool shrunk", func() bool {
		p := e.m.Pools()["base"]
		return p.Target == 1 && p.Ready == 1
	})
	if n := len(e.fake.Running()); n != 3 {
		t.Errorf("%d running, want 2 sandboxes and 1 member", n)
	}
}

func TestPoolLimit(t *testing.T) {
	e := newPoolEnv(t, PoolSize{Min: 2, Max: 2}, func(c *Config) { c.MaxSandboxes = 3 })
	ctx := context.Background()
	a := e.create(t, CreateRequest{})
	e.waitReady(t, 2) // 1 live + 2 waiting: the limit
	e.create(t, CreateRequest{})
	e.create(t, CreateRequest{})
	if p := e.m.Pools()["base"]; p.Ready != 0 || p.Filling != 0 {
		t.Errorf("pool %+v at the limit, want empty and not filling", p)
	}
	_, err := e.m.Create(ctx, CreateRequest{Template: "base", Timeout: time.Minute})
	if !errors.Is(err, ErrLimit) {
		t.Fatalf("Create beyond the limit = %v, want ErrLimit", err)
	}
	if n := len(e.fake.Running()); n != 3 {
		t.Errorf("%d running, want 3", n)
	}
	// A kill frees a slot, which the pool takes back.
	if err := e.m.Kill(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	e.waitReady(t, 1)
	if n := len(e.fake.Running()); n != 3 {
		t.Errorf("%d running, want 3", n)
	}
}

func TestPoolEvictedForColdCreate(t *testing.T) {
	e := newPoolEnv(t, PoolSize{Min: 2, Max: 2}, func(c *Config) { c.MaxSandboxes = 2 })
	members := e.fake.Running()
	// A bandwidth of its own needs a cold create; at the limit it takes a
	// member's slot.
	sb := e.create(t, CreateRequest{Network: []byte(`{"bandwidth":{"downMbit":5}}`)})
	if slices.Contains(members, sb.ID) {
		t.Errorf("create with its own bandwidth got pool member %s", sb.ID)
	}
	if n := len(e.fake.Running()); n != 2 {
		t.Errorf("%d running, want 2 (the limit)", n)
	}
	evicted := 0
	for _, id := range members {
		if r := e.record(t, id); r.State == store.StateKilled && r.Reason == reasonPoolEvicted {
			evicted++
		}
	}
	if evicted != 1 {
		t.Errorf("%d members evicted, want 1", evicted)
	}
}

func TestPoolNetworkPolicy(t *testing.T) {
	e, net := newNetworkEnv(t)
	e.m.Close()
	e.cfg.WarmPools = map[string]PoolSize{"base": {Min: 1, Max: 1}}
	e.m = e.start(t)
	e.waitReady(t, 1)
	member := e.fake.Running()[0]
	if a, ok := net.get(member); !ok || len(a.rules.AllowOut()) != 0 {
		t.Fatalf("member attachment %+v, %v; want the default policy", a, ok)
	}
	off := false
	sb := e.create(t, CreateRequest{AllowInternetAccess: &off, Network: []byte(`{"allowOut":["a.test"]}`)})
	if sb.ID != member {
		t.Fatalf("created %s, want the member %s", sb.ID, member)
	}
	net.mu.Lock()
	updates := net.updates[sb.ID]
	net.mu.Unlock()
	if len(updates) != 1 || !updates[0].InternetOff || !cmp.Equal(updates[0].AllowOut(), []string{"a.test"}) {
		t.Errorf("updates %+v, want the request's rules once", updates)
	}
	// Without network fields the default policy stays: no update.
	e.waitReady(t, 1)
	sb2 := e.create(t, CreateRequest{})
	net.mu.Lock()
	n := len(net.updates[sb2.ID])
	net.mu.Unlock()
	if n != 0 {
		t.Errorf("%d updates for a create without network fields", n)
	}
}

func TestPoolShutdownAndRestart(t *testing.T) {
	e := newPoolEnv(t, PoolSize{Min: 2, Max: 2}, nil)
	members := e.fake.Running()
	sb := e.create(t, CreateRequest{})
	e.waitReady(t, 2)
	if err := e.m.Close(); err != nil {
		t.Fatal(err)
	}
	// Members are stopped and recorded as discarded; the sandbox keeps
	// running for the next server.
	if diff := cmp.Diff([]string{sb.ID}, e.fake.Running()); diff != "" {
		t.Errorf("running after Close (-want +got):\n%s", diff)
	}
	for _, id := range members {
		if id == sb.ID {
			continue
		}
		if r := e.record(t, id); r.State != store.StateKilled || r.Reason != reasonPoolDiscarded {
			t.Errorf("member %s: %s (%q) after Close", id, r.State, r.Reason)
		}
	}

	// A server that dies with members waiting leaves starting records,
	// which the next one cleans up.
	e.m = e.start(t)
	e.waitReady(t, 2)
	var left []string
	for _, id := range e.fake.Running() {
		if id != sb.ID {
			left = append(left, id)
		}
	}
	crash(e.m)
	e.cfg.WarmPools = nil
	e.m = e.start(t)
	for _, id := range left {
		if r := e.record(t, id); r.State != store.StateError || !e.fake.Instance(id).Stopped() {
			t.Errorf("member %s after restart: %s (%q), stopped %v", id, r.State, r.Reason, e.fake.Instance(id).Stopped())
		}
	}
	if diff := cmp.Diff([]string{sb.ID}, e.fake.Running()); diff != "" {
		t.Errorf("running after restart (-want +got):\n%s", diff)
	}
}

// crash stops m's goroutines without any of Close's cleanup, as if the
// server process died.
func crash(m *Manager) {
	m.mu.Lock()
	m.closed = true
	close(m.stop)
	m.mu.Unlock()
	m.wg.Wait()
}

// TestCreateWithID: a create that names an ID no member has boots under
// it, leaving the pool as it was; one that names a member's ID (as the
// pool lists them, and PoolsChanged announces) takes that member; a taken
// ID is a conflict, as is a malformed one invalid.
func TestCreateWithID(t *testing.T) {
	e := newPoolEnv(t, PoolSize{Min: 1, Max: 1}, nil)
	members := e.fake.Running()
	sb := e.create(t, CreateRequest{ID: "iclusterobject0123456"})
	if sb.ID != "iclusterobject0123456" || slices.Contains(members, sb.ID) {
		t.Errorf("created %s, want iclusterobject0123456 (pool members %v)", sb.ID, members)
	}
	if got := e.m.Pools()["base"]; got.Ready != 1 || !slices.Equal(got.IDs, members) {
		t.Errorf("pool %+v, want its member %v still there", got, members)
	}
	select { // the fill's announcement
	case <-e.m.PoolsChanged():
	default:
	}
	booted := e.fake.Instance(members[0])
	member := e.create(t, CreateRequest{ID: members[0]})
	if member.ID != members[0] || e.fake.Instance(member.ID) != booted {
		t.Errorf("created %s: want the member %s handed out, nothing booted for it", member.ID, members[0])
	}
	select {
	case <-e.m.PoolsChanged():
	case <-time.After(5 * time.Second):
		t.Error("no pool change announced after the member's take")
	}
	e.waitReady(t, 1)
	if ids := e.m.Pools()["base"].IDs; slices.Contains(ids, members[0]) {
		t.Errorf("the pool lists %v after the take of %s", ids, members[0])
	}
	if e.fake.Instance(sb.ID) == nil {
		t.Errorf("no instance booted under %s", sb.ID)
	}
	for _, tc := range []struct {
		id   string
		want error
	}{
		{"iclusterobject0123456", ErrConflict},
		{members[0], ErrConflict},
		{"sbx-run", ErrInvalid},
		{"Upper", ErrInvalid},
		{strings.Repeat("a", 58), ErrInvalid},
	} {
		if _, err := e.m.Create(context.Background(), CreateRequest{ID: tc.id, Template: "base", Timeout: time.Minute}); !errors.Is(err, tc.want) {
			t.Errorf("Create with ID %q = %v, want %v", tc.id, err, tc.want)
		}
	}
}
