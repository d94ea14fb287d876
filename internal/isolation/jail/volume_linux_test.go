package jail

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
)

// TestVolumes mounts one host directory into two sandboxes: what one
// writes, as its user, the other reads and may change, and the host sees
// it with the ids the sandboxes see, whatever their user namespaces.
func TestVolumes(t *testing.T) {
	b := newTestBackend(t, nil)
	vol := t.TempDir()
	if err := os.Chmod(vol, 0o777); err != nil {
		t.Fatal(err)
	}
	start := func() *Instance {
		spec := testSpec(t, isolation.Resources{})
		spec.Volumes = []isolation.VolumeMount{{Source: vol, Target: "/mnt/data"}}
		return startSandbox(t, b, spec)
	}
	a, c := start(), start()
	if r := run(t, a, "user", "/bin/sh", "-c", "echo from-a > /mnt/data/f && mkdir /mnt/data/d"); r.exit != 0 {
		t.Fatalf("writing as user: %d %s", r.exit, r.stderr)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(vol, "f"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid != 1000 || st.Gid != 1000 {
		t.Errorf("the host sees the file owned by %d:%d, want 1000:1000", st.Uid, st.Gid)
	}
	if got := sh(t, c, "cat /mnt/data/f; stat -c %U /mnt/data/f"); got != "from-a\nuser\n" {
		t.Errorf("the other sandbox reads %q", got)
	}
	if r := run(t, c, "user", "/bin/sh", "-c", "echo from-c >> /mnt/data/f && rm -r /mnt/data/d"); r.exit != 0 {
		t.Errorf("the other sandbox's user cannot change it: %d %s", r.exit, r.stderr)
	}
	// A setuid-root program on a volume raises nobody (the template's
	// does: the positive control).
	id, err := os.ReadFile(filepath.Join(testRootfs(t), "usr/bin/suid-id"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(vol, "id"), id, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(vol, "id"), os.ModeSetuid|0o755); err != nil {
		t.Fatal(err)
	}
	if r := run(t, c, "user", "/usr/bin/suid-id", "-u"); r.stdout != "0\n" {
		t.Fatalf("positive control: the template's setuid id as user says %q %q", r.stdout, r.stderr)
	}
	if r := run(t, c, "user", "/mnt/data/id", "-u"); r.stdout != "1000\n" {
		t.Errorf("a setuid binary on a volume, run as user: %q %q; want 1000", r.stdout, r.stderr)
	}
}
