package jail

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
)

// TestSnapshot snapshots a running sandbox and starts others from it: they
// have its files as they were at that instant (a file rewritten all the
// while by one write(2) at a time is whole), boot afresh (their own boot
// id), diverge from it and from each other, and a snapshot of one of them
// stands alone once the snapshot it started from is gone.
func TestSnapshot(t *testing.T) {
	b := newTestBackend(t, nil)
	if got := b.Capabilities().Snapshot; got != isolation.FilesSnapshot {
		t.Fatalf("Capabilities().Snapshot = %v, want files", got)
	}
	ctx := context.Background()
	parent := startSandbox(t, b, testSpec(t, isolation.Resources{}))
	sh(t, parent, "echo one > /root/a.txt && mkdir -p /home/user/d/e && echo deep > /home/user/d/e/f && "+
		"chown -R user:user /home/user/d && rm /etc/hosts && ln -s a.txt /root/link")
	sh(t, parent, "/usr/bin/probe socket /root/sock && test -S /root/sock")
	sh(t, parent, "/usr/bin/probe pattern /root/pattern >/dev/null 2>&1 &")
	time.Sleep(100 * time.Millisecond)
	parentBoot := sh(t, parent, "cat "+bootIDPath)

	snap1 := filepath.Join(t.TempDir(), "snap1")
	if err := os.Mkdir(snap1, 0o700); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if err := parent.Snapshot(ctx, snap1, isolation.FilesSnapshot); err != nil {
		t.Fatal(err)
	}
	t.Logf("snapshot took %v", time.Since(t0))
	if err := parent.Snapshot(ctx, t.TempDir(), isolation.MemorySnapshot); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("memory snapshot: got %v, want ErrUnsupported", err)
	}
	// The parent runs on and changes after the snapshot.
	sh(t, parent, "echo two > /root/a.txt && echo later > /root/later")

	spec := testSpec(t, isolation.Resources{})
	spec.Snapshot = &isolation.SnapshotSource{Dir: snap1, Kind: isolation.FilesSnapshot}
	child := startSandbox(t, b, spec)
	if got := sh(t, child, "cat /root/a.txt /home/user/d/e/f; stat -c %U /home/user/d/e/f; stat -c %N /root/link"); got != "one\ndeep\nuser\n'/root/link' -> 'a.txt'\n" {
		t.Errorf("child reads %q", got)
	}
	if r := run(t, child, "root", "/bin/sh", "-c", "test -e /etc/hosts || test -e /root/later || test -e /root/sock"); r.exit == 0 {
		t.Error("the child has /etc/hosts (deleted before the snapshot), /root/later (made after) or the socket")
	}
	if got := sh(t, child, "ps -e -o comm | grep -c probe || true"); strings.TrimSpace(got) != "0" {
		t.Errorf("the child runs the parent's processes: %s", got)
	}
	pattern := sh(t, child, "head -c 1048576 /root/pattern | tr -d \"$(head -c 1 /root/pattern)\" | wc -c")
	if strings.TrimSpace(pattern) != "0" {
		t.Errorf("the copy of a file being rewritten mixes %s bytes of another write", strings.TrimSpace(pattern))
	}
	childBoot := sh(t, child, "cat "+bootIDPath)
	if childBoot == parentBoot || len(strings.TrimSpace(childBoot)) != 36 {
		t.Errorf("boot ids: parent %q, child %q", parentBoot, childBoot)
	}
	if r := run(t, child, "root", "/bin/sh", "-c", "echo x > "+bootIDPath); r.exit == 0 {
		t.Error("root in the sandbox rewrote its boot id")
	}
	if mi := sh(t, child, "grep boot_id /proc/self/mountinfo"); strings.Contains(mi, b.cfg.StateDir) || !strings.Contains(mi, " /boot_id "+bootIDPath+" ") {
		t.Errorf("the boot id's mount names a host path, or is not of its own tmpfs: %s", mi)
	}
	sh(t, child, "echo child > /root/a.txt && echo mine > /root/child")
	if got := sh(t, parent, "cat /root/a.txt; test -e /root/child || echo none"); got != "two\nnone\n" {
		t.Errorf("the parent sees %q after the child wrote", got)
	}

	t.Run("paused", func(t *testing.T) {
		if err := child.Pause(ctx); err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		if err := child.Snapshot(ctx, dir, isolation.FilesSnapshot); err != nil {
			t.Fatal(err)
		}
		if frozen, _ := child.cg.Frozen(); !frozen {
			t.Error("a paused sandbox runs again after a snapshot")
		}
		if err := child.Resume(ctx); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("chained", func(t *testing.T) {
		snap2 := filepath.Join(t.TempDir(), "snap2")
		if err := os.Mkdir(snap2, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := child.Snapshot(ctx, snap2, isolation.FilesSnapshot); err != nil {
			t.Fatal(err)
		}
		// The grandchildren need nothing of the first snapshot.
		if err := os.Rename(snap1, snap1+".gone"); err != nil {
			t.Fatal(err)
		}
		defer os.Rename(snap1+".gone", snap1)
		var wg sync.WaitGroup
		kids := make([]*Instance, 3)
		t0 := time.Now()
		for i := range kids {
			spec := testSpec(t, isolation.Resources{})
			spec.Snapshot = &isolation.SnapshotSource{Dir: snap2, Kind: isolation.FilesSnapshot}
			wg.Add(1)
			go func() {
				defer wg.Done()
				inst, err := b.Start(ctx, spec)
				if err != nil {
					t.Error(err)
					return
				}
				t.Cleanup(func() { inst.Stop(context.Background()) })
				if err := isolation.WaitEnvd(ctx, inst); err != nil {
					t.Error(err)
				}
				kids[i] = inst.(*Instance)
			}()
		}
		wg.Wait()
		t.Logf("%d sandboxes from one snapshot, in parallel: %v", len(kids), time.Since(t0))
		if t.Failed() {
			return
		}
		for i, k := range kids {
			if got := sh(t, k, "cat /root/a.txt /root/child /home/user/d/e/f"); got != "child\nmine\ndeep\n" {
				t.Errorf("grandchild %d reads %q", i, got)
			}
		}
		sh(t, kids[0], "echo zero > /root/child")
		if got := sh(t, kids[1], "cat /root/child"); got != "mine\n" {
			t.Errorf("a sibling sees %q", got)
		}
	})
}
