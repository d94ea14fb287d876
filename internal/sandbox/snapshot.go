package sandbox

// Snapshots: a sandbox saved by its backend (isolation.Instance.Snapshot)
// into a directory of Config.SnapshotDir named by the snapshot's ID, and
// recorded in the store. Listed snapshots are E2B's (POST
// /sandboxes/{id}/snapshots), kept until deleted and bounded by
// Config.SnapshotBudget; the others are a fork's and a pause's, kept while
// a live sandbox runs from them (store.Sandbox.SnapshotID) and collected
// after. A snapshot holds what the backend saves: the file system (every
// backend with Capabilities.Snapshot), or the processes and memory too
// (MemorySnapshot). Directories are made before their record and removed
// after it, so a crash leaves at worst a directory without a record,
// which the next start removes.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/agent-sandbox/agent-sandbox/internal/bytesize"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
	"github.com/agent-sandbox/agent-sandbox/internal/template"
)

// SnapshotRequest is POST /sandboxes/{id}/snapshots after the API decoded
// it.
type SnapshotRequest struct {
	// Name is "alias[:tag]" or empty (E2B's rules, parseSnapshotName).
	Name string
	// Mode is "full" (memory and files), "filesystem", or empty: the
	// richest the sandbox's backend makes.
	Mode string
}

// Snapshot modes, as newer E2B SDKs name them.
const (
	ModeFull       = "full"
	ModeFilesystem = "filesystem"
)

// ModeOf is the E2B mode of a snapshot of kind.
func ModeOf(kind string) string {
	if kind == isolation.MemorySnapshot.String() {
		return ModeFull
	}
	return ModeFilesystem
}

func (m *Manager) snapshotDir(id string) string { return filepath.Join(m.cfg.SnapshotDir, id) }

// canSnapshot reports whether sandboxes of backend can be saved as kind
// here.
func (m *Manager) canSnapshot(backend isolation.Backend, kind isolation.SnapshotKind) bool {
	return m.cfg.SnapshotDir != "" && backend.Capabilities().Snapshot >= kind
}

// snapshotKind is the kind a snapshot of mode makes of sb: what mode
// asks for, or the richest its backend makes of it. That is its files
// alone while it has volumes as disks of its own: a guest saved with its
// memory has them mounted, and every sandbox started from it would too.
func (m *Manager) snapshotKind(sb *sandbox, mode, what string) (isolation.SnapshotKind, error) {
	backend := sb.backend
	kind := backend.Capabilities().Snapshot
	if holdsVolumes(sb) {
		if mode == ModeFull {
			return 0, invalid("Sandbox '%s' mounts volumes, each a disk of its own VM's: a snapshot with its memory (mode full) would have every sandbox started from it mount them too; use mode filesystem", sb.id)
		}
		kind = min(kind, isolation.FilesSnapshot)
	}
	switch mode {
	case "":
	case ModeFull:
		kind = isolation.MemorySnapshot
	case ModeFilesystem:
		kind = isolation.FilesSnapshot
	default:
		return 0, invalid("mode must be one of: %s, %s (got %q)", ModeFull, ModeFilesystem, mode)
	}
	if kind == isolation.NoSnapshot || !m.canSnapshot(backend, kind) {
		if mode == ModeFull {
			return 0, cannot(backend, what+" with its memory (mode full): it saves the file system only; use mode filesystem")
		}
		return 0, cannot(backend, what+": it makes no snapshots")
	}
	return kind, nil
}

// Name rules of E2B's snapshots: alias[:tag], lower case.
var (
	snapshotAliasRE = regexp.MustCompile(`^[a-z0-9_-]+$`)
	snapshotTagRE   = regexp.MustCompile(`^[a-z0-9_.-]+$`)
	uuidRE          = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
)

// parseSnapshotName splits a snapshot name as E2B does: trimmed, lower
// case, "alias[:tag]" with the tag DefaultTag by default; "" is unnamed.
func parseSnapshotName(s string) (name, tag string, err error) {
	s = strings.ToLower(strings.TrimSpace(s))
	if s == "" {
		return "", store.DefaultTag, nil
	}
	name, tag, hasTag := strings.Cut(s, ":")
	if ns, _, ok := strings.Cut(name, "/"); ok {
		return "", "", invalid("Invalid name: namespace '%s' is not allowed: this server has no teams; give the name without '%s/'", ns, ns)
	}
	if !hasTag {
		tag = store.DefaultTag
	}
	switch {
	case !snapshotAliasRE.MatchString(name):
		return "", "", invalid("Invalid name: %q: a name is made of a-z, 0-9, '-' and '_'", name)
	case uuidRE.MatchString(name):
		return "", "", invalid("Invalid name: %q: a name cannot be a UUID", name)
	case !snapshotTagRE.MatchString(tag):
		return "", "", invalid("Invalid name: tag %q: a tag is made of a-z, 0-9, '-', '_' and '.'", tag)
	}
	return name, tag, nil
}

