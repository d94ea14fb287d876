package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
)

// newSnapEnv is newEnv over a fake backend that pauses and makes
// snapshots of kind, kept in a temporary directory.
func newSnapEnv(t *testing.T, kind isolation.SnapshotKind, mod func(*Config)) *env {
	t.Helper()
	dir := t.TempDir()
	return newEnvOn(t, isolation.NewFakeNamed("fake", isolation.Capabilities{Pause: true, Snapshot: kind}), func(c *Config) {
		c.SnapshotDir = filepath.Join(dir, "snapshots")
		if mod != nil {
			mod(c)
		}
	})
}

// snapshotDirs lists the snapshot directories on disk.
func (e *env) snapshotDirs(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(e.cfg.SnapshotDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var out []string
	for _, d := range entries {
		out = append(out, d.Name())
	}
	return out
}

func TestFork(t *testing.T) {
	e := newSnapEnv(t, isolation.FilesSnapshot, nil)
	ctx := context.Background()
	parent := e.create(t, CreateRequest{Metadata: map[string]string{"k": "v"}, EnvVars: map[string]string{"FOO": "parent"}, AutoPause: true})

	t0 := time.Now()
	res, mode, err := e.m.Fork(ctx, parent.ID, time.Minute, 3)
	if err != nil {
		t.Fatal(err)
	}
	if mode != ModeFilesystem || len(res) != 3 {
		t.Fatalf("Fork = %d results, mode %q", len(res), mode)
	}
	seen := map[string]bool{parent.ID: true}
	var snapID string
	for i, r := range res {
		c := r.Sandbox
		if r.Err != nil {
			t.Fatalf("fork %d: %v", i, r.Err)
		}
		if seen[c.ID] || !idRE.MatchString(c.ID) || c.EnvdAccessToken == parent.EnvdAccessToken || c.State != store.StateRunning {
			t.Errorf("fork %d: %+v", i, c)
		}
		seen[c.ID] = true
		if c.Metadata["k"] != "v" || !c.AutoPause || c.TemplateID != parent.TemplateID || c.SnapshotID == "" {
			t.Errorf("fork %d did not inherit: %+v", i, c)
		}
		if d := c.EndAt.Sub(t0); d < time.Minute || d > time.Minute+5*time.Second {
			t.Errorf("fork %d: endAt is now + %v, want 1m", i, d)
		}
		snapID = c.SnapshotID
		from, kind, err := e.fake.Instance(c.ID).SnapshotSource()
		if err != nil || from != parent.ID || kind != isolation.FilesSnapshot {
			t.Errorf("fork %d started from %q (%v), %v", i, from, kind, err)
		}
	}
	if r := e.record(t, parent.ID); r.State != store.StateRunning || e.fake.Instance(parent.ID).Paused() {
		t.Errorf("parent after the fork: %s, paused %v", r.State, e.fake.Instance(parent.ID).Paused())
	}
	// The fork's snapshot is not listed, and goes with the last fork.
	if list, _, _ := e.m.ListSnapshots(ctx, SnapshotQuery{}); len(list) != 0 {
		t.Errorf("listed snapshots: %+v", list)
	}
	for i, r := range res {
		if got := e.snapshotDirs(t); len(got) != 1 || got[0] != snapID {
			t.Errorf("before kill %d: snapshot dirs %v, want [%s]", i, got, snapID)
		}
		if err := e.m.Kill(ctx, r.Sandbox.ID); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 2*time.Second, "the fork's snapshot collected", func() bool { return len(e.snapshotDirs(t)) == 0 })

	for _, tc := range []struct {
		name  string
		count int
		msg   string
	}{{"count 0", 0, "Count must be at least 1"}, {"count 101", 101, "Count cannot be greater than 100"}} {
		if _, _, err := e.m.Fork(ctx, parent.ID, time.Minute, tc.count); !errors.Is(err, ErrInvalid) || err.Error() != tc.msg {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.msg)
		}
	}
	if _, _, err := e.m.Fork(ctx, "inope", time.Minute, 1); !errors.Is(err, ErrNotFound) {
		t.Errorf("fork of unknown: %v", err)
	}
	if err := e.m.Pause(ctx, parent.ID, true); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.m.Fork(ctx, parent.ID, time.Minute, 1); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "resume it first") {
		t.Errorf("fork of paused: %v", err)
	}
}

