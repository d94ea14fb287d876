package store

import (
	"context"
	"database/sql"
	"fmt"
)

// migrations is the schema history. Entry i moves the database from
// user_version i to i+1. Append only: never edit an entry that has shipped.
var migrations = []string{
	// 1: sandboxes and API keys. Times are unix nanoseconds, UTC.
	`
CREATE TABLE sandboxes (
	id                    TEXT PRIMARY KEY NOT NULL,
	template_id           TEXT NOT NULL,
	alias                 TEXT NOT NULL DEFAULT '',
	state                 TEXT NOT NULL CHECK (state IN ('starting', 'running', 'paused', 'killed', 'error')),
	reason                TEXT NOT NULL DEFAULT '',
	started_at            INTEGER NOT NULL,
	end_at                INTEGER,
	cpu_count             INTEGER NOT NULL DEFAULT 0,
	memory_mb             INTEGER NOT NULL DEFAULT 0,
	disk_size_mb          INTEGER NOT NULL DEFAULT 0,
	metadata              TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(metadata)),
	env_vars              TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(env_vars)),
	envd_access_token     TEXT NOT NULL DEFAULT '',
	traffic_access_token  TEXT NOT NULL DEFAULT '',
	allow_internet_access INTEGER CHECK (allow_internet_access IN (0, 1)),
	auto_pause            INTEGER NOT NULL DEFAULT 0 CHECK (auto_pause IN (0, 1)),
	network               TEXT CHECK (network IS NULL OR json_valid(network)),
	backend               TEXT NOT NULL DEFAULT '',
	backend_state         TEXT CHECK (backend_state IS NULL OR json_valid(backend_state)),
	updated_at            INTEGER NOT NULL
) STRICT;
CREATE INDEX sandboxes_state_started ON sandboxes (state, started_at, id);
CREATE INDEX sandboxes_template ON sandboxes (template_id);
CREATE INDEX sandboxes_alias ON sandboxes (alias) WHERE alias != '';

CREATE TABLE api_keys (
	id           TEXT PRIMARY KEY NOT NULL,
	name         TEXT NOT NULL,
	hash         BLOB NOT NULL UNIQUE CHECK (length(hash) = 32),
	prefix       TEXT NOT NULL,
	suffix       TEXT NOT NULL,
	created_at   INTEGER NOT NULL,
	last_used_at INTEGER
) STRICT;
`,
	// 2: template builds of the E2B template build API (see template.go).
	`
CREATE TABLE template_builds (
	id             TEXT PRIMARY KEY NOT NULL,
	template       TEXT NOT NULL,
	status         TEXT NOT NULL CHECK (status IN ('waiting', 'building', 'ready', 'error')),
	tags           TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(tags)),
	version_id     TEXT NOT NULL DEFAULT '',
	reason_message TEXT NOT NULL DEFAULT '',
	reason_step    TEXT NOT NULL DEFAULT '',
	reason_logs    TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(reason_logs)),
	created_at     INTEGER NOT NULL,
	started_at     INTEGER,
	finished_at    INTEGER
) STRICT;
CREATE INDEX template_builds_template ON template_builds (template, status, finished_at);

CREATE TABLE template_build_logs (
	build_id TEXT NOT NULL REFERENCES template_builds (id) ON DELETE CASCADE,
	seq      INTEGER NOT NULL,
	time     INTEGER NOT NULL,
	level    TEXT NOT NULL,
	message  TEXT NOT NULL,
	step     TEXT NOT NULL DEFAULT '',
	PRIMARY KEY (build_id, seq)
) STRICT;

CREATE TABLE template_tags (
	template   TEXT NOT NULL,
	tag        TEXT NOT NULL,
	build_id   TEXT NOT NULL REFERENCES template_builds (id) ON DELETE CASCADE,
	created_at INTEGER NOT NULL,
	PRIMARY KEY (template, tag)
) STRICT;
`,
	// 3: whether a sandbox was created secure. Every sandbox has an envd
	// access token from now on, so the token no longer says so; until now
	// only secure ones had one.
	`
ALTER TABLE sandboxes ADD COLUMN secure INTEGER NOT NULL DEFAULT 0 CHECK (secure IN (0, 1));
UPDATE sandboxes SET secure = 1 WHERE envd_access_token != '';
`,
	// 4: the resources a template build gives its sandboxes (E2B's
	// cpuCount and memoryMB of POST /v3/templates); 0 is the server's
	// default.
	`
ALTER TABLE template_builds ADD COLUMN cpu_count INTEGER NOT NULL DEFAULT 0;
ALTER TABLE template_builds ADD COLUMN memory_mb INTEGER NOT NULL DEFAULT 0;
`,
	// 5: the longest sandbox timeout an API key may ask for, in
	// nanoseconds; 0: the key has no limit of its own.
	`
ALTER TABLE api_keys ADD COLUMN max_timeout INTEGER NOT NULL DEFAULT 0 CHECK (max_timeout >= 0);
`,
	// 6: the lifecycle issue: snapshots (persistent, and the internal ones
	// of forks and of sandboxes paused to disk), and per sandbox its
	// create-time timeout, auto-pause and auto-resume policy, how it is
	// paused, the snapshot it runs from and how it last resumed.
	`
CREATE TABLE snapshots (
	id                TEXT PRIMARY KEY NOT NULL,
	name              TEXT NOT NULL DEFAULT '',
	tag               TEXT NOT NULL DEFAULT '',
	listed            INTEGER NOT NULL CHECK (listed IN (0, 1)),
	kind              TEXT NOT NULL CHECK (kind IN ('files', 'memory')),
	sandbox_id        TEXT NOT NULL,
	template_id       TEXT NOT NULL,
	alias             TEXT NOT NULL DEFAULT '',
	backend           TEXT NOT NULL,
	cpu_count         INTEGER NOT NULL,
	memory_mb         INTEGER NOT NULL,
	disk_size_mb      INTEGER NOT NULL,
	envd_access_token TEXT NOT NULL DEFAULT '',
	size_bytes        INTEGER NOT NULL DEFAULT 0,
	created_at        INTEGER NOT NULL
) STRICT;
CREATE UNIQUE INDEX snapshots_name_tag ON snapshots (name, tag) WHERE name != '';
CREATE INDEX snapshots_listed_created ON snapshots (listed, created_at, id);

ALTER TABLE sandboxes ADD COLUMN timeout_sec INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sandboxes ADD COLUMN auto_pause_files INTEGER NOT NULL DEFAULT 0 CHECK (auto_pause_files IN (0, 1));
ALTER TABLE sandboxes ADD COLUMN auto_resume INTEGER NOT NULL DEFAULT 0 CHECK (auto_resume IN (0, 1));
ALTER TABLE sandboxes ADD COLUMN paused_as TEXT NOT NULL DEFAULT '' CHECK (paused_as IN ('', 'ram', 'disk', 'files'));
ALTER TABLE sandboxes ADD COLUMN snapshot_id TEXT NOT NULL DEFAULT '';
ALTER TABLE sandboxes ADD COLUMN resumed_by TEXT NOT NULL DEFAULT '';
ALTER TABLE sandboxes ADD COLUMN reboots INTEGER NOT NULL DEFAULT 0;
CREATE INDEX sandboxes_snapshot ON sandboxes (snapshot_id) WHERE snapshot_id != '';
UPDATE sandboxes SET paused_as = 'ram' WHERE state = 'paused';
`,
	// 7: volumes (E2B's), and the volumes each sandbox mounts.
	`
CREATE TABLE volumes (
	id         TEXT PRIMARY KEY NOT NULL,
	name       TEXT NOT NULL UNIQUE,
	size_bytes INTEGER NOT NULL,
	created_at INTEGER NOT NULL
) STRICT;
ALTER TABLE sandboxes ADD COLUMN volume_mounts TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(volume_mounts));
`,
	// 8: each sandbox's own log (E2B's sandbox logs): its lifecycle and
	// envd's processes, kept a while after it ends (sandbox_log.go).
	`
CREATE TABLE sandbox_logs (
	seq        INTEGER PRIMARY KEY AUTOINCREMENT,
	sandbox_id TEXT NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
	time       INTEGER NOT NULL,
	level      TEXT NOT NULL CHECK (level IN ('debug', 'info', 'warn', 'error')),
	logger     TEXT NOT NULL,
	message    TEXT NOT NULL,
	fields     TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(fields))
) STRICT;
CREATE INDEX sandbox_logs_sandbox ON sandbox_logs (sandbox_id, time, seq);
`,
}

// migrate applies every migration newer than the database's user_version,
// each in its own transaction together with the version bump.
func (s *Store) migrate(ctx context.Context) error {
	var version int
	if err := s.w.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
		return fmt.Errorf("reading schema version: %w", err)
	}
	if version > len(migrations) {
		return fmt.Errorf("schema version %d is newer than this binary supports (%d)", version, len(migrations))
	}
	for i := version; i < len(migrations); i++ {
		err := s.write(ctx, func(tx *sql.Tx) error {
			// Re-check inside the transaction: another process may have
			// migrated between our read and BEGIN IMMEDIATE.
			var v int
			if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
				return fmt.Errorf("reading schema version: %w", err)
			}
			if v > i {
				return nil
			}
			if _, err := tx.ExecContext(ctx, migrations[i]); err != nil {
				return err
			}
			// PRAGMA takes no bound parameters; i+1 is our own integer.
			if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", i+1)); err != nil {
				return fmt.Errorf("setting schema version: %w", err)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("migrating schema to version %d: %w", i+1, err)
		}
	}
	return nil
}
