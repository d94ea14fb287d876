package store

import (
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Template builds are the records of the E2B template build API. A
// template is known by its name (the SDK's alias, which the API also uses
// as its template ID); it has no row of its own, only builds. A build
// goes waiting (requested) → building (triggered, queued or running) →
// ready or error. Tags point a template's name:tag at a ready build; the
// template engine's own cache holds the built root filesystems, which a
// ready build names by VersionID.

// BuildStatus is the state of a template build.
type BuildStatus string

// The build states, as the E2B API spells them.
const (
	BuildWaiting  BuildStatus = "waiting"
	BuildBuilding BuildStatus = "building"
	BuildReady    BuildStatus = "ready"
	BuildError    BuildStatus = "error"
)

// ErrBuildState means a build is not in the state the call needs (a
// trigger of a build already triggered, say).
var ErrBuildState = errors.New("build is in the wrong state")

// TemplateBuild is one build of a template.
type TemplateBuild struct {
	ID       string
	Template string
	Status   BuildStatus
	// Tags are given to the build when it succeeds.
	Tags []string
	// Resources are what the built template gives its sandboxes.
	Resources BuildResources
	// VersionID is the built template's ID in the template cache; set
	// when Status is BuildReady.
	VersionID  string
	Reason     BuildReason // set when Status is BuildError
	CreatedAt  time.Time
	StartedAt  time.Time // zero until triggered
	FinishedAt time.Time // zero until ready or failed
}

// BuildResources are a build's cpuCount and memoryMB; 0 is the server's
// default.
type BuildResources struct {
	CPUCount int
	MemoryMB int
}

// BuildReason says why a build failed.
type BuildReason struct {
	Message string
	// Step is the failed step's 1-based number as a string, or empty.
	Step string
	// LogTail holds the failed step's last output lines.
	LogTail []string
}

// BuildLogEntry is one line of a build's log.
type BuildLogEntry struct {
	Time    time.Time
	Level   string
	Message string
	Step    string // 1-based step number, or empty
}

// BuildResult is how a build ended: Status BuildReady with VersionID, or
// BuildError with Reason.
type BuildResult struct {
	Status    BuildStatus
	VersionID string
	Reason    BuildReason
	Logs      []BuildLogEntry
}

// TemplateTag is a tag of a template and the build it points at.
type TemplateTag struct {
	Tag       string
	BuildID   string
	CreatedAt time.Time
}

const buildColumns = `id, template, status, tags, version_id, reason_message, reason_step, reason_logs,
	created_at, started_at, finished_at, cpu_count, memory_mb`

func scanBuild(row scanner) (TemplateBuild, error) {
	var (
		b                            TemplateBuild
		tags, reasonLogs             string
		created, started, finishedAt sql.NullInt64
	)
	err := row.Scan(&b.ID, &b.Template, &b.Status, &tags, &b.VersionID, &b.Reason.Message, &b.Reason.Step,
		&reasonLogs, &created, &started, &finishedAt, &b.Resources.CPUCount, &b.Resources.MemoryMB)
	if err != nil {
		return TemplateBuild{}, err
	}
	if err := json.Unmarshal([]byte(tags), &b.Tags); err != nil {
		return TemplateBuild{}, fmt.Errorf("build %s: tags: %w", b.ID, err)
	}
	if err := json.Unmarshal([]byte(reasonLogs), &b.Reason.LogTail); err != nil {
		return TemplateBuild{}, fmt.Errorf("build %s: reason logs: %w", b.ID, err)
	}
	b.CreatedAt, b.StartedAt, b.FinishedAt = fromNanos(created), fromNanos(started), fromNanos(finishedAt)
	return b, nil
}

// newUUID returns a random (version 4) UUID: E2B build IDs are UUIDs.
func newUUID() string {
	b := randomBytes(16)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// CreateTemplateBuild records a new, waiting build of template that will
// carry tags once ready and give its sandboxes res.
func (s *Store) CreateTemplateBuild(ctx context.Context, template string, tags []string, res BuildResources) (TemplateBuild, error) {
	if template == "" || len(tags) == 0 {
		return TemplateBuild{}, fmt.Errorf("creating template build: template and tags are required: %w", ErrInvalid)
	}
	if res.CPUCount < 0 || res.MemoryMB < 0 {
		return TemplateBuild{}, fmt.Errorf("creating template build: negative resources %+v: %w", res, ErrInvalid)
	}
	b := TemplateBuild{ID: newUUID(), Template: template, Status: BuildWaiting, Tags: tags, Resources: res, CreatedAt: s.now().UTC()}
	tagJSON, err := json.Marshal(tags)
	if err != nil {
		return TemplateBuild{}, err
	}
	created, err := toNanos(b.CreatedAt)
	if err != nil {
		return TemplateBuild{}, err
	}
	err = s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO template_builds (id, template, status, tags, created_at, cpu_count, memory_mb)
			VALUES (?, ?, ?, ?, ?, ?, ?)`, b.ID, b.Template, b.Status, string(tagJSON), created, res.CPUCount, res.MemoryMB)
		return err
	})
	if err != nil {
		return TemplateBuild{}, fmt.Errorf("creating template build: %w", err)
	}
	return b, nil
}

// GetTemplateBuild returns build id of template, or an error wrapping
// ErrNotFound (also when the build belongs to another template).
func (s *Store) GetTemplateBuild(ctx context.Context, template, id string) (TemplateBuild, error) {
	b, err := scanBuild(s.r.QueryRowContext(ctx, `SELECT `+buildColumns+` FROM template_builds WHERE id = ? AND template = ?`, id, template))
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		return TemplateBuild{}, fmt.Errorf("getting build %s of template %s: %w", id, template, err)
	}
	return b, nil
}

// DefaultTag is the tag a build gets when the request names none, and the
// one a template name without a tag refers to.
const DefaultTag = "default"

// TemplateVersion returns the template-cache ID of the build that ref
// ("name:tag", or "name" for its default tag) points at, or an error
// wrapping ErrNotFound when no tag matches.
func (s *Store) TemplateVersion(ctx context.Context, ref string) (string, error) {
	name, tag, found := strings.Cut(ref, ":")
	if !found {
		tag = DefaultTag
	}
	b, err := s.TaggedBuild(ctx, name, tag)
	if err != nil {
		return "", err
	}
	return b.VersionID, nil
}

// TemplateKnown reports whether template has any build, in any state.
func (s *Store) TemplateKnown(ctx context.Context, template string) (bool, error) {
	var n int
	err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM (SELECT 1 FROM template_builds WHERE template = ? LIMIT 1)`, template).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("looking up template %s: %w", template, err)
	}
	return n > 0, nil
}