func TestForkWithMemory(t *testing.T) {
	e := newSnapEnv(t, isolation.MemorySnapshot, nil)
	parent := e.create(t, CreateRequest{})
	res, mode, err := e.m.Fork(context.Background(), parent.ID, time.Minute, 1)
	if err != nil || res[0].Err != nil {
		t.Fatal(err, res)
	}
	child := e.fake.Instance(res[0].Sandbox.ID).Spec()
	if mode != ModeFull || child.Snapshot.Kind != isolation.MemorySnapshot || child.Snapshot.EnvdAccessToken != parent.EnvdAccessToken ||
		child.EnvdAccessToken != res[0].Sandbox.EnvdAccessToken {
		t.Errorf("mode %q, child spec %+v", mode, child.Snapshot)
	}
}

func TestForkWithoutSnapshots(t *testing.T) {
	e := newEnv(t, nil)
	sb := e.create(t, CreateRequest{})
	if _, _, err := e.m.Fork(context.Background(), sb.ID, time.Minute, 1); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "the fake backend cannot fork") {
		t.Errorf("fork on a backend without snapshots: %v", err)
	}
}

func TestSnapshots(t *testing.T) {
	e := newSnapEnv(t, isolation.FilesSnapshot, nil)
	ctx := context.Background()
	src := e.create(t, CreateRequest{})
	unnamed, err := e.m.CreateSnapshot(ctx, src.ID, SnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	named, err := e.m.CreateSnapshot(ctx, src.ID, SnapshotRequest{Name: " Mine "})
	if err != nil {
		t.Fatal(err)
	}
	if unnamed.Name != "" || unnamed.Tag != "default" || named.Name != "mine" || named.Tag != "default" || named.SandboxID != src.ID || named.SizeBytes <= 0 {
		t.Errorf("snapshots: %+v, %+v", unnamed, named)
	}
	for _, tc := range []struct{ name, msg string }{
		{"team/x", "namespace 'team' is not allowed"},
		{"a b", "Invalid name"},
		{"x:BAD TAG", "Invalid name"},
		{"base", "is a template's name"},
	} {
		if _, err := e.m.CreateSnapshot(ctx, src.ID, SnapshotRequest{Name: tc.name}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("name %q: %v, want %q", tc.name, err, tc.msg)
		}
	}
	if _, err := e.m.CreateSnapshot(ctx, src.ID, SnapshotRequest{Mode: ModeFull}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "use mode filesystem") {
		t.Errorf("mode full on a files backend: %v", err)
	}

	// Sandboxes from either name, twice from one.
	a := e.create(t, CreateRequest{Template: unnamed.ID + ":default", Metadata: map[string]string{"m": "1"}})
	b := e.create(t, CreateRequest{Template: "mine"})
	c := e.create(t, CreateRequest{Template: "mine:default"})
	for _, sb := range []store.Sandbox{a, b, c} {
		if from, kind, err := e.fake.Instance(sb.ID).SnapshotSource(); err != nil || from != src.ID || kind != isolation.FilesSnapshot {
			t.Errorf("%s started from %q (%v), %v", sb.ID, from, kind, err)
		}
	}
	if a.Metadata["m"] != "1" || a.SnapshotID != unnamed.ID || b.SnapshotID != named.ID {
		t.Errorf("records: %+v, %+v", a, b)
	}

	list, next, err := e.m.ListSnapshots(ctx, SnapshotQuery{SandboxID: src.ID, Limit: 1})
	if err != nil || len(list) != 1 || list[0].ID != named.ID || next == "" {
		t.Fatalf("first page: %+v, %q, %v", list, next, err)
	}
	if list, next, err = e.m.ListSnapshots(ctx, SnapshotQuery{SandboxID: src.ID, Limit: 1, NextToken: next}); err != nil || len(list) != 1 || list[0].ID != unnamed.ID || next != "" {
		t.Errorf("second page: %+v, %q, %v", list, next, err)
	}
	if list, _, _ := e.m.ListSnapshots(ctx, SnapshotQuery{Name: "mine:v2"}); len(list) != 0 {
		t.Errorf("name mine:v2 lists %+v", list)
	}
	if list, _, _ := e.m.ListSnapshots(ctx, SnapshotQuery{Name: unnamed.ID}); len(list) != 1 {
		t.Errorf("by ID: %+v", list)
	}
	if _, _, err := e.m.ListSnapshots(ctx, SnapshotQuery{NextToken: "bad"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("bad token: %v", err)
	}

	// A newer snapshot takes the name; the older goes once unused.
	renamed, err := e.m.CreateSnapshot(ctx, src.ID, SnapshotRequest{Name: "mine"})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.m.Kill(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Kill(ctx, c.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Second, "the unnamed older snapshot collected", func() bool {
		_, err := e.store.GetSnapshot(ctx, named.ID)
		_, serr := os.Stat(e.m.snapshotDir(named.ID))
		return errors.Is(err, store.ErrNotFound) && errors.Is(serr, os.ErrNotExist)
	})

	// Deleted only once unused, then gone.
	ref := unnamed.ID + ":default"
	if err := e.m.DeleteSnapshot(ctx, ref); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "running sandboxes using it") {
		t.Errorf("delete in use: %v", err)
	}
	if err := e.m.Kill(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.m.DeleteSnapshot(ctx, ref); err != nil {
		t.Fatal(err)
	}
	if err := e.m.DeleteSnapshot(ctx, ref); !errors.Is(err, ErrNotFound) {
		t.Errorf("second delete: %v", err)
	}
	// A template is no snapshot: the API deletes it with DeleteTemplate.
	if err := e.m.DeleteSnapshot(ctx, "base"); !errors.Is(err, ErrNotFound) {
		t.Errorf("delete a template: %v", err)
	}
	if _, err := e.m.Create(ctx, CreateRequest{Template: ref, Timeout: time.Minute}); !errors.Is(err, ErrInvalid) {
		t.Errorf("create from a deleted snapshot: %v", err)
	}

	// A restarted server keeps the rest, and removes what has no record.
	stray := filepath.Join(e.cfg.SnapshotDir, "sleftover")
	if err := os.Mkdir(stray, 0o700); err != nil {
		t.Fatal(err)
	}
	e.m.Close()
	e.m = e.start(t)
	if _, err := os.Stat(stray); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stray snapshot dir: %v", err)
	}
	d := e.create(t, CreateRequest{Template: "mine"})
	if d.SnapshotID != renamed.ID {
		t.Errorf("after restart, mine is %s, want %s", d.SnapshotID, renamed.ID)
	}
}

func TestSnapshotBudget(t *testing.T) {
	e := newSnapEnv(t, isolation.FilesSnapshot, func(c *Config) { c.SnapshotBudget = 1 })
	ctx := context.Background()
	sb := e.create(t, CreateRequest{})
	if _, err := e.m.CreateSnapshot(ctx, sb.ID, SnapshotRequest{}); !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), "--snapshot-budget") {
		t.Errorf("over the budget: %v", err)
	}
	if dirs := e.snapshotDirs(t); len(dirs) != 0 {
		t.Errorf("a snapshot over the budget left %v", dirs)
	}
}

