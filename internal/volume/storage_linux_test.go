package volume

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agent-sandbox/agent-sandbox/internal/store"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
)

// newVolume makes a volume of 16 MiB in an ImageStorage of its own under
// the test's temporary directory, removed when the test ends, and returns
// the storage, the volume's ID and its mount.
func newVolume(t *testing.T) (*ImageStorage, string, string) {
	t.Helper()
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
	return s, id, p
}

// TestImageStorage makes a volume image, mounts it, fills it past its
// size (the cap holds), finds the mount again as a restarted server would,
// and removes everything.
func TestImageStorage(t *testing.T) {
	s, id, p := newVolume(t)
	ctx := context.Background()
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

// TestImageStorageAttach lends a volume's image to a holder: refused
// while the content API has a file open in it or another mount of it is
// left on the host; then the host lets go of it, Path refuses until the
// holder detaches, and another holder is refused; the files are as they
// were afterwards.
func TestImageStorageAttach(t *testing.T) {
	s, id, p := newVolume(t)
	ctx := context.Background()
	dir := filepath.Dir(s.Dir)
	if err := os.WriteFile(filepath.Join(p, "f"), []byte("before"), 0o644); err != nil {
		t.Fatal(err)
	}

	// A request of the content API in flight: the mount is busy.
	open, err := os.Open(filepath.Join(p, "f"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Attach(ctx, id, "vm1"); !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), "content API") {
		t.Errorf("Attach with a file open: %v, want ErrInUse naming the content API", err)
	}
	open.Close()
	// Another mount of the same file system (a jail's bind mount).
	bind := filepath.Join(dir, "bind")
	if err := os.Mkdir(bind, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(p, bind, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(bind, unix.MNT_DETACH) })
	if _, err := s.Attach(ctx, id, "vm1"); !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), "still mounted") {
		t.Errorf("Attach with another mount left: %v, want ErrInUse", err)
	}
	if _, err := s.Path(ctx, id); err != nil {
		t.Fatalf("Path after a refused Attach: %v", err)
	}
	if err := unix.Unmount(bind, 0); err != nil {
		t.Fatal(err)
	}

	img, err := s.Attach(ctx, id, "vm1")
	if err != nil || img != s.image(id) {
		t.Fatalf("Attach = %q, %v", img, err)
	}
	if mounted, _ := isMountPoint(p); mounted {
		t.Error("the host still mounts an attached volume")
	}
	if _, err := s.Path(ctx, id); !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), "vm1") {
		t.Errorf("Path while attached: %v, want ErrInUse naming the holder", err)
	}
	if again, err := s.Attach(ctx, id, "vm1"); err != nil || again != img {
		t.Errorf("Attach again by the holder: %q, %v", again, err)
	}
	if _, err := s.Attach(ctx, id, "vm2"); !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), "vm1") {
		t.Errorf("Attach by another holder: %v, want ErrInUse naming vm1", err)
	}
	// The loan outlives a restart of the server.
	restarted := &ImageStorage{Dir: s.Dir, MountDir: s.MountDir}
	if got, err := restarted.Attached(ctx); err != nil || len(got) != 1 || got[id] != "vm1" {
		t.Errorf("Attached = %v, %v", got, err)
	}
	if err := restarted.Detach(ctx, id, "vm2"); err != nil {
		t.Errorf("Detach by another holder: %v", err)
	}
	if _, err := restarted.Path(ctx, id); !errors.Is(err, ErrInUse) {
		t.Errorf("Path after another holder's Detach: %v, want ErrInUse", err)
	}
	if err := restarted.Detach(ctx, id, "vm1"); err != nil {
		t.Fatal(err)
	}
	p, err = restarted.Path(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(p, "f")); err != nil || string(b) != "before" {
		t.Errorf("the file after the loan: %q, %v", b, err)
	}
	if got, err := restarted.Attached(ctx); err != nil || len(got) != 0 {
		t.Errorf("Attached after Detach = %v, %v", got, err)
	}
}

// TestSweepRemovesOrphanedMounts: three servers' volumes are mounted in
// one host-wide mount directory, each server with a data directory of its
// own. The data directory of one is deleted under its mounted volume, as
// a test's is after a server killed mid-run; Sweep at this server's start
// unmounts that one, loop device and all, and leaves this server's live
// volume and the other server's (whose image is still there) mounted.
func TestSweepRemovesOrphanedMounts(t *testing.T) {
	testenv.RequireRoot(t)
	ctx := context.Background()
	tmp := t.TempDir()
	mnt := filepath.Join(tmp, "mnt")
	storage := func(dataDir, id string) *ImageStorage {
		s := &ImageStorage{Dir: filepath.Join(tmp, dataDir, "volumes"), MountDir: mnt}
		if err := s.Create(ctx, id, 16<<20); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			s.Remove(ctx, id)
			unix.Unmount(filepath.Join(mnt, id), unix.MNT_DETACH) // the orphan, if the sweep left it
		})
		return s
	}
	const mineID, otherID, orphanID = "0b6a2f5e-0000-4000-8000-00000000000a", "0b6a2f5e-0000-4000-8000-00000000000b", "0b6a2f5e-0000-4000-8000-00000000000c"
	mine := storage("mine", mineID)
	storage("other", otherID)
	orphan := storage("gone", orphanID)
	if err := os.RemoveAll(filepath.Join(tmp, "gone")); err != nil {
		t.Fatal(err)
	}

	st, err := store.Open(ctx, filepath.Join(tmp, "mine", "agent-sandbox.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.CreateVolume(ctx, store.Volume{ID: mineID, Name: "kept", SizeBytes: 16 << 20}); err != nil {
		t.Fatal(err)
	}
	svc, err := New(Config{Records: st, Storage: mine, Size: 16 << 20, KeyFile: filepath.Join(tmp, "mine", "volume-token.key")})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Sweep(ctx); err != nil {
		t.Fatalf("Sweep: %v", err)
	}

	for id, want := range map[string]bool{mineID: true, otherID: true, orphanID: false} {
		if mounted, err := isMountPoint(filepath.Join(mnt, id)); err != nil || mounted != want {
			t.Errorf("volume %s mounted: %v (%v), want %v", id, mounted, err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(mnt, orphanID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the orphan's mount directory: %v, want it removed", err)
	}
	// The loop device goes with the mount (autoclear), and the deleted
	// image's blocks with it.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		loops := loopsBackedBy(t, orphan.image(orphanID))
		if len(loops) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("loop devices %v still hold the orphan's image", loops)
		}
	}
}

// loopsBackedBy returns the loop devices whose backing file is image, or
// was before it was deleted.
func loopsBackedBy(t *testing.T, image string) []string {
	t.Helper()
	files, err := filepath.Glob("/sys/block/loop*/loop/backing_file")
	if err != nil {
		t.Fatal(err)
	}
	var loops []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil && strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), deletedSuffix) == image {
			loops = append(loops, strings.Split(f, "/")[3])
		}
	}
	return loops
}
