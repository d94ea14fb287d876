package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/template"
)

// TestRunStep runs build steps in real jail sandboxes: their changes come
// back as a plain overlayfs upper with the image's own ids (whiteouts,
// opaque directories, hard links, nothing the backend placed), later steps
// run over earlier ones as the user asked, a step is stopped at its
// timeout, and no step sandbox is left behind, also after a crash.
// stepTestResources are the quotas of the step sandboxes the test starts
// on the backend itself, as RunStep would.
var stepTestResources = isolation.Resources{CPUCount: DefaultStepCPU, MemoryMB: 256, DiskSizeMB: 256}

func TestRunStep(t *testing.T) {
	ctx := context.Background()
	cfg, backend, _ := jailConfig(t, nil)
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	rootfs := cfg.Templates.(fakeTemplates)["tiny"].RootFS
	dir := t.TempDir()
	run := func(name string, s template.StepSpec) ([]string, int, error) {
		t.Helper()
		s.Upper = filepath.Join(dir, name)
		if err := os.Mkdir(s.Upper, 0o755); err != nil {
			t.Fatal(err)
		}
		var out []string
		s.Output = func(l string) { out = append(out, l) }
		s.Env = []string{"PATH=/usr/bin:/bin", "HOME=/root", "STEP=" + name}
		code, err := m.RunStep(ctx, s)
		t.Logf("step %s: exit %d, err %v, output %q", name, code, err, out)
		return out, code, err
	}

	// As root: a file, a hard link, a deletion, a replaced directory.
	_, code, err := run("a", template.StepSpec{
		Layers: []string{rootfs}, Dir: "/",
		Args: []string{"/bin/sh", "-c", `echo a > /a && ln /a /a2 && rm /etc/hosts && rm -rf /var && mkdir -p /var/x && echo "$STEP" > /var/x/f`},
	})
	if err != nil || code != 0 {
		t.Fatalf("step a: exit %d, %v", code, err)
	}
	upper := filepath.Join(dir, "a")
	checkEntry(t, upper, "a", 0, "a\n")
	var st1, st2 unix.Stat_t
	if unix.Lstat(filepath.Join(upper, "a"), &st1) != nil || unix.Lstat(filepath.Join(upper, "a2"), &st2) != nil || st1.Ino != st2.Ino {
		t.Error("the hard link a2 of a did not come back as one")
	}
	if err := unix.Lstat(filepath.Join(upper, "etc/hosts"), &st1); err != nil || st1.Mode&unix.S_IFMT != unix.S_IFCHR || st1.Rdev != 0 {
		t.Errorf("/etc/hosts deleted: want a whiteout in the upper, got mode %o rdev %d (%v)", st1.Mode, st1.Rdev, err)
	}
	buf := make([]byte, 1)
	if n, err := unix.Lgetxattr(filepath.Join(upper, "var"), "trusted.overlay.opaque", buf); err != nil || n != 1 || buf[0] != 'y' {
		t.Errorf("/var replaced: want an opaque directory, got %q, %v", buf[:max(n, 0)], err)
	}
	checkEntry(t, upper, "var/x/f", 0, "a\n")
	for _, p := range []string{"usr/bin/envd", "proc/1"} {
		if _, err := os.Lstat(filepath.Join(upper, p)); err == nil {
			t.Errorf("/%s is in the step's changes: the backend put it there", p)
		}
	}

	// Over a: as user 1000 in a working directory that does not exist yet;
	// and as a uid with no passwd entry.
	out, code, err := run("b", template.StepSpec{
		Layers: []string{upper, rootfs}, Dir: "/home/user/new", UID: 1000, GID: 1000,
		Args: []string{"/bin/sh", "-c", `cat /a && id -u && id -g && pwd && echo "$STEP" > out && test ! -e /etc/hosts`},
	})
	if err != nil || code != 0 || !slices.Equal(out, []string{"a", "1000", "1000", "/home/user/new"}) {
		t.Errorf("step b: exit %d, %v, output %q; want a, 1000, 1000, /home/user/new", code, err, out)
	}
	checkEntry(t, filepath.Join(dir, "b"), "home/user/new/out", 1000, "b\n")
	out, code, err = run("c", template.StepSpec{
		Layers: []string{rootfs}, Dir: "/", UID: 4242, GID: 0, Groups: []uint32{5},
		Args: []string{"/bin/sh", "-c", `id -u; id -G; exit 7`},
	})
	if err != nil || code != 7 || !slices.Equal(out, []string{"4242", "0 5"}) {
		t.Errorf("step c: exit %d, %v, output %q; want exit 7 after 4242 and 0 5", code, err, out)
	}

	// Stopped at its timeout, with everything it started.
	t0 := time.Now()
	_, _, err = run("d", template.StepSpec{
		Layers: []string{rootfs}, Dir: "/", Timeout: 2 * time.Second,
		Args: []string{"/bin/sh", "-c", "sleep 60 & sleep 60"},
	})
	if !errors.Is(err, template.ErrStepTimeout) || time.Since(t0) > 20*time.Second {
		t.Errorf("step d: %v after %s, want ErrStepTimeout soon after 2s", err, time.Since(t0))
	}

	// reconcile leaves a running step alone.
	done := make(chan error, 1)
	go func() {
		_, code, err := run("e", template.StepSpec{Layers: []string{rootfs}, Dir: "/", Args: []string{"/bin/sh", "-c", "sleep 3"}})
		if err == nil && code != 0 {
			err = errors.New("exit " + string(rune('0'+code)))
		}
		done <- err
	}()
	waitFor(t, 20*time.Second, "step running", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return len(m.steps) == 1
	})
	if err := m.reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Errorf("a step running while reconcile ran: %v", err)
	}
	if ids, _ := backend.Leftovers(nil); len(ids) != 0 {
		t.Errorf("step sandboxes left: %v", ids)
	}

	// One a crash left behind is a leftover the next server cleans up.
	crashed := stepPrefix + "crashed"
	if _, err := backend.Start(ctx, isolation.Spec{ID: crashed, RootFS: rootfs, EnvdPath: cfg.EnvdPath, Export: filepath.Join(dir, "crashed"), Resources: stepTestResources}); err == nil {
		t.Fatal("Start with an export directory that does not exist succeeded")
	}
	if err := os.Mkdir(filepath.Join(dir, "crashed"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := backend.Start(ctx, isolation.Spec{ID: crashed, RootFS: rootfs, EnvdPath: cfg.EnvdPath, Export: filepath.Join(dir, "crashed"), Resources: stepTestResources}); err != nil {
		t.Fatal(err)
	}
	m2, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	if ids, _ := backend.Leftovers(nil); slices.Contains(ids, crashed) {
		t.Errorf("a crashed step sandbox survived reconcile: %v", ids)
	}
	if mi, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mi), crashed) {
		t.Error("mounts of the crashed step sandbox left")
	}
}

// checkEntry checks that the file name under root has uid and content.
func checkEntry(t *testing.T, root, name string, uid uint32, content string) {
	t.Helper()
	fi, err := os.Lstat(filepath.Join(root, name))
	if err != nil {
		t.Errorf("/%s: %v", name, err)
		return
	}
	if got := fi.Sys().(*syscall.Stat_t).Uid; got != uid {
		t.Errorf("/%s: owned by %d, want %d", name, got, uid)
	}
	if b, _ := os.ReadFile(filepath.Join(root, name)); string(b) != content {
		t.Errorf("/%s = %q, want %q", name, b, content)
	}
}