func TestPauseFilesOnly(t *testing.T) {
	e := newSnapEnv(t, isolation.FilesSnapshot, nil)
	ctx := context.Background()
	sb := e.create(t, CreateRequest{EnvVars: map[string]string{"FOO": "mine"}})
	first := e.fake.Instance(sb.ID)
	if err := e.m.Pause(ctx, sb.ID, false); err != nil {
		t.Fatal(err)
	}
	r := e.record(t, sb.ID)
	if r.State != store.StatePaused || r.PausedAs != store.PausedFiles || r.SnapshotID == "" || !first.Stopped() {
		t.Fatalf("after a files-only pause: %+v, stopped %v", r, first.Stopped())
	}
	if _, err := e.m.Dial(ctx, sb.ID, EnvdPort); !errors.Is(err, ErrPaused) {
		t.Errorf("Dial: %v", err)
	}
	if e.m.Asleep(sb.ID) {
		t.Error("a files-only pause is asleep (traffic would wake it)")
	}
	got, resumed, err := e.m.Connect(ctx, sb.ID, time.Minute, false)
	if err != nil || !resumed {
		t.Fatalf("Connect = %v, %v", resumed, err)
	}
	again := e.fake.Instance(sb.ID)
	from, kind, err := again.SnapshotSource()
	if again == first || err != nil || from != sb.ID || kind != isolation.FilesSnapshot || again.Spec().EnvdAccessToken != sb.EnvdAccessToken {
		t.Errorf("restarted from %q (%v), %v; spec %+v", from, kind, err, again.Spec())
	}
	if got.State != store.StateRunning || got.PausedAs != "" || got.Reboots != 1 || got.ResumedBy != ResumedByConnect || got.EnvdAccessToken != sb.EnvdAccessToken {
		t.Errorf("record after the reboot: %+v", got)
	}
	if init, token := e.envd.lastInitWithToken(t); init.EnvVars["FOO"] != "mine" || token != sb.EnvdAccessToken {
		t.Errorf("envd initialised again with %+v, token %q", init, token)
	}
	c, err := e.m.Dial(ctx, sb.ID, EnvdPort)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()

	// Paused again, the server restarts: it stays paused and resumes.
	if err := e.m.Pause(ctx, sb.ID, false); err != nil {
		t.Fatal(err)
	}
	e.m.Close()
	e.m = e.start(t)
	if r := e.record(t, sb.ID); r.State != store.StatePaused || r.PausedAs != store.PausedFiles {
		t.Fatalf("after a restart: %+v", r)
	}
	if got, _, err := e.m.Connect(ctx, sb.ID, time.Minute, false); err != nil || got.Reboots != 2 {
		t.Errorf("Connect after restart: %+v, %v", got, err)
	}
	// The snapshots of the earlier pauses are gone; the last one stays
	// while the sandbox runs from it.
	waitFor(t, 2*time.Second, "older pause snapshots collected", func() bool { return len(e.snapshotDirs(t)) == 1 })
}