// CreateSnapshot saves running sandbox id as a listed snapshot (E2B's
// createSnapshot); the sandbox runs on.
func (m *Manager) CreateSnapshot(ctx context.Context, id string, req SnapshotRequest) (store.Snapshot, error) {
	name, tag, err := parseSnapshotName(req.Name)
	if err != nil {
		return store.Snapshot{}, err
	}
	sb, err := m.lockLive(id)
	if err != nil {
		return store.Snapshot{}, err
	}
	defer sb.op.Unlock()
	if st := sb.current(); st != store.StateRunning {
		return store.Snapshot{}, conflict("Sandbox '%s' cannot be snapshotted while in '%s' state", id, st)
	}
	kind, err := m.snapshotKind(sb, req.Mode, "snapshot sandboxes")
	if err != nil {
		return store.Snapshot{}, err
	}
	if name != "" {
		if _, err := m.cfg.Templates.Lookup(name); err == nil {
			return store.Snapshot{}, invalid("Invalid name: %q is a template's name; give the snapshot another", name)
		} else if !errors.Is(err, template.ErrNotFound) {
			return store.Snapshot{}, fmt.Errorf("looking up template %q: %w", name, err)
		}
	}
	if err := m.checkSnapshotBudget(ctx, 0); err != nil {
		return store.Snapshot{}, err
	}
	sn, _, unpin, err := m.takeSnapshot(ctx, sb, kind, store.Snapshot{Name: name, Tag: tag, Listed: true}, nil)
	if err != nil {
		return store.Snapshot{}, err
	}
	defer unpin()
	if err := m.checkSnapshotBudget(ctx, sn.SizeBytes); err != nil {
		if rerr := m.removeSnapshots(ctx, []store.Snapshot{sn}); rerr != nil {
			sb.log.Error("removing a snapshot over the budget", "snapshot", sn.ID, "err", rerr)
		}
		return store.Snapshot{}, err
	}
	sb.log.Info("snapshot made", "snapshot", sn.ID, "name", sn.Name, "kind", sn.Kind, "size", bytesize.Format(uint64(sn.SizeBytes)))
	m.collectSnapshotsLater() // an older one may have lost its name to it
	return sn, nil
}

// checkSnapshotBudget refuses a listed snapshot while the listed ones
// take the budget, or, for one of added bytes just made, when it would
// take them over it.
func (m *Manager) checkSnapshotBudget(ctx context.Context, added int64) error {
	budget := m.cfg.SnapshotBudget
	if budget == 0 {
		return nil
	}
	used, err := m.cfg.Store.ListedSnapshotBytes(ctx)
	if err != nil {
		return err
	}
	if added == 0 && uint64(used) < budget {
		return nil
	}
	if added > 0 && uint64(used) <= budget {
		return nil // used counts the new one already
	}
	msg := fmt.Sprintf("snapshot storage is full: snapshots take %s of the %s this server keeps for them",
		bytesize.Format(uint64(used-added)), bytesize.Format(budget))
	if added > 0 {
		msg = fmt.Sprintf("snapshot storage is full: this snapshot (%s) would take the snapshots to %s, over the %s this server keeps for them",
			bytesize.Format(uint64(added)), bytesize.Format(uint64(used)), bytesize.Format(budget))
	}
	return &userError{kind: ErrNoSpace, msg: msg + "; delete snapshots you no longer need (Sandbox.deleteSnapshot), or have the operator raise serve --snapshot-budget"}
}

