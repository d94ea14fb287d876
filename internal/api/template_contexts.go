package api

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/template"
)

// Uploaded build contexts (the archives COPY steps take their files from,
// one per files hash in the builder's context directory) are collected:
// an archive that no build in progress holds is removed once it has gone
// unused for the retention. A use is its upload, an answer that it is
// present (the SDK then skips the upload and names it in its build) and a
// build request naming it; each sets the file's modification time. A
// build holds its archives from its start to its end, so one that runs
// longer than the retention keeps them. A collected context is simply
// uploaded again by the next build that needs it.

// DefaultContextRetention is how long an unused build context is kept
// (TemplateConfig.ContextRetention).
const DefaultContextRetention = 24 * time.Hour

// contextSweepEvery is how often unused contexts are looked for.
const contextSweepEvery = 10 * time.Minute

// contexts tracks the build context archives.
type contexts struct {
	archive   func(hash string) string // the builder's ContextArchive
	retention time.Duration
	now       func() time.Time

	// mu is held by a use while it touches an archive and by a sweep
	// while it decides on and removes one, so that a sweep never removes
	// an archive a use has just claimed. It guards held.
	mu   sync.Mutex
	held map[string]int // files hash → builds in progress holding it
}

// dir is the directory the archives are in.
func (c *contexts) dir() string { return filepath.Dir(c.archive(strings.Repeat("0", 64))) }

// use marks the archive of hash used now. It fails with fs.ErrNotExist
// when there is none.
func (c *contexts) use(hash string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	return os.Chtimes(c.archive(hash), now, now)
}

// hold keeps the archives of the COPY steps of spec until release.
func (c *contexts) hold(spec template.Spec) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, h := range filesHashes(spec) {
		c.held[h]++
	}
}

// release ends a hold of spec's archives; they count as used now.
func (c *contexts) release(spec template.Spec) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	for _, h := range filesHashes(spec) {
		if c.held[h]--; c.held[h] <= 0 {
			delete(c.held, h)
		}
		_ = os.Chtimes(c.archive(h), now, now) // gone already: nothing to keep
	}
}

// filesHashes returns the context hashes spec's COPY steps name.
func filesHashes(spec template.Spec) []string {
	var out []string
	for _, in := range spec.Instructions {
		if in.FilesHash != "" {
			out = append(out, in.FilesHash)
		}
	}
	return out
}

// sweep removes the archives neither held nor used within the retention,
// and uploads an earlier process left half-written (".upload-*") that
// old. It returns how many files it removed.
func (c *contexts) sweep() (int, error) {
	entries, err := os.ReadDir(c.dir())
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("listing build contexts: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cutoff := c.now().Add(-c.retention)
	var removed int
	var errs []error
	for _, e := range entries {
		name := e.Name()
		hash, isArchive := strings.CutSuffix(name, ".tar")
		isArchive = isArchive && template.ValidFilesHash(hash)
		if !isArchive && !strings.HasPrefix(name, ".upload-") {
			continue // not ours
		}
		if isArchive && c.held[hash] > 0 {
			continue
		}
		fi, err := e.Info()
		if err != nil || !fi.Mode().IsRegular() || !fi.ModTime().Before(cutoff) {
			continue
		}
		if err := os.Remove(filepath.Join(c.dir(), name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		removed++
	}
	return removed, errors.Join(errs...)
}

// sweepContexts sweeps at start and then every contextSweepEvery until
// the build service closes.
func (t *TemplateBuilds) sweepContexts() {
	defer t.wg.Done()
	tick := time.NewTicker(contextSweepEvery)
	defer tick.Stop()
	for {
		n, err := t.contexts.sweep()
		if err != nil {
			t.log.Warn("collecting unused build contexts", "err", err)
		}
		if n > 0 {
			t.log.Info("collected unused build contexts", "removed", n, "retention", t.contexts.retention.String())
		}
		select {
		case <-t.ctx.Done():
			return
		case <-tick.C:
		}
	}
}
