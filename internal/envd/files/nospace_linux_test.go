package files

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
)

func TestUploadNoSpace(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=64k"); err != nil {
		t.Fatalf("mounting a small tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmounting %s: %v", dir, err)
		}
	})
	path := filepath.Join(dir, "big.bin")
	w := serve(newHandler(t, ""), "POST", query("path", path), octet(), bytes.NewReader(make([]byte, 1<<20)))
	checkError(t, w, 507, "not enough disk space to write '"+path+"': write "+path+": no space left on device")
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("partial %s left behind (stat err %v)", path, err)
	}
}
