package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrInUse means a snapshot cannot be deleted: a live sandbox runs from it.
var ErrInUse = errors.New("in use")

// Snapshot is the record of one snapshot of a sandbox. A listed one is
// what E2B calls a snapshot (a template made from a sandbox): named or
// not, kept until deleted. An unlisted one is kept only while a live
// sandbox runs from it (Sandbox.SnapshotID): a fork's, a pause's, or one
// whose name a newer snapshot took.
type Snapshot struct {
	ID string
	// Name and Tag are the name:tag the snapshot is known by; Name is
	// empty for an unnamed one, whose Tag is DefaultTag.
	Name   string
	Tag    string
	Listed bool
	// Kind is the isolation.SnapshotKind's name: "files" or "memory".
	Kind string
	// SandboxID is the sandbox it was taken of.
	SandboxID string
	// What a sandbox started from it is: the template, backend and the
	// resources the saved sandbox had.
	TemplateID string
	Alias      string
	Backend    string
	CPUCount   int
	MemoryMB   int
	DiskSizeMB int
	// EnvdAccessToken is the saved envd's, which a memory snapshot's envd
	// still requires when it is restored.
	EnvdAccessToken string
	SizeBytes       int64
	CreatedAt       time.Time
}

const snapshotColumns = `id, name, tag, listed, kind, sandbox_id, template_id, alias, backend,
	cpu_count, memory_mb, disk_size_mb, envd_access_token, size_bytes, created_at`

func scanSnapshot(row scanner) (Snapshot, error) {
	var sn Snapshot
	var created sql.NullInt64
	err := row.Scan(&sn.ID, &sn.Name, &sn.Tag, &sn.Listed, &sn.Kind, &sn.SandboxID, &sn.TemplateID, &sn.Alias,
		&sn.Backend, &sn.CPUCount, &sn.MemoryMB, &sn.DiskSizeMB, &sn.EnvdAccessToken, &sn.SizeBytes, &created)
	sn.CreatedAt = fromNanos(created)
	return sn, err
}

// CreateSnapshot records sn, with CreatedAt set to now, and in the same
// transaction lets update change the record of sn.SandboxID (nil: it is
// left alone), as a pause that saved the sandbox does. A listed snapshot
// with a name takes its name:tag from the one that had it, which is
// unlisted (E2B moves the tag to the newest build). update's error is
// returned unwrapped.
func (s *Store) CreateSnapshot(ctx context.Context, sn Snapshot, update func(*Sandbox) error) (Snapshot, Sandbox, error) {
	if sn.ID == "" || sn.TemplateID == "" || sn.Backend == "" || (sn.Kind != "files" && sn.Kind != "memory") {
		return Snapshot{}, Sandbox{}, fmt.Errorf("creating snapshot %q: id, template, backend and kind are required: %w", sn.ID, ErrInvalid)
	}
	if sn.Name != "" && sn.Tag == "" {
		return Snapshot{}, Sandbox{}, fmt.Errorf("creating snapshot %s: a name without a tag: %w", sn.ID, ErrInvalid)
	}
	sn.CreatedAt = s.now().UTC()
	created, err := toNanos(sn.CreatedAt)
	if err != nil {
		return Snapshot{}, Sandbox{}, err
	}
	var sb Sandbox
	var fnErr error
	err = s.write(ctx, func(tx *sql.Tx) error {
		if sn.Name != "" {
			if _, err := tx.ExecContext(ctx, `UPDATE snapshots SET name = '', tag = ?, listed = 0 WHERE name = ? AND tag = ?`,
				DefaultTag, sn.Name, sn.Tag); err != nil {
				return err
			}
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO snapshots (`+snapshotColumns+`) VALUES (`+placeholders(15)+`)`,
			sn.ID, sn.Name, sn.Tag, sn.Listed, sn.Kind, sn.SandboxID, sn.TemplateID, sn.Alias, sn.Backend,
			sn.CPUCount, sn.MemoryMB, sn.DiskSizeMB, sn.EnvdAccessToken, sn.SizeBytes, created)
		if err != nil || update == nil {
			return err
		}
		sb, fnErr, err = s.updateSandboxTx(ctx, tx, sn.SandboxID, update)
		return err
	})
	if fnErr != nil {
		return Snapshot{}, Sandbox{}, fnErr
	}
	if err != nil {
		return Snapshot{}, Sandbox{}, fmt.Errorf("creating snapshot %s: %w", sn.ID, err)
	}
	return sn, sb, nil
}

// GetSnapshot returns snapshot id, listed or not, or an error wrapping
// ErrNotFound.
func (s *Store) GetSnapshot(ctx context.Context, id string) (Snapshot, error) {
	sn, err := scanSnapshot(s.r.QueryRowContext(ctx, `SELECT `+snapshotColumns+` FROM snapshots WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		return Snapshot{}, fmt.Errorf("getting snapshot %s: %w", id, err)
	}
	return sn, nil
}

// FindSnapshot returns the listed snapshot that ref names: "name:tag",
// "id:tag" of an unnamed one, or either without the tag (DefaultTag), or
// an error wrapping ErrNotFound.
func (s *Store) FindSnapshot(ctx context.Context, ref string) (Snapshot, error) {
	name, tag, found := strings.Cut(ref, ":")
	if !found {
		tag = DefaultTag
	}
	sn, err := scanSnapshot(s.r.QueryRowContext(ctx, `SELECT `+snapshotColumns+` FROM snapshots
		WHERE listed = 1 AND tag = ? AND (name = ? OR (name = '' AND id = ?))`, tag, name, name))
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		return Snapshot{}, fmt.Errorf("finding snapshot %s: %w", ref, err)
	}
	return sn, nil
}

// SnapshotQuery selects listed snapshots for ListSnapshots.
type SnapshotQuery struct {
	// SandboxID: taken of this sandbox.
	SandboxID string
	// Name: with this name, or unnamed with this ID; with Tag, that tag
	// only.
	Name, Tag string
	// Limit is the page size: 0 means DefaultListLimit, others are
	// clamped to 1..MaxListLimit.
	Limit     int
	NextToken string
}

// ListSnapshots returns one page of the listed snapshots q selects,
// newest first (never nil), and the token of the next page, empty on the
// last. A bad token gives an error wrapping ErrInvalidToken.
func (s *Store) ListSnapshots(ctx context.Context, q SnapshotQuery) ([]Snapshot, string, error) {
	limit := min(max(q.Limit, 1), MaxListLimit)
	if q.Limit == 0 {
		limit = DefaultListLimit
	}
	where, args := []string{"listed = 1"}, []any{}
	if q.SandboxID != "" {
		where, args = append(where, "sandbox_id = ?"), append(args, q.SandboxID)
	}
	if q.Name != "" {
		where, args = append(where, "(name = ? OR (name = '' AND id = ?))"), append(args, q.Name, q.Name)
	}
	if q.Tag != "" {
		where, args = append(where, "tag = ?"), append(args, q.Tag)
	}
	if q.NextToken != "" {
		c, err := decodeCursor(q.NextToken)
		if err != nil || c.order != OrderDesc {
			return nil, "", fmt.Errorf("listing snapshots: %w", ErrInvalidToken)
		}
		where, args = append(where, "(created_at, id) < (?, ?)"), append(args, c.startedAt, c.id)
	}
	rows, err := s.r.QueryContext(ctx, `SELECT `+snapshotColumns+` FROM snapshots WHERE `+strings.Join(where, " AND ")+
		` ORDER BY created_at DESC, id DESC LIMIT ?`, append(args, limit+1)...)
	if err != nil {
		return nil, "", fmt.Errorf("listing snapshots: %w", err)
	}
	out, err := scanSnapshots(rows)
	if err != nil {
		return nil, "", fmt.Errorf("listing snapshots: %w", err)
	}
	if len(out) <= limit {
		return out, "", nil
	}
	out = out[:limit]
	last := out[limit-1]
	return out, cursor{startedAt: last.CreatedAt.UnixNano(), id: last.ID, order: OrderDesc}.encode(), nil
}

func scanSnapshots(rows *sql.Rows) ([]Snapshot, error) {
	defer rows.Close()
	out := []Snapshot{}
	for rows.Next() {
		sn, err := scanSnapshot(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, sn)
	}
	return out, rows.Err()
}

// liveUse is true of a snapshot that a starting, running or paused
// sandbox runs from.
const liveUse = `EXISTS (SELECT 1 FROM sandboxes WHERE sandboxes.snapshot_id = snapshots.id
	AND sandboxes.state IN ('starting', 'running', 'paused'))`

// NamedSnapshots returns the listed snapshots with name, every tag.
func (s *Store) NamedSnapshots(ctx context.Context, name string) ([]Snapshot, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+snapshotColumns+` FROM snapshots WHERE listed = 1 AND name = ?`, name)
	if err != nil {
		return nil, fmt.Errorf("listing snapshots named %s: %w", name, err)
	}
	return scanSnapshots(rows)
}

