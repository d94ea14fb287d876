package vm

import (
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestSweepCache(t *testing.T) {
	dir := t.TempDir()
	old := time.Now().Add(-cacheMaxAge - time.Hour)
	entries := map[string]bool{ // name → kept
		"initramfs-aaaa.cpio":     true,
		"initramfs-bbbb.cpio":     false, // old
		"tools-cccc.ext4":         false, // old
		"tools-dddd.ext4":         true,
		"initramfs-eeee.cpio.new": false, // a making that died
		"tools-stage-123":         false,
		"snapshots/ffff":          true,
		"snapshots/gggg":          false, // old
		"snapshots/hhhh.new":      false,
		"an-operator's-note.txt":  true, // not the cache's
	}
	for name := range entries {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"initramfs-bbbb.cpio", "tools-cccc.ext4", "snapshots/gggg"} {
		if err := os.Chtimes(filepath.Join(dir, name), old, old); err != nil {
			t.Fatal(err)
		}
	}
	// In use: marked, so kept though old.
	used := filepath.Join(dir, "initramfs-aaaa.cpio")
	if err := os.Chtimes(used, old, old); err != nil {
		t.Fatal(err)
	}
	markUsed(used)
	if err := sweepCache(dir, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	for _, name := range slices.Sorted(maps.Keys(entries)) {
		_, err := os.Stat(filepath.Join(dir, name))
		if kept := err == nil; kept != entries[name] {
			t.Errorf("%s kept %v, want %v", name, kept, entries[name])
		}
	}
}
