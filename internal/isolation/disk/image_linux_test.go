package disk

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
	"golang.org/x/sys/unix"
)

// TestMakerCopiesMkfs checks that an image written from the kept data of
// the first is the same valid, sparse filesystem as one mkfs makes.
func TestMakerCopiesMkfs(t *testing.T) {
	_, err := exec.LookPath("mkfs.ext4")
	testenv.Require(t, err == nil, "test needs mkfs.ext4 (apt-get install e2fsprogs)")
	dir := t.TempDir()
	var d Maker
	const sizeMB = 64
	first, second := filepath.Join(dir, "first.ext4"), filepath.Join(dir, "second.ext4")
	for _, p := range []string{first, second} {
		if err := d.Make(context.Background(), p, sizeMB); err != nil {
			t.Fatalf("making %s: %v", p, err)
		}
	}
	if len(d.bySize[sizeMB]) == 0 {
		t.Fatal("the first image's data was not kept")
	}
	a, err := os.ReadFile(first)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(second)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != sizeMB<<20 || !bytes.Equal(a, b) {
		t.Fatalf("second image (%d bytes) differs from the first (%d bytes)", len(b), len(a))
	}
	exts, err := readSparse(second, maxImageData)
	if err != nil {
		t.Fatal(err)
	}
	data := 0
	for _, x := range exts {
		data += len(x.data)
	}
	if data >= sizeMB<<20/2 {
		t.Errorf("second image holds %d bytes of data: not sparse", data)
	}
	if err := d.Make(context.Background(), second, sizeMB); !errors.Is(err, fs.ErrExist) {
		t.Errorf("making an existing image: got %v, want an error for the existing file", err)
	}
	if fsck, err := exec.LookPath("e2fsck"); err == nil {
		if out, err := exec.Command(fsck, "-f", "-n", second).CombinedOutput(); err != nil {
			t.Errorf("e2fsck of the second image: %v\n%s", err, out)
		}
	}
}

// BenchmarkMake compares an image made by mkfs.ext4 with one written from
// the kept data, at a sandbox's default size.
func BenchmarkMake(b *testing.B) {
	_, err := exec.LookPath("mkfs.ext4")
	testenv.Require(b, err == nil, "benchmark needs mkfs.ext4 (apt-get install e2fsprogs)")
	const sizeMB = 1024
	dir := b.TempDir()
	var d Maker
	if err := d.Make(context.Background(), filepath.Join(dir, "first"), sizeMB); err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		make func(path string) error
	}{
		{"mkfs", func(p string) error { return makeImage(context.Background(), p, sizeMB) }},
		{"kept", func(p string) error { return d.Make(context.Background(), p, sizeMB) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				p := filepath.Join(dir, fmt.Sprintf("%s-%d", bc.name, i))
				if err := bc.make(p); err != nil {
					b.Fatal(err)
				}
				os.Remove(p)
			}
		})
	}
}

// TestMountOptions mounts an image and reads its options back: a rewrite
// of a truncated file must not start writeback on close (noauto_da_alloc).
func TestMountOptions(t *testing.T) {
	_, err := exec.LookPath("mkfs.ext4")
	testenv.Require(t, err == nil, "test needs mkfs.ext4 (apt-get install e2fsprogs)")
	testenv.Require(t, os.Geteuid() == 0, "test needs root to mount")
	dir := t.TempDir()
	image, mnt := filepath.Join(dir, "disk.ext4"), filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	var d Maker
	if err := d.Make(context.Background(), image, 64); err != nil {
		t.Fatal(err)
	}
	if _, err := Mount(image, mnt, unix.MS_NODEV); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(mnt, 0); err != nil {
			t.Errorf("unmounting %s: %v", mnt, err)
		}
	})
	info, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(info)) {
		if f := strings.Fields(line); len(f) > 4 && f[4] == mnt {
			if !strings.Contains(line, "noauto_da_alloc") {
				t.Errorf("mount of %s lacks noauto_da_alloc: %s", mnt, line)
			}
			return
		}
	}
	t.Fatalf("no mount at %s in /proc/self/mountinfo", mnt)
}
