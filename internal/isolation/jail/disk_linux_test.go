package jail

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
)

// TestDiskMakerCopiesMkfs checks that an image written from the kept data
// of the first is the same valid, sparse filesystem as one mkfs makes.
func TestDiskMakerCopiesMkfs(t *testing.T) {
	_, err := exec.LookPath("mkfs.ext4")
	testenv.Require(t, err == nil, "test needs mkfs.ext4 (apt-get install e2fsprogs)")
	dir := t.TempDir()
	var d diskMaker
	const sizeMB = 64
	first, second := filepath.Join(dir, "first.ext4"), filepath.Join(dir, "second.ext4")
	for _, p := range []string{first, second} {
		if err := d.make(context.Background(), p, sizeMB); err != nil {
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
	exts, err := readSparse(second, maxDiskData)
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
	if err := d.make(context.Background(), second, sizeMB); !errors.Is(err, fs.ErrExist) {
		t.Errorf("making an existing image: got %v, want an error for the existing file", err)
	}
	if fsck, err := exec.LookPath("e2fsck"); err == nil {
		if out, err := exec.Command(fsck, "-f", "-n", second).CombinedOutput(); err != nil {
			t.Errorf("e2fsck of the second image: %v\n%s", err, out)
		}
	}
}

// BenchmarkMakeDisk compares an image made by mkfs.ext4 with one written
// from the kept data, at the default size.
func BenchmarkMakeDisk(b *testing.B) {
	_, err := exec.LookPath("mkfs.ext4")
	testenv.Require(b, err == nil, "benchmark needs mkfs.ext4 (apt-get install e2fsprogs)")
	dir := b.TempDir()
	var d diskMaker
	if err := d.make(context.Background(), filepath.Join(dir, "first"), testDiskMB); err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		make func(path string) error
	}{
		{"mkfs", func(p string) error { return makeDisk(context.Background(), p, testDiskMB) }},
		{"kept", func(p string) error { return d.make(context.Background(), p, testDiskMB) }},
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

// BenchmarkStart times Start (and reports Stop) of a sandbox without
// networking, with every disk made by mkfs and with the kept image.
func BenchmarkStart(b *testing.B) {
	bk := newTestBackend(b, func(c *Config) { c.Log = slog.New(slog.DiscardHandler) })
	testRootfs(b) // built once, not timed
	testEnvd(b)
	for _, bc := range []struct {
		name string
		mkfs bool
	}{{"mkfs", true}, {"kept", false}} {
		b.Run(bc.name, func(b *testing.B) {
			var start, stop time.Duration
			for b.Loop() {
				if bc.mkfs {
					bk.disks = diskMaker{}
				}
				t0 := time.Now()
				inst, err := bk.Start(context.Background(), testSpec(b, isolation.Resources{}))
				if err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if err := inst.Stop(context.Background()); err != nil {
					b.Fatal(err)
				}
				start, stop = start+t1.Sub(t0), stop+time.Since(t1)
			}
			b.ReportMetric(float64(start.Microseconds())/1e3/float64(b.N), "start-ms")
			b.ReportMetric(float64(stop.Microseconds())/1e3/float64(b.N), "stop-ms")
		})
	}
}
