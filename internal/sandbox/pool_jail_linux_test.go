package sandbox

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation/jail"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/jail/jailtest"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
)

// jailConfig returns a manager config over a real jail backend with a
// small template "tiny", its backend and its store, all removed when t
// ends; mod, if not nil, changes the backend's config. It needs root.
func jailConfig(t *testing.T, mod func(*jail.Config)) (Config, *jail.Backend, *store.Store) {
	t.Helper()
	testenv.RequireRoot(t)
	dir := t.TempDir()
	rootfs := filepath.Join(dir, "rootfs")
	if err := jailtest.BuildRootfs(rootfs); err != nil {
		t.Fatalf("building rootfs: %v", err)
	}
	envdPath := testEnvd(t, dir)

	runDir := filepath.Join(dir, "run")
	cgParent := fmt.Sprintf("agent-sandbox-sbtest-%d", os.Getpid())
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	jcfg := jail.Config{
		StateDir:     filepath.Join(dir, "sandboxes"),
		RunDir:       runDir,
		CgroupParent: cgParent,
		Log:          log,
	}
	if mod != nil {
		mod(&jcfg)
	}
	backend, err := jail.New(jcfg)
	if err != nil {
		t.Fatal(err)
	}
	jailtest.CleanupRunDir(t, runDir, cgParent)
	st, err := store.Open(context.Background(), filepath.Join(dir, "db.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return Config{
		Store:   st,
		Backend: backend,
		Templates: fakeTemplates{"tiny": {
			Name: "tiny", ID: "tiny-000000000000", RootFS: rootfs, User: "user", Workdir: "/home/user",
		}},
		EnvdPath: envdPath,
		Log:      log,
		DiskDir:  filepath.Join(dir, "sandboxes"),
	}, backend, st
}

// TestJailPool hands out real pooled sandboxes: the first user's files,
// processes and env are not in the next pooled sandbox, every member has
// its own ID as hostname, and Close leaves no member behind.
func TestJailPool(t *testing.T) {
	ctx := context.Background()
	cfg, backend, _ := jailConfig(t, nil)
	cfg.WarmPools = map[string]PoolSize{"tiny": {Min: 2, Max: 2}}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	waitFor(t, 30*time.Second, "pool filled", func() bool { return m.Pools()["tiny"].Ready == 2 })

	create := func(env map[string]string) store.Sandbox {
		t0 := time.Now()
		sb, err := m.Create(ctx, CreateRequest{Template: "tiny", Timeout: time.Minute, Secure: true, EnvVars: env})
		if err != nil {
			t.Fatalf("Create: %v", err)
		}
		t.Logf("pooled Create took %v", time.Since(t0))
		t.Cleanup(func() { _ = backend.Cleanup(context.Background(), sb.ID, nil) })
		return sb
	}
	a := create(map[string]string{"SECRET": "a"})
	if out, code := runIn(t, m, a, "/bin/sh", "-c", `echo secret > /home/user/a.txt && echo secret > /tmp/a.txt && (sleep 3600 &) && uname -n && echo "$SECRET"`); code != 0 || out != a.ID+"\na\n" {
		t.Fatalf("user A's command: exit %d, output %q", code, out)
	}
	b := create(nil)
	if b.ID == a.ID {
		t.Fatal("the same sandbox handed out twice")
	}
	out, code := runIn(t, m, b, "/bin/sh", "-c", `uname -n; echo "SECRET=$SECRET"; for f in /home/user/a.txt /tmp/a.txt; do test -e $f && echo "$f exists"; done; ps -eo comm | grep -c sleep`)
	if want := b.ID + "\nSECRET=\n0\n"; code != 1 || out != want {
		t.Errorf("user B sees: exit %d, output %q; want %q (no files, env or processes of A)", code, out, want)
	}

	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	ids, err := backend.Leftovers(map[string]bool{a.ID: true, b.ID: true})
	if err != nil || len(ids) != 0 {
		t.Errorf("after Close, sandboxes other than the two handed out: %v, %v", ids, err)
	}
}
