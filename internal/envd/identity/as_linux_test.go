package identity

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
)

// TestAs: what runs in As has nobody's permissions, and no thread keeps
// them afterwards: files envd creates outside As, on any thread, while As
// calls run beside them, are still root's. Both ways of setting a
// thread's ids are tried: file system ids (Linux) and effective ids (what
// As does under gVisor's kernel, which has no setfsuid).
func TestAs(t *testing.T) {
	testenv.RequireRoot(t)
	for _, fsIDs := range []bool{true, false} {
		t.Run(fmt.Sprintf("fsids=%v", fsIDs), func(t *testing.T) {
			if fsIDs != haveFSIDs() {
				saved := haveFSIDs
				haveFSIDs = func() bool { return fsIDs }
				t.Cleanup(func() { haveFSIDs = saved })
			}
			testAs(t)
		})
	}
}

func testAs(t *testing.T) {
	nobody, err := Lookup("nobody")
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "identity-as-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("root only"), 0o600); err != nil {
		t.Fatal(err)
	}

	// Root reads it (the positive control); nobody may not.
	if _, err := os.ReadFile(secret); err != nil {
		t.Fatalf("control: root reading %s: %v", secret, err)
	}
	err = nobody.As(func() error { _, err := os.ReadFile(secret); return err })
	if !errors.Is(err, fs.ErrPermission) {
		t.Errorf("nobody reading a root 0600 file: %v, want a permission error", err)
	}

	var wg sync.WaitGroup
	errs := make(chan error, 400)
	for i := range 200 {
		wg.Go(func() {
			p := filepath.Join(dir, fmt.Sprintf("nobody-%d", i))
			if err := nobody.As(func() error { return os.WriteFile(p, nil, 0o644) }); err != nil {
				errs <- err
			}
		})
		wg.Go(func() {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("root-%d", i)), nil, 0o644); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i := range 200 {
		for name, want := range map[string]uint32{fmt.Sprintf("nobody-%d", i): nobody.UID, fmt.Sprintf("root-%d", i): 0} {
			fi, err := os.Stat(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			if got := statUID(t, fi); got != want {
				t.Errorf("%s belongs to %d, want %d", name, got, want)
			}
		}
	}
}