// takeSnapshot saves sb, whose op the caller holds, as a snapshot of kind
// into a new directory and records it as sn (the fields of the saved
// sandbox filled in), applying update, if set, to sb's record in the same
// transaction. The snapshot is pinned (not collected) until the caller
// calls unpin.
func (m *Manager) takeSnapshot(ctx context.Context, sb *sandbox, kind isolation.SnapshotKind, sn store.Snapshot,
	update func(rec *store.Sandbox, snapshotID string) error) (_ store.Snapshot, _ store.Sandbox, unpin func(), err error) {
	rec, err := m.cfg.Store.GetSandbox(ctx, sb.id)
	if err != nil {
		return store.Snapshot{}, store.Sandbox{}, nil, err
	}
	sn.ID, sn.Kind = newSnapshotID(), kind.String()
	sn.SandboxID, sn.TemplateID, sn.Alias, sn.Backend = rec.ID, rec.TemplateID, rec.Alias, rec.Backend
	sn.CPUCount, sn.MemoryMB, sn.DiskSizeMB, sn.EnvdAccessToken = rec.CPUCount, rec.MemoryMB, rec.DiskSizeMB, rec.EnvdAccessToken
	dir := m.snapshotDir(sn.ID)
	if err := os.MkdirAll(m.cfg.SnapshotDir, 0o700); err != nil {
		return store.Snapshot{}, store.Sandbox{}, nil, fmt.Errorf("making the snapshot directory: %w", err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return store.Snapshot{}, store.Sandbox{}, nil, fmt.Errorf("making the snapshot directory: %w", err)
	}
	unpin = m.pin(sn.ID)
	defer func() {
		if err != nil {
			unpin()
			if rerr := os.RemoveAll(dir); rerr != nil {
				sb.log.Error("removing a failed snapshot", "dir", dir, "err", rerr)
			}
		}
	}()
	if err := sb.instance().Snapshot(ctx, dir, kind); err != nil {
		return store.Snapshot{}, store.Sandbox{}, nil, fmt.Errorf("snapshotting sandbox %s: %w", sb.id, err)
	}
	if sn.SizeBytes, err = diskUsage(dir); err != nil {
		return store.Snapshot{}, store.Sandbox{}, nil, fmt.Errorf("measuring snapshot %s: %w", sn.ID, err)
	}
	if sn.Listed {
		// Kept until deleted: on disk before it is recorded.
		if err := syncFS(dir); err != nil {
			return store.Snapshot{}, store.Sandbox{}, nil, fmt.Errorf("writing snapshot %s to disk: %w", sn.ID, err)
		}
	}
	var upd func(*store.Sandbox) error
	if update != nil {
		upd = func(r *store.Sandbox) error { return update(r, sn.ID) }
	}
	stored, after, err := m.cfg.Store.CreateSnapshot(ctx, sn, upd)
	if err != nil {
		return store.Snapshot{}, store.Sandbox{}, nil, err
	}
	return stored, after, unpin, nil
}

// pin keeps snapshot id from collection and deletion until the returned
// func is called.
func (m *Manager) pin(id string) (unpin func()) {
	m.snapMu.Lock()
	defer m.snapMu.Unlock()
	return m.pinLocked(id)
}

// pinLocked is pin for a caller that holds m.snapMu.
func (m *Manager) pinLocked(id string) (unpin func()) {
	m.pins[id]++
	return func() {
		m.snapMu.Lock()
		if m.pins[id]--; m.pins[id] <= 0 {
			delete(m.pins, id)
		}
		m.snapMu.Unlock()
	}
}

// findSnapshot returns the listed snapshot that ref names, pinned until
// unpin is called; a nil unpin when ref names none.
func (m *Manager) findSnapshot(ctx context.Context, ref string) (_ store.Snapshot, unpin func(), _ error) {
	m.snapMu.Lock()
	defer m.snapMu.Unlock()
	sn, err := m.cfg.Store.FindSnapshot(ctx, ref)
	if errors.Is(err, store.ErrNotFound) {
		return store.Snapshot{}, nil, nil
	}
	if err != nil {
		return store.Snapshot{}, nil, err
	}
	return sn, m.pinLocked(sn.ID), nil
}

// SnapshotQuery is GET /snapshots after the API decoded it.
type SnapshotQuery struct {
	SandboxID string
	// Name is a name or an unnamed snapshot's ID, with ":tag" for that tag
	// only.
	Name      string
	Limit     int
	NextToken string
}

// ListSnapshots lists the listed snapshots, newest first.
func (m *Manager) ListSnapshots(ctx context.Context, q SnapshotQuery) ([]store.Snapshot, string, error) {
	name, tag, _ := strings.Cut(strings.ToLower(strings.TrimSpace(q.Name)), ":")
	out, next, err := m.cfg.Store.ListSnapshots(ctx, store.SnapshotQuery{SandboxID: q.SandboxID, Name: name, Tag: tag, Limit: q.Limit, NextToken: q.NextToken})
	if errors.Is(err, store.ErrInvalidToken) {
		return nil, "", &userError{kind: ErrInvalid, msg: "Invalid next token", cause: err}
	}
	return out, next, err
}

// DeleteSnapshot deletes the snapshot ref names (E2B: the template, every
// tag of it): "name[:tag]" or an unnamed one's "id[:tag]". ErrNotFound
// when there is none (a template, perhaps: DeleteTemplate); ErrInvalid
// while a live sandbox runs from it.
func (m *Manager) DeleteSnapshot(ctx context.Context, ref string) error {
	name, _, _ := strings.Cut(strings.ToLower(ref), ":")
	m.snapMu.Lock()
	defer m.snapMu.Unlock()
	targets, err := m.cfg.Store.NamedSnapshots(ctx, name)
	if err != nil {
		return err
	}
	if len(targets) == 0 {
		if sn, err := m.cfg.Store.GetSnapshot(ctx, name); err == nil && sn.Listed && sn.Name == "" {
			targets = append(targets, sn)
		}
	}
	if len(targets) == 0 {
		// The API then deletes the template of that name, if any.
		return &userError{kind: ErrNotFound, msg: fmt.Sprintf("snapshot '%s' not found", ref)}
	}
	for _, sn := range targets {
		if m.pins[sn.ID] > 0 {
			return invalid("cannot delete template '%s' because there are running sandboxes using it", ref)
		}
	}
	err = m.removeSnapshotsLocked(ctx, targets)
	if errors.Is(err, store.ErrInUse) {
		return &userError{kind: ErrInvalid, msg: fmt.Sprintf("cannot delete template '%s' because there are running sandboxes using it", ref), cause: err}
	}
	return err
}

// removeSnapshots deletes the records of sns, all or none, and then their
// directories.
func (m *Manager) removeSnapshots(ctx context.Context, sns []store.Snapshot) error {
	m.snapMu.Lock()
	defer m.snapMu.Unlock()
	return m.removeSnapshotsLocked(ctx, sns)
}

func (m *Manager) removeSnapshotsLocked(ctx context.Context, sns []store.Snapshot) error {
	ids := make([]string, len(sns))
	for i, sn := range sns {
		ids[i] = sn.ID
	}
	if err := m.cfg.Store.DeleteSnapshots(ctx, ids); err != nil {
		return err
	}
	var errs []error
	for _, id := range ids {
		if err := os.RemoveAll(m.snapshotDir(id)); err != nil {
			errs = append(errs, fmt.Errorf("removing snapshot %s: %w", id, err))
		}
	}
	return errors.Join(errs...)
}

// collectSnapshots removes the unlisted snapshots no live sandbox runs
// from and no operation holds.
func (m *Manager) collectSnapshots(ctx context.Context) {
	if m.cfg.SnapshotDir == "" {
		return
	}
	m.snapMu.Lock()
	defer m.snapMu.Unlock()
	unused, err := m.cfg.Store.UnusedSnapshots(ctx)
	if err != nil {
		m.log.Error("collecting snapshots", "err", err)
		return
	}
	for _, sn := range unused {
		if m.pins[sn.ID] > 0 {
			continue
		}
		if err := m.removeSnapshotsLocked(ctx, []store.Snapshot{sn}); err != nil && !errors.Is(err, store.ErrInUse) {
			m.log.Error("removing an unused snapshot", "snapshot", sn.ID, "err", err)
			continue
		}
		m.log.Debug("removed an unused snapshot", "snapshot", sn.ID, "of", sn.SandboxID)
	}
}

// collectSnapshotsLater runs collectSnapshots in the background.
func (m *Manager) collectSnapshotsLater() {
	m.goroutine(func() { m.collectSnapshots(context.Background()) })
}

// sweepSnapshots removes the snapshot directories that have no record:
// what a crash left while a snapshot was made or removed.
func (m *Manager) sweepSnapshots(ctx context.Context) error {
	if m.cfg.SnapshotDir == "" {
		return nil
	}
	entries, err := os.ReadDir(m.cfg.SnapshotDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("listing snapshots: %w", err)
	}
	known, err := m.cfg.Store.SnapshotIDs(ctx)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if known[e.Name()] {
			continue
		}
		m.log.Info("removing a snapshot left without a record", "dir", e.Name())
		if err := os.RemoveAll(m.snapshotDir(e.Name())); err != nil {
			return fmt.Errorf("removing snapshot %s: %w", e.Name(), err)
		}
	}
	return nil
}

// snapshotIDPrefix starts every snapshot ID, which the ":tag" of E2B's
// snapshot IDs follows.
const snapshotIDPrefix = 's'

// newSnapshotID returns "s" and 20 random characters of [a-z0-9].
func newSnapshotID() string { return newIDWith(snapshotIDPrefix) }
