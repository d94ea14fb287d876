package dockerfile

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agent-sandbox/agent-sandbox/internal/template"
)

// writeTree creates files (name: content; a name ending in "/" is a
// directory) under dir.
func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if strings.HasSuffix(name, "/") {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// entries lists the archive's entries as name: content ("" for
// directories), with owners checked to be left out.
func entries(t *testing.T, archive string) map[string]string {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := map[string]string{}
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return got
		} else if err != nil {
			t.Fatal(err)
		}
		if hdr.Uid != 0 || hdr.Gid != 0 || hdr.Uname != "" || hdr.Gname != "" {
			t.Errorf("%s: owner %d:%d %q:%q recorded", hdr.Name, hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		got[hdr.Name] = string(data)
	}
}

func TestPack(t *testing.T) {
	ctxDir, out := t.TempDir(), t.TempDir()
	writeTree(t, ctxDir, map[string]string{
		"app/main.py": "print(1)\n", "app/lib/util.py": "x = 1\n", "a.txt": "A\n", "b.txt": "B\n", "c.md": "C\n",
	})
	h, err := Pack(ctxDir, []string{"app", "*.txt"}, out)
	if err != nil {
		t.Fatal(err)
	}
	if !template.ValidFilesHash(h) {
		t.Fatalf("hash %q is not a hex SHA-256", h)
	}
	want := map[string]string{
		"app/": "", "app/main.py": "print(1)\n", "app/lib/": "", "app/lib/util.py": "x = 1\n", "a.txt": "A\n", "b.txt": "B\n",
	}
	if diff := cmp.Diff(want, entries(t, filepath.Join(out, h+".tar"))); diff != "" {
		t.Errorf("archive (-want +got):\n%s", diff)
	}

	// The same files give the same archive: a COPY stays cached.
	if again, err := Pack(ctxDir, []string{"*.txt", "app"}, out); err != nil || again != h {
		t.Errorf("packing again = %s, %v; want %s", again, err, h)
	}
	// A changed file gives another.
	writeTree(t, ctxDir, map[string]string{"app/lib/util.py": "x = 2\n"})
	if changed, err := Pack(ctxDir, []string{"app", "*.txt"}, out); err != nil || changed == h {
		t.Errorf("packing a changed file = %s, %v; want a new hash", changed, err)
	}
	if leftovers, _ := filepath.Glob(filepath.Join(out, ".pack-*")); len(leftovers) != 0 {
		t.Errorf("temporary files left: %v", leftovers)
	}
}

func TestPackErrors(t *testing.T) {
	ctxDir := t.TempDir()
	writeTree(t, ctxDir, map[string]string{"a.txt": "A\n"})
	if err := os.Symlink("/etc", filepath.Join(ctxDir, "escape")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, src, wantErr string
	}{
		{"missing file", "nope.txt", "COPY nope.txt: no such file in the build context"},
		{"glob without match", "*.go", "COPY *.go: no file in the build context matches"},
		{"outside", "../x", "COPY ../x: outside the build context"},
		{"absolute", "/etc/passwd", "outside the build context"},
		{"through a symlink out of the context", "escape/passwd", "path escapes from parent"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Pack(ctxDir, []string{tt.src}, t.TempDir())
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Pack(%s) = %v, want an error with %q", tt.src, err, tt.wantErr)
			}
		})
	}
}

// TestPacker checks that the archives land where the builder's COPY
// looks for them.
func TestPacker(t *testing.T) {
	ctxDir := t.TempDir()
	writeTree(t, ctxDir, map[string]string{"a.txt": "A\n"})
	b := &template.Builder{DataDir: t.TempDir()}
	h, err := Packer(ctxDir, b)([]string{"a.txt"})
	if err != nil {
		t.Fatal(err)
	}
	if got := entries(t, b.ContextArchive(h)); got["a.txt"] != "A\n" {
		t.Errorf("archive at %s holds %v", b.ContextArchive(h), got)
	}
}
