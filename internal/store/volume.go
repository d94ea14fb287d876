package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Volume is the record of one volume; its files are the volume package's.
type Volume struct {
	ID        string
	Name      string
	SizeBytes int64
	CreatedAt time.Time
}

// VolumeMount is a volume a sandbox mounts, by name, and where.
type VolumeMount struct {
	Name string `json:"name"`
	Path string `json:"path"`
}

const volumeColumns = `id, name, size_bytes, created_at`

func scanVolume(row scanner) (Volume, error) {
	var v Volume
	var created sql.NullInt64
	err := row.Scan(&v.ID, &v.Name, &v.SizeBytes, &created)
	v.CreatedAt = fromNanos(created)
	return v, err
}

// CreateVolume records v with CreatedAt now; a volume of that name
// exists already: an error wrapping ErrExists.
func (s *Store) CreateVolume(ctx context.Context, v Volume) (Volume, error) {
	if v.ID == "" || v.Name == "" {
		return Volume{}, fmt.Errorf("creating volume: id and name are required: %w", ErrInvalid)
	}
	v.CreatedAt = s.now().UTC()
	created, err := toNanos(v.CreatedAt)
	if err != nil {
		return Volume{}, err
	}
	_, err = s.w.ExecContext(ctx, `INSERT INTO volumes (`+volumeColumns+`) VALUES (?, ?, ?, ?)`, v.ID, v.Name, v.SizeBytes, created)
	if err != nil && strings.Contains(err.Error(), "UNIQUE constraint failed") {
		return Volume{}, fmt.Errorf("creating volume %s: %w", v.Name, ErrExists)
	}
	if err != nil {
		return Volume{}, fmt.Errorf("creating volume %s: %w", v.Name, err)
	}
	return v, nil
}

func (s *Store) getVolume(ctx context.Context, where string, arg any) (Volume, error) {
	v, err := scanVolume(s.r.QueryRowContext(ctx, `SELECT `+volumeColumns+` FROM volumes WHERE `+where, arg))
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNotFound
	}
	return v, err
}

// GetVolume returns volume id, or an error wrapping ErrNotFound.
func (s *Store) GetVolume(ctx context.Context, id string) (Volume, error) {
	v, err := s.getVolume(ctx, "id = ?", id)
	if err != nil {
		return Volume{}, fmt.Errorf("getting volume %s: %w", id, err)
	}
	return v, nil
}

// VolumeByName returns the volume named name, or an error wrapping
// ErrNotFound.
func (s *Store) VolumeByName(ctx context.Context, name string) (Volume, error) {
	v, err := s.getVolume(ctx, "name = ?", name)
	if err != nil {
		return Volume{}, fmt.Errorf("getting volume %s: %w", name, err)
	}
	return v, nil
}

// ListVolumes returns every volume, oldest first (never nil).
func (s *Store) ListVolumes(ctx context.Context) ([]Volume, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+volumeColumns+` FROM volumes ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("listing volumes: %w", err)
	}
	defer rows.Close()
	out := []Volume{}
	for rows.Next() {
		v, err := scanVolume(rows)
		if err != nil {
			return nil, fmt.Errorf("listing volumes: %w", err)
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// VolumeUser is a live sandbox that mounts a volume, and the backend that
// runs it.
type VolumeUser struct {
	SandboxID string
	Backend   string
}

// VolumeUsers returns the starting, running and paused sandboxes that
// mount the volume named name (once per mount), oldest first.
func (s *Store) VolumeUsers(ctx context.Context, name string) ([]VolumeUser, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT sandboxes.id, sandboxes.backend FROM sandboxes, json_each(sandboxes.volume_mounts) AS m
		WHERE sandboxes.state IN ('starting', 'running', 'paused') AND json_extract(m.value, '$.name') = ?
		ORDER BY sandboxes.started_at, sandboxes.id`, name)
	if err != nil {
		return nil, fmt.Errorf("listing the sandboxes that mount volume %s: %w", name, err)
	}
	defer rows.Close()
	var out []VolumeUser
	for rows.Next() {
		var u VolumeUser
		if err := rows.Scan(&u.SandboxID, &u.Backend); err != nil {
			return nil, fmt.Errorf("listing the sandboxes that mount volume %s: %w", name, err)
		}
		out = append(out, u)
	}
	return out, rows.Err()
}

// DeleteVolume deletes the record of volume id, unless a starting,
// running or paused sandbox mounts it (an error wrapping ErrInUse). An
// unknown id is no error.
func (s *Store) DeleteVolume(ctx context.Context, id string) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		var used bool
		err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM sandboxes, json_each(sandboxes.volume_mounts) AS m
			WHERE sandboxes.state IN ('starting', 'running', 'paused')
			AND json_extract(m.value, '$.name') = (SELECT name FROM volumes WHERE id = ?))`, id).Scan(&used)
		if err != nil {
			return err
		}
		if used {
			return ErrInUse
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM volumes WHERE id = ?`, id)
		return err
	})
	if err != nil {
		return fmt.Errorf("deleting volume %s: %w", id, err)
	}
	return nil
}