// StartTemplateBuild moves a waiting build to building. A build in another
// state gives an error wrapping ErrBuildState; an unknown one ErrNotFound.
func (s *Store) StartTemplateBuild(ctx context.Context, template, id string) error {
	started, err := toNanos(s.now())
	if err != nil {
		return err
	}
	err = s.write(ctx, func(tx *sql.Tx) error {
		var status BuildStatus
		err := tx.QueryRowContext(ctx, `SELECT status FROM template_builds WHERE id = ? AND template = ?`, id, template).Scan(&status)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		} else if err != nil {
			return err
		}
		if status != BuildWaiting {
			return fmt.Errorf("it is %s, not waiting: %w", status, ErrBuildState)
		}
		_, err = tx.ExecContext(ctx, `UPDATE template_builds SET status = 'building', started_at = ? WHERE id = ?`, started, id)
		return err
	})
	if err != nil {
		return fmt.Errorf("starting build %s of template %s: %w", id, template, err)
	}
	return nil
}

// FinishTemplateBuild records how a building build ended, with its log,
// and on success points the build's tags at it, all in one transaction.
func (s *Store) FinishTemplateBuild(ctx context.Context, id string, res BuildResult) error {
	if res.Status != BuildReady && res.Status != BuildError || (res.Status == BuildReady) != (res.VersionID != "") {
		return fmt.Errorf("finishing build %s: status %q with version %q: %w", id, res.Status, res.VersionID, ErrInvalid)
	}
	now := s.now().UTC()
	finished, err := toNanos(now)
	if err != nil {
		return err
	}
	tail, err := json.Marshal(append([]string{}, res.Reason.LogTail...))
	if err != nil {
		return err
	}
	err = s.write(ctx, func(tx *sql.Tx) error {
		b, err := scanBuild(tx.QueryRowContext(ctx, `SELECT `+buildColumns+` FROM template_builds WHERE id = ?`, id))
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		} else if err != nil {
			return err
		}
		if b.Status != BuildBuilding {
			return fmt.Errorf("it is %s, not building: %w", b.Status, ErrBuildState)
		}
		_, err = tx.ExecContext(ctx, `UPDATE template_builds SET status = ?, version_id = ?, reason_message = ?,
			reason_step = ?, reason_logs = ?, finished_at = ? WHERE id = ?`,
			res.Status, res.VersionID, res.Reason.Message, res.Reason.Step, string(tail), finished, id)
		if err != nil {
			return err
		}
		if err := insertBuildLogs(ctx, tx, id, res.Logs); err != nil {
			return err
		}
		if res.Status == BuildReady {
			return setTags(ctx, tx, b.Template, id, b.Tags, finished)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("finishing build %s: %w", id, err)
	}
	return nil
}

func insertBuildLogs(ctx context.Context, tx *sql.Tx, id string, logs []BuildLogEntry) error {
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO template_build_logs (build_id, seq, time, level, message, step) VALUES (?, ?, ?, ?, ?, ?)`)
	if err != nil {
		return err
	}
	defer stmt.Close()
	for i, e := range logs {
		t, err := toNanos(e.Time)
		if err != nil {
			return err
		}
		if _, err := stmt.ExecContext(ctx, id, i, t, e.Level, e.Message, e.Step); err != nil {
			return fmt.Errorf("storing log line %d: %w", i, err)
		}
	}
	return nil
}

func setTags(ctx context.Context, tx *sql.Tx, template, buildID string, tags []string, at sql.NullInt64) error {
	for _, tag := range tags {
		_, err := tx.ExecContext(ctx, `INSERT INTO template_tags (template, tag, build_id, created_at) VALUES (?, ?, ?, ?)
			ON CONFLICT (template, tag) DO UPDATE SET build_id = excluded.build_id, created_at = excluded.created_at`,
			template, tag, buildID, at)
		if err != nil {
			return fmt.Errorf("tagging %s:%s: %w", template, tag, err)
		}
	}
	return nil
}

// TemplateBuildLogs returns up to limit log lines of a finished build,
// from line offset on.
func (s *Store) TemplateBuildLogs(ctx context.Context, id string, offset, limit int) ([]BuildLogEntry, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT time, level, message, step FROM template_build_logs
		WHERE build_id = ? AND seq >= ? ORDER BY seq LIMIT ?`, id, offset, limit)
	if err != nil {
		return nil, fmt.Errorf("reading logs of build %s: %w", id, err)
	}
	defer rows.Close()
	var out []BuildLogEntry
	for rows.Next() {
		var (
			e BuildLogEntry
			t sql.NullInt64
		)
		if err := rows.Scan(&t, &e.Level, &e.Message, &e.Step); err != nil {
			return nil, fmt.Errorf("reading logs of build %s: %w", id, err)
		}
		e.Time = fromNanos(t)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading logs of build %s: %w", id, err)
	}
	return out, nil
}

