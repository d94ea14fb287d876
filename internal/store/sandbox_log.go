package store

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"
)

// SandboxLog is one line of a sandbox's own log: what the server did to it
// (created, paused, resumed, killed and why) and what its envd reported
// (processes started and ended).
type SandboxLog struct {
	Time    time.Time
	Level   string // debug, info, warn or error (E2B's LogLevel)
	Logger  string // who said it: the server's lifecycle or envd
	Message string
	Fields  map[string]string
}

// LogLevels are the levels of SandboxLog, least severe first.
var LogLevels = []string{"debug", "info", "warn", "error"}

// LevelName is the E2B log level of l, one of LogLevels.
func LevelName(l slog.Level) string {
	switch {
	case l >= slog.LevelError:
		return "error"
	case l >= slog.LevelWarn:
		return "warn"
	case l >= slog.LevelInfo:
		return "info"
	}
	return "debug"
}

// SandboxLogQuery selects lines of one sandbox's log.
type SandboxLogQuery struct {
	// From is the first (Backward: the last) time to return; zero: from
	// the oldest (Backward: the newest).
	From     time.Time
	Backward bool
	// MinLevel leaves out the levels below it; "": all.
	MinLevel string
	// Search keeps the lines whose message contains it (case-sensitive).
	Search string
	Limit  int // 0: no limit
}

// AppendSandboxLogs adds lines to sandbox id's log and drops its oldest
// lines beyond the newest keep, so that one sandbox's log stays bounded.
// An error wrapping ErrNotFound when no such sandbox is recorded.
func (s *Store) AppendSandboxLogs(ctx context.Context, id string, lines []SandboxLog, keep int) error {
	if len(lines) == 0 {
		return nil
	}
	err := s.write(ctx, func(tx *sql.Tx) error {
		if _, err := getSandbox(ctx, tx, id); err != nil {
			return err
		}
		for _, l := range lines {
			t, err := toNanos(l.Time)
			if err != nil {
				return err
			}
			fields, err := encodeMap(l.Fields)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO sandbox_logs (sandbox_id, time, level, logger, message, fields) VALUES (?, ?, ?, ?, ?, ?)`,
				id, t, l.Level, l.Logger, l.Message, fields); err != nil {
				return err
			}
		}
		_, err := tx.ExecContext(ctx, `DELETE FROM sandbox_logs WHERE sandbox_id = ? AND seq <=
			(SELECT seq FROM sandbox_logs WHERE sandbox_id = ? ORDER BY seq DESC LIMIT 1 OFFSET ?)`, id, id, keep)
		return err
	})
	if err != nil {
		return fmt.Errorf("recording log of sandbox %s: %w", id, err)
	}
	return nil
}

// SandboxLogs returns lines of sandbox id's log, oldest first (Backward:
// newest first); none, not an error, for a sandbox with no log.
func (s *Store) SandboxLogs(ctx context.Context, id string, q SandboxLogQuery) ([]SandboxLog, error) {
	where := []string{"sandbox_id = ?"}
	args := []any{id}
	if !q.From.IsZero() {
		t, err := toNanos(q.From)
		if err != nil {
			return nil, fmt.Errorf("reading log of sandbox %s: %w", id, err)
		}
		where = append(where, map[bool]string{false: "time >= ?", true: "time <= ?"}[q.Backward])
		args = append(args, t)
	}
	if q.MinLevel != "" {
		i := slices.Index(LogLevels, q.MinLevel)
		if i < 0 {
			return nil, fmt.Errorf("reading log of sandbox %s: level %q is none of %s: %w", id, q.MinLevel, strings.Join(LogLevels, ", "), ErrInvalid)
		}
		where = append(where, "level IN ("+placeholders(len(LogLevels)-i)+")")
		for _, l := range LogLevels[i:] {
			args = append(args, l)
		}
	}
	if q.Search != "" {
		where = append(where, "instr(message, ?) > 0")
		args = append(args, q.Search)
	}
	order := "time, seq"
	if q.Backward {
		order = "time DESC, seq DESC"
	}
	query := `SELECT time, level, logger, message, fields FROM sandbox_logs WHERE ` + strings.Join(where, " AND ") + ` ORDER BY ` + order
	if q.Limit > 0 {
		query += ` LIMIT ?`
		args = append(args, q.Limit)
	}
	rows, err := s.r.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("reading log of sandbox %s: %w", id, err)
	}
	defer rows.Close()
	var out []SandboxLog
	for rows.Next() {
		var l SandboxLog
		var t sql.NullInt64
		var fields string
		if err := rows.Scan(&t, &l.Level, &l.Logger, &l.Message, &fields); err != nil {
			return nil, fmt.Errorf("reading log of sandbox %s: %w", id, err)
		}
		l.Time = fromNanos(t)
		if l.Fields, err = decodeMap(fields); err != nil {
			return nil, fmt.Errorf("reading log of sandbox %s: fields: %w", id, err)
		}
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading log of sandbox %s: %w", id, err)
	}
	return out, nil
}

// PurgeSandboxLogs deletes the logs of sandboxes that ended (killed or
// failed) before cutoff, and returns how many lines it deleted.
func (s *Store) PurgeSandboxLogs(ctx context.Context, cutoff time.Time) (int64, error) {
	c, err := toNanos(cutoff)
	if err != nil {
		return 0, fmt.Errorf("purging sandbox logs: %w", err)
	}
	res, err := s.w.ExecContext(ctx, `DELETE FROM sandbox_logs WHERE sandbox_id IN
		(SELECT id FROM sandboxes WHERE state IN (?, ?) AND updated_at < ?)`, string(StateKilled), string(StateError), c)
	if err != nil {
		return 0, fmt.Errorf("purging sandbox logs: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("purging sandbox logs: %w", err)
	}
	return n, nil
}
