package vm

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation/vm/initramfs"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/vm/kernel"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/vm/vminit"
	"golang.org/x/sys/unix"
)

// bootCache makes, once per version of their inputs, what every VM boots
// from besides its template: the initramfs (vminit and the kernel
// modules it loads) and the tools disk (envd and the other host binaries
// the sandbox gets). Files are named after their inputs' identity, so a
// rebuilt binary or another kernel is a new file beside the old one,
// which running VMs keep using (QEMU holds what it was given open); the
// old one goes once unused for cacheMaxAge (sweepCache).
type bootCache struct {
	dir    string
	kernel *kernel.Kernel
	init   string
	mkfs   string // mkfs.ext4
	log    *slog.Logger

	mu sync.Mutex // serialises the making of files
}

// A cache entry (a boot file, a memory snapshot) unused for cacheMaxAge is
// removed at the backend's start; use marks an entry at most once per
// cacheTouchEvery, by its modification time.
const (
	cacheMaxAge     = 7 * 24 * time.Hour
	cacheTouchEvery = time.Hour
)

// markUsed records that the cache entry at path is in use.
func markUsed(path string) {
	if fi, err := os.Stat(path); err == nil && time.Since(fi.ModTime()) > cacheTouchEvery {
		now := time.Now()
		_ = os.Chtimes(path, now, now)
	}
}

// sweepCache removes what a server that died while making it left in the
// cache (*.new, tools-stage-*) and the boot files and memory snapshots
// unused for cacheMaxAge: those of older binaries, kernels and shapes.
func sweepCache(dir string, log *slog.Logger) error {
	var errs []error
	for _, pattern := range []string{"*.new", "tools-stage-*", "initramfs-*.cpio", "tools-*.ext4", "snapshots/*"} {
		paths, err := filepath.Glob(filepath.Join(dir, pattern))
		if err != nil {
			return err
		}
		for _, p := range paths {
			fi, err := os.Stat(p)
			if err != nil {
				continue
			}
			stale := strings.HasSuffix(p, ".new") || strings.HasPrefix(filepath.Base(p), "tools-stage-") ||
				time.Since(fi.ModTime()) > cacheMaxAge
			if !stale {
				continue
			}
			if err := os.RemoveAll(p); err != nil {
				errs = append(errs, err)
				continue
			}
			log.Info("vm: removed from the boot cache", "path", p, "unused_since", fi.ModTime().Round(time.Second))
		}
	}
	return errors.Join(errs...)
}

// fileKey identifies a version of a host file without reading it.
func fileKey(path string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return "", fmt.Errorf("reading %s: %w", path, err)
	}
	return fmt.Sprintf("%s:%d:%d:%d:%d.%d", path, st.Dev, st.Ino, st.Size, st.Mtim.Sec, st.Mtim.Nsec), nil
}

func hashKey(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// make returns the cached file name, making it with write (into a
// temporary file, then renamed) if it is not there.
func (c *bootCache) make(name string, write func(path string) error) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	path := filepath.Join(c.dir, name)
	if _, err := os.Stat(path); err == nil {
		markUsed(path)
		return path, nil
	}
	t0 := time.Now()
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return "", err
	}
	tmp := path + ".new"
	defer os.Remove(tmp)
	if err := write(tmp); err != nil {
		return "", err
	}
	// World-readable: each QEMU runs as a uid of its own; nothing here
	// is secret (the per-sandbox configuration is not in these files).
	if err := os.Chmod(tmp, 0o644); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", err
	}
	c.log.Info("vm: made a boot file", "path", path, "took", time.Since(t0).Round(time.Millisecond))
	return path, nil
}

// initramfs returns the shared initramfs: vminit as /init and the
// modules it loads, uncompressed (TCG decompresses slowly).
func (c *bootCache) initramfs() (string, error) {
	initKey, err := fileKey(c.init)
	if err != nil {
		return "", fmt.Errorf("guest init: %w", err)
	}
	name := "initramfs-" + hashKey(c.kernel.Version, initKey) + ".cpio"
	path, err := c.make(name, func(tmp string) error {
		f, err := os.Create(tmp)
		if err != nil {
			return err
		}
		err = initramfs.Build(f, c.kernel.Dir, c.init, initramfs.Modules)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err
	})
	if err != nil {
		return "", fmt.Errorf("making the initramfs: %w", err)
	}
	return path, nil
}

// tools returns the read-only ext4 disk that holds bins (guest path →
// host path) at their guest paths.
func (c *bootCache) tools(ctx context.Context, bins map[string]string) (string, error) {
	guests := slices.Sorted(maps.Keys(bins))
	parts := make([]string, 0, 2*len(guests))
	var size int64
	for _, g := range guests {
		k, err := fileKey(bins[g])
		if err != nil {
			return "", fmt.Errorf("making the tools disk: %w", err)
		}
		parts = append(parts, g, k)
		if fi, err := os.Stat(bins[g]); err == nil {
			size += fi.Size()
		}
	}
	path, err := c.make("tools-"+hashKey(parts...)+".ext4", func(tmp string) error {
		stage, err := os.MkdirTemp(c.dir, "tools-stage-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(stage)
		for _, g := range guests {
			dst := filepath.Join(stage, g)
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return err
			}
			if err := copyFile(bins[g], dst, 0o755); err != nil {
				return err
			}
		}
		// Data plus a fifth and the metadata of a small file system.
		sizeMB := (size+size/5)>>20 + 16
		if err := os.WriteFile(tmp, nil, 0o600); err != nil {
			return err
		}
		if err := os.Truncate(tmp, sizeMB<<20); err != nil {
			return err
		}
		cmd := exec.CommandContext(ctx, c.mkfs, "-q", "-F", "-m", "0", "-O", "^has_journal", "-L", "asb-tools",
			"-E", "root_owner=0:0", "-d", stage, tmp)
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("mkfs.ext4: %w: %s", err, bytes.TrimSpace(out))
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("making the tools disk: %w", err)
	}
	return path, nil
}

// copyFile copies src to a new file dst with mode perm.
func copyFile(src, dst string, perm os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copying %s: %w", src, err)
	}
	return out.Close()
}

// sandboxInitrd writes the sandbox's own initrd to path: the shared
// initramfs with cfg appended (the kernel unpacks concatenated archives
// in turn). It holds envd's token, so it is readable by uid alone, the
// sandbox's QEMU, which the kernel hands it to.
func sandboxInitrd(path, shared string, cfg vminit.Config, uid int) error {
	in, err := os.Open(shared)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o400)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if err == nil {
		err = initramfs.AppendConfig(out, cfg)
	}
	if err == nil {
		err = out.Chown(uid, uid)
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing the sandbox's initrd: %w", err)
	}
	return nil
}