// FailUnfinishedTemplateBuilds marks every building build failed with
// message: on start, no build of an earlier process is still running.
func (s *Store) FailUnfinishedTemplateBuilds(ctx context.Context, message string) (int64, error) {
	finished, err := toNanos(s.now())
	if err != nil {
		return 0, err
	}
	var n int64
	err = s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE template_builds SET status = 'error', reason_message = ?, finished_at = ?
			WHERE status = 'building'`, message, finished)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("failing unfinished template builds: %w", err)
	}
	return n, nil
}

// TemplateTags returns the tags of template, by tag.
func (s *Store) TemplateTags(ctx context.Context, template string) ([]TemplateTag, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT tag, build_id, created_at FROM template_tags WHERE template = ? ORDER BY tag`, template)
	if err != nil {
		return nil, fmt.Errorf("listing tags of template %s: %w", template, err)
	}
	defer rows.Close()
	out := []TemplateTag{}
	for rows.Next() {
		var (
			t  TemplateTag
			at sql.NullInt64
		)
		if err := rows.Scan(&t.Tag, &t.BuildID, &at); err != nil {
			return nil, fmt.Errorf("listing tags of template %s: %w", template, err)
		}
		t.CreatedAt = fromNanos(at)
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing tags of template %s: %w", template, err)
	}
	return out, nil
}

// TaggedBuild returns the build template:tag points at, or an error
// wrapping ErrNotFound.
func (s *Store) TaggedBuild(ctx context.Context, template, tag string) (TemplateBuild, error) {
	b, err := scanBuild(s.r.QueryRowContext(ctx, `SELECT `+prefixed("b.", buildColumns)+`
		FROM template_tags t JOIN template_builds b ON b.id = t.build_id WHERE t.template = ? AND t.tag = ?`, template, tag))
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		return TemplateBuild{}, fmt.Errorf("looking up %s:%s: %w", template, tag, err)
	}
	return b, nil
}

// AssignTemplateTags points tags of template at the build its tag from
// points at, and returns that build's ID.
func (s *Store) AssignTemplateTags(ctx context.Context, template, from string, tags []string) (string, error) {
	at, err := toNanos(s.now())
	if err != nil {
		return "", err
	}
	var buildID string
	err = s.write(ctx, func(tx *sql.Tx) error {
		err := tx.QueryRowContext(ctx, `SELECT build_id FROM template_tags WHERE template = ? AND tag = ?`, template, from).Scan(&buildID)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		} else if err != nil {
			return err
		}
		return setTags(ctx, tx, template, buildID, tags, at)
	})
	if err != nil {
		return "", fmt.Errorf("tagging %s:%s: %w", template, from, err)
	}
	return buildID, nil
}

// RemoveTemplateTags removes tags of template; a tag it does not have
// gives an error wrapping ErrNotFound and removes nothing.
func (s *Store) RemoveTemplateTags(ctx context.Context, template string, tags []string) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		for _, tag := range tags {
			res, err := tx.ExecContext(ctx, `DELETE FROM template_tags WHERE template = ? AND tag = ?`, template, tag)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n == 0 {
				return fmt.Errorf("tag %q: %w", tag, ErrNotFound)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("removing tags of template %s: %w", template, err)
	}
	return nil
}

// prefixed qualifies each column of a column list with prefix.
func prefixed(prefix, columns string) string {
	cols := strings.Split(columns, ",")
	for i, c := range cols {
		cols[i] = prefix + strings.TrimSpace(c)
	}
	return strings.Join(cols, ", ")
}
