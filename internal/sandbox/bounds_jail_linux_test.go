package sandbox

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agent-sandbox/agent-sandbox/internal/store"
)

// TestJailDiskReserve creates real jail sandboxes on a small file system
// (a 160 MiB tmpfs under the sandbox directory) whose free space the test
// takes away: with room a create works, with less free than the reserve
// plus the sandbox's disk it is refused before anything is made, and
// with room again it works.
func TestJailDiskReserve(t *testing.T) {
	ctx := context.Background()
	cfg, backend, st := jailConfig(t, nil)
	if err := unix.Mount("tmpfs", cfg.DiskDir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=160m,mode=0700"); err != nil {
		t.Fatalf("mounting a tmpfs for the sandboxes: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(cfg.DiskDir, unix.MNT_DETACH) })
	cfg.DefaultDisk, cfg.DiskReserve = 64, DiskReserve{Bytes: 16 << 20}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	create := func() (store.Sandbox, error) {
		sb, err := m.Create(ctx, CreateRequest{Template: "tiny", Timeout: time.Minute, Secure: true})
		if err == nil {
			t.Cleanup(func() { _ = backend.Cleanup(context.Background(), sb.ID, nil) })
		}
		return sb, err
	}
	live := func() int {
		t.Helper()
		list, _, err := m.List(ctx, store.ListQuery{})
		if err != nil {
			t.Fatal(err)
		}
		return len(list)
	}

	// The positive control: 160 MiB free, 64 MiB disk and 16 MiB reserve.
	sb, err := create()
	if err != nil {
		t.Fatalf("create with room: %v", err)
	}
	if out, code := runIn(t, m, sb, "/bin/sh", "-c", "echo ok > /tmp/f && cat /tmp/f"); code != 0 || out != "ok\n" {
		t.Fatalf("sandbox on the tmpfs: exit %d, %q", code, out)
	}

	// Take all but 48 MiB: less than 16 + 64 MiB.
	var fs unix.Statfs_t
	if err := unix.Statfs(cfg.DiskDir, &fs); err != nil {
		t.Fatal(err)
	}
	free := int64(fs.Bavail) * int64(fs.Bsize)
	filler := filepath.Join(cfg.DiskDir, "filler")
	if err := os.WriteFile(filler, make([]byte, free-48<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	running := live()
	if _, err := create(); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("create with 48 MiB free = %v, want ErrNoSpace", err)
	} else {
		t.Log(err)
	}
	if n := live(); n != running {
		t.Errorf("%d sandboxes after the refused create, want %d", n, running)
	}
	if recs, _ := st.ListSandboxesByState(ctx, "starting", "error"); len(recs) != 0 {
		t.Errorf("the refused create left records: %+v", recs)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if _, err := create(); err != nil {
		t.Fatalf("create once the disk has room again: %v", err)
	}
}

// TestJailPausedRetention pauses a real jail sandbox (its cgroup frozen)
// and checks that after the retention it is gone from the host, recorded
// killed with the reason, while a running neighbour is untouched.
func TestJailPausedRetention(t *testing.T) {
	ctx := context.Background()
	cfg, backend, st := jailConfig(t, nil)
	cfg.PausedRetention = 2 * time.Second
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var sbs []store.Sandbox
	for range 2 {
		sb, err := m.Create(ctx, CreateRequest{Template: "tiny", Timeout: time.Minute, Secure: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = backend.Cleanup(context.Background(), sb.ID, nil) })
		sbs = append(sbs, sb)
	}
	paused, neighbour := sbs[0], sbs[1]
	if err := m.Pause(ctx, paused.ID, true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "paused sandbox removed", func() bool {
		r, err := st.GetSandbox(ctx, paused.ID)
		return err == nil && r.State == store.StateKilled
	})
	if r, _ := st.GetSandbox(ctx, paused.ID); r.Reason != "paused for longer than the retention of 2s" {
		t.Errorf("reason %q", r.Reason)
	}
	// The record is written before the sandbox is stopped.
	waitFor(t, 10*time.Second, "removed sandbox gone from the host", func() bool {
		ids, err := backend.Leftovers(nil)
		mi, _ := os.ReadFile("/proc/self/mountinfo")
		return err == nil && !slices.Contains(ids, paused.ID) && !bytes.Contains(mi, []byte(paused.ID))
	})
	if ids, _ := backend.Leftovers(nil); !slices.Contains(ids, neighbour.ID) {
		t.Errorf("Leftovers %v lacks the running neighbour %s: the probe sees nothing", ids, neighbour.ID)
	}
	if out, code := runIn(t, m, neighbour, "/bin/echo", "alive"); code != 0 || out != "alive\n" {
		t.Errorf("running neighbour: exit %d, %q", code, out)
	}
}