func TestPauseToDisk(t *testing.T) {
	e := newSnapEnv(t, isolation.MemorySnapshot, func(c *Config) { c.PauseInRAM = 300 * time.Millisecond })
	ctx := context.Background()
	sb := e.create(t, CreateRequest{AutoResume: true})
	first := e.fake.Instance(sb.ID)
	if err := e.m.Pause(ctx, sb.ID, true); err != nil {
		t.Fatal(err)
	}
	if r := e.record(t, sb.ID); r.PausedAs != store.PausedInRAM || !first.Paused() {
		t.Fatalf("first in RAM: %+v", r)
	}
	waitFor(t, 3*time.Second, "moved to disk", func() bool { return e.record(t, sb.ID).PausedAs == store.PausedOnDisk })
	if !first.Stopped() {
		t.Error("the instance runs on after the move to disk")
	}
	if !e.m.Asleep(sb.ID) {
		t.Error("paused to disk with autoResume is not asleep")
	}
	if err := e.m.Wake(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	r := e.record(t, sb.ID)
	again := e.fake.Instance(sb.ID)
	if _, kind, _ := again.SnapshotSource(); kind != isolation.MemorySnapshot || r.State != store.StateRunning || r.Reboots != 0 ||
		r.ResumedBy != ResumedByTraffic || time.Until(r.EndAt) < 4*time.Minute {
		t.Errorf("woken: %+v, restored as %v", r, kind)
	}

	// onResume 'reboot' of one paused in RAM: its files alone.
	if err := e.m.Pause(ctx, sb.ID, true); err != nil {
		t.Fatal(err)
	}
	got, _, err := e.m.Connect(ctx, sb.ID, time.Minute, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, kind, _ := e.fake.Instance(sb.ID).SnapshotSource(); kind != isolation.FilesSnapshot || got.Reboots != 1 {
		t.Errorf("reboot: started as %v, %+v", kind, got)
	}
}

func TestPauseWithoutFreezer(t *testing.T) {
	dir := t.TempDir()
	e := newEnvOn(t, isolation.NewFakeNamed("fake", isolation.Capabilities{Snapshot: isolation.MemorySnapshot}), func(c *Config) { c.SnapshotDir = dir })
	sb := e.create(t, CreateRequest{})
	if err := e.m.Pause(context.Background(), sb.ID, true); err != nil {
		t.Fatal(err)
	}
	if r := e.record(t, sb.ID); r.PausedAs != store.PausedOnDisk {
		t.Errorf("a backend that only saves memory paused to %q", r.PausedAs)
	}
}

func TestAutoResume(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	awake := e.create(t, CreateRequest{AutoPause: true, AutoResume: true, Timeout: time.Hour})
	plain := e.create(t, CreateRequest{})
	if e.m.Asleep(awake.ID) {
		t.Error("a running sandbox is asleep")
	}
	for _, id := range []string{awake.ID, plain.ID} {
		if err := e.m.Pause(ctx, id, true); err != nil {
			t.Fatal(err)
		}
	}
	if !e.m.Asleep(awake.ID) || e.m.Asleep(plain.ID) || e.m.Asleep("inope") {
		t.Errorf("asleep: auto-resume %v, plain %v", e.m.Asleep(awake.ID), e.m.Asleep(plain.ID))
	}
	if err := e.m.Wake(ctx, plain.ID); err != nil {
		t.Fatal(err)
	}
	if r := e.record(t, plain.ID); r.State != store.StatePaused {
		t.Error("traffic woke a sandbox without autoResume")
	}
	if err := e.m.Wake(ctx, awake.ID); err != nil {
		t.Fatal(err)
	}
	r := e.record(t, awake.ID)
	if r.State != store.StateRunning || r.ResumedBy != ResumedByTraffic || e.fake.Instance(awake.ID).Paused() || time.Until(r.EndAt) < 59*time.Minute {
		t.Errorf("woken: %+v", r)
	}
}

func TestLifecyclePolicy(t *testing.T) {
	e := newEnv(t, nil)
	for _, tc := range []struct {
		name string
		req  CreateRequest
		msg  string
	}{
		{"files without autoPause", CreateRequest{AutoPauseFiles: true}, "autoPauseMemory=false only applies when autoPause is true."},
		{"files with autoResume", CreateRequest{AutoPause: true, AutoPauseFiles: true, AutoResume: true}, "cannot be combined with autoResume"},
		{"files on a backend without snapshots", CreateRequest{AutoPause: true, AutoPauseFiles: true}, "the fake backend cannot save"},
	} {
		tc.req.Template, tc.req.Timeout = "base", time.Minute
		if _, err := e.m.Create(context.Background(), tc.req); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.msg)
		}
	}
	sb := e.create(t, CreateRequest{})
	if err := e.m.Pause(context.Background(), sb.ID, false); !errors.Is(err, ErrInvalid) {
		t.Errorf("a files-only pause without snapshots: %v", err)
	}
}

func TestAutoPauseFilesOnly(t *testing.T) {
	e := newSnapEnv(t, isolation.FilesSnapshot, nil)
	sb := e.create(t, CreateRequest{AutoPause: true, AutoPauseFiles: true, Timeout: time.Hour})
	if err := e.m.SetTimeout(context.Background(), sb.ID, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 3*time.Second, "paused on timeout", func() bool { return e.record(t, sb.ID).State == store.StatePaused })
	if r := e.record(t, sb.ID); r.PausedAs != store.PausedFiles {
		t.Errorf("paused as %q, want files", r.PausedAs)
	}
}
