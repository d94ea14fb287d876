package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// What the template list and template deletion need beyond the build
// records: every build, how often each template was used, and what still
// depends on a template's files.

// AllTemplateBuilds returns every build of every template, by template
// and then oldest first.
func (s *Store) AllTemplateBuilds(ctx context.Context) ([]TemplateBuild, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+buildColumns+` FROM template_builds ORDER BY template, created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("listing template builds: %w", err)
	}
	defer rows.Close()
	var out []TemplateBuild
	for rows.Next() {
		b, err := scanBuild(rows)
		if err != nil {
			return nil, fmt.Errorf("listing template builds: %w", err)
		}
		out = append(out, b)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing template builds: %w", err)
	}
	return out, nil
}

// DeleteTemplateBuilds deletes every build of template, with its log and
// its tags; an error wrapping ErrNotFound when it has none.
func (s *Store) DeleteTemplateBuilds(ctx context.Context, template string) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM template_builds WHERE template = ?`, template)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return ErrNotFound
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("deleting the builds of template %s: %w", template, err)
	}
	return nil
}

// TemplateSpawn is how often sandboxes were created from a template and
// when the last one started.
type TemplateSpawn struct {
	Count int64
	Last  time.Time
}

// TemplateSpawns returns, by template name, the sandboxes ever created
// from it (records are kept after a kill).
func (s *Store) TemplateSpawns(ctx context.Context) (map[string]TemplateSpawn, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT alias, count(*), max(started_at) FROM sandboxes WHERE alias != '' GROUP BY alias`)
	if err != nil {
		return nil, fmt.Errorf("counting sandboxes by template: %w", err)
	}
	defer rows.Close()
	out := map[string]TemplateSpawn{}
	for rows.Next() {
		var (
			name string
			sp   TemplateSpawn
			last sql.NullInt64
		)
		if err := rows.Scan(&name, &sp.Count, &last); err != nil {
			return nil, fmt.Errorf("counting sandboxes by template: %w", err)
		}
		sp.Last = fromNanos(last)
		out[name] = sp
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("counting sandboxes by template: %w", err)
	}
	return out, nil
}

// TemplateUsers returns what runs over the files of template name: the
// IDs of its sandboxes that are not killed (starting, running or paused),
// and the snapshots of its sandboxes (as "name:tag", or their ID when
// unnamed).
func (s *Store) TemplateUsers(ctx context.Context, name string) (sandboxes, snapshots []string, err error) {
	if sandboxes, err = s.strings(ctx, `SELECT id FROM sandboxes WHERE alias = ? AND state IN (?, ?, ?) ORDER BY started_at, id`,
		name, string(StateStarting), string(StateRunning), string(StatePaused)); err != nil {
		return nil, nil, fmt.Errorf("finding the sandboxes of template %s: %w", name, err)
	}
	if snapshots, err = s.strings(ctx, `SELECT CASE WHEN name != '' THEN name || ':' || tag ELSE id END
		FROM snapshots WHERE alias = ? ORDER BY created_at, id`, name); err != nil {
		return nil, nil, fmt.Errorf("finding the snapshots of template %s: %w", name, err)
	}
	return sandboxes, snapshots, nil
}

// strings runs a query of one text column.
func (s *Store) strings(ctx context.Context, query string, args ...any) ([]string, error) {
	rows, err := s.r.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}