// UnusedSnapshots returns the unlisted snapshots that no live sandbox
// runs from, which may go.
func (s *Store) UnusedSnapshots(ctx context.Context) ([]Snapshot, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+snapshotColumns+` FROM snapshots WHERE listed = 0 AND NOT `+liveUse)
	if err != nil {
		return nil, fmt.Errorf("listing unused snapshots: %w", err)
	}
	return scanSnapshots(rows)
}

// SnapshotIDs returns the ID of every snapshot recorded.
func (s *Store) SnapshotIDs(ctx context.Context) (map[string]bool, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT id FROM snapshots`)
	if err != nil {
		return nil, fmt.Errorf("listing snapshot ids: %w", err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("listing snapshot ids: %w", err)
		}
		out[id] = true
	}
	return out, rows.Err()
}

// ListedSnapshotBytes sums the sizes of the listed snapshots.
func (s *Store) ListedSnapshotBytes(ctx context.Context) (int64, error) {
	var n int64
	if err := s.r.QueryRowContext(ctx, `SELECT COALESCE(SUM(size_bytes), 0) FROM snapshots WHERE listed = 1`).Scan(&n); err != nil {
		return 0, fmt.Errorf("summing snapshot sizes: %w", err)
	}
	return n, nil
}

// DeleteSnapshots deletes the snapshots ids, all or none: while a live
// sandbox runs from one of them, it returns an error wrapping ErrInUse.
// Unknown IDs are skipped.
func (s *Store) DeleteSnapshots(ctx context.Context, ids []string) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		for _, id := range ids {
			var used bool
			err := tx.QueryRowContext(ctx, `SELECT `+liveUse+` FROM snapshots WHERE id = ?`, id).Scan(&used)
			if errors.Is(err, sql.ErrNoRows) {
				continue
			}
			if err != nil {
				return err
			}
			if used {
				return fmt.Errorf("snapshot %s: %w", id, ErrInUse)
			}
			if _, err := tx.ExecContext(ctx, `DELETE FROM snapshots WHERE id = ?`, id); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("deleting snapshots: %w", err)
	}
	return nil
}
