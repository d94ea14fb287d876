package volume

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
)

// TestImageStorage makes a volume image, mounts it, fills it past its
// size (the cap holds), finds the mount again as a restarted server would,
// and removes everything.
func TestImageStorage(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	s := &ImageStorage{Dir: filepath.Join(dir, "images"), MountDir: filepath.Join(dir, "mnt")}
	ctx := context.Background()
	const id = "0b6a2f5e-0000-4000-8000-000000000001"
	if err := s.Create(ctx, id, 16<<20); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Remove(ctx, id) })
	p, err := s.Path(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil || fi.Mode().Perm() != 0o777 {
		t.Errorf("the volume's root: %v, %v", fi, err)
	}
	if entries, _ := os.ReadDir(p); len(entries) != 0 {
		t.Errorf("a new volume holds %v", entries)
	}
	root, err := os.OpenRoot(p)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if _, err := WriteFile(root, "/big", bytes.NewReader(make([]byte, 32<<20)), Attrs{}, false); !errors.Is(err, ErrFull) {
		t.Errorf("writing 32 MiB into 16: %v, want ErrFull", err)
	}
	if _, err := root.Stat("big"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed write left the file: %v", err)
	}
	if _, err := WriteFile(root, "/small", bytes.NewReader([]byte("kept")), Attrs{}, false); err != nil {
		t.Fatal(err)
	}
	// Another ImageStorage (a restarted server) finds it mounted.
	again := &ImageStorage{Dir: s.Dir, MountDir: s.MountDir}
	if p2, err := again.Path(ctx, id); err != nil || p2 != p {
		t.Errorf("Path after a restart: %q, %v", p2, err)
	}
	if ids, err := s.List(ctx); err != nil || len(ids) != 1 || ids[0] != id {
		t.Errorf("List = %v, %v", ids, err)
	}
	if err := s.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	if mounted, _ := isMountPoint(p); mounted {
		t.Error("still mounted after Remove")
	}
	if _, err := os.Stat(s.image(id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("image left: %v", err)
	}
}
