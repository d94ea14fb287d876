package kernel

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// tree makes files (paths relative to a new temporary dir, ending in / for
// a directory) and returns the dir.
func tree(t *testing.T, files ...string) string {
	t.Helper()
	root := t.TempDir()
	for _, f := range files {
		p := filepath.Join(root, f)
		if strings.HasSuffix(f, "/") {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestOpen(t *testing.T) {
	const v = "6.1.0-57-cloud-amd64"
	for _, tc := range []struct {
		name    string
		files   []string
		modules string // want ModulesDir relative to the version dir
		wantErr string
	}{
		{"debian 12 layout", []string{"boot/vmlinuz-" + v, "boot/config-" + v, "lib/modules/" + v + "/kernel/"}, "lib/modules/" + v, ""},
		{"usr-merged layout", []string{"boot/vmlinuz-" + v, "usr/lib/modules/" + v + "/kernel/"}, "usr/lib/modules/" + v, ""},
		{"no image", []string{"lib/modules/" + v + "/"}, "", "guest kernel not found at CURRENT (no boot/vmlinuz-*): run scripts/install-deps.sh --vm"},
		{"two images", []string{"boot/vmlinuz-" + v, "boot/vmlinuz-6.1.0-58-cloud-amd64", "lib/modules/" + v + "/"}, "", "is ambiguous: 2 images"},
		{"no modules", []string{"boot/vmlinuz-" + v, "lib/modules/6.1.0-58-cloud-amd64/"}, "", "guest kernel " + v + " at CURRENT has no lib/modules/" + v + ": run scripts/install-deps.sh --vm"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// As installed: a version directory and current pointing at it.
			base := t.TempDir()
			versionDir := filepath.Join(base, v)
			if err := os.Rename(tree(t, tc.files...), versionDir); err != nil {
				t.Fatal(err)
			}
			current := filepath.Join(base, "current")
			if err := os.Symlink(v, current); err != nil {
				t.Fatal(err)
			}
			k, err := Open(current)
			if tc.wantErr != "" {
				want := strings.ReplaceAll(tc.wantErr, "CURRENT", current)
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("Open: error %v, want one containing %q", err, want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := &Kernel{
				Dir:        versionDir,
				Version:    v,
				Vmlinuz:    filepath.Join(versionDir, "boot", "vmlinuz-"+v),
				ModulesDir: filepath.Join(versionDir, tc.modules),
			}
			if diff := cmp.Diff(want, k); diff != "" {
				t.Errorf("Open (-want +got):\n%s", diff)
			}
		})
	}
}

// TestOpenMissing is what a host without the kernel installed sees.
func TestOpenMissing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "kernels", "current")
	_, err := Open(dir)
	want := "guest kernel not found at " + dir + ": run scripts/install-deps.sh --vm"
	if err == nil || err.Error() != want {
		t.Fatalf("Open: error %v, want %q", err, want)
	}
}
