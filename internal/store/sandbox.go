package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// State is a sandbox lifecycle state.
type State string

// Sandbox states: starting → running ⇄ paused → killed, or error.
const (
	StateStarting State = "starting"
	StateRunning  State = "running"
	StatePaused   State = "paused"
	StateKilled   State = "killed"
	StateError    State = "error"
)

// Valid reports whether s is one of the defined states.
func (s State) Valid() bool {
	switch s {
	case StateStarting, StateRunning, StatePaused, StateKilled, StateError:
		return true
	}
	return false
}

// PauseKind is how a paused sandbox is kept.
type PauseKind string

// The pause kinds; the zero PauseKind is a sandbox that is not paused.
const (
	// PausedInRAM: frozen in place, processes and memory in the host's RAM.
	PausedInRAM PauseKind = "ram"
	// PausedOnDisk: saved with its processes and memory (a memory
	// snapshot) and stopped; it resumes where it was.
	PausedOnDisk PauseKind = "disk"
	// PausedFiles: its file system saved (a files snapshot) and stopped;
	// it resumes by booting again over those files.
	PausedFiles PauseKind = "files"
)

// Valid reports whether k is a pause kind or empty.
func (k PauseKind) Valid() bool {
	switch k {
	case "", PausedInRAM, PausedOnDisk, PausedFiles:
		return true
	}
	return false
}

// Common values of [Sandbox.Reason]. An error reason is free text.
const (
	ReasonTimeout  = "timeout"  // endAt passed
	ReasonKilled   = "killed"   // killed through the API
	ReasonOOM      = "oom"      // out of memory
	ReasonShutdown = "shutdown" // the host shut down
)

// Sandbox is the stored record of one sandbox.
type Sandbox struct {
	ID         string
	TemplateID string
	Alias      string
	State      State
	// Reason says why the sandbox was terminated or failed: one of the
	// Reason constants or error text. Empty while it is alive.
	Reason     string
	StartedAt  time.Time
	EndAt      time.Time // absolute timeout; zero = unset
	CPUCount   int
	MemoryMB   int
	DiskSizeMB int
	Metadata   map[string]string
	EnvVars    map[string]string

	EnvdAccessToken string
	// Secure: the create asked for a secured sandbox, whose every port of
	// ours (not only envd's) requires EnvdAccessToken.
	Secure             bool
	TrafficAccessToken string
	// AllowInternetAccess is nil when the create request did not say.
	AllowInternetAccess *bool
	AutoPause           bool
	// Network is the create-time network config, opaque to the store.
	Network json.RawMessage

	// Timeout is the create-time timeout, whole seconds: what a resume
	// by traffic gives the sandbox again.
	Timeout time.Duration
	// AutoPauseFiles: the timeout's pause (AutoPause) keeps the file
	// system only (E2B's autoPauseMemory false).
	AutoPauseFiles bool
	// AutoResume: a request through the router resumes the sandbox when
	// it is paused.
	AutoResume bool
	// PausedAs is how a paused sandbox is kept; empty while it is not.
	PausedAs PauseKind
	// SnapshotID is the snapshot the sandbox's files (and, paused to disk,
	// its memory) come from: what it was created or forked from, or what
	// its pause saved. Empty: its template alone.
	SnapshotID string
	// ResumedBy says what resumed the sandbox last: "connect" or
	// "traffic"; empty if it never was.
	ResumedBy string
	// Reboots counts the times the sandbox booted again over its kept
	// file system (a resume of a files-only pause, or a reboot).
	Reboots int
	// VolumeMounts are the volumes mounted into the sandbox, by name.
	VolumeMounts []VolumeMount

	// Backend names the isolation backend that runs the sandbox.
	Backend string
	// BackendState is what Backend needs to adopt or clean up the sandbox
	// after a restart; opaque to the store.
	BackendState json.RawMessage

	// UpdatedAt is set by the store on every write.
	UpdatedAt time.Time
}

// sandboxColumns is the column list every sandbox query selects, in the
// order scanSandbox reads and sandboxValues writes.
const sandboxColumns = `id, template_id, alias, state, reason, started_at, end_at,
	cpu_count, memory_mb, disk_size_mb, metadata, env_vars,
	envd_access_token, secure, traffic_access_token, allow_internet_access, auto_pause,
	network, backend, backend_state, updated_at,
	timeout_sec, auto_pause_files, auto_resume, paused_as, snapshot_id, resumed_by, reboots, volume_mounts`

// sandboxValues returns the column values for sb in sandboxColumns order.
func sandboxValues(sb *Sandbox) ([]any, error) {
	if sb.ID == "" {
		return nil, fmt.Errorf("empty sandbox id: %w", ErrInvalid)
	}
	if sb.TemplateID == "" {
		return nil, fmt.Errorf("empty template id: %w", ErrInvalid)
	}
	if !sb.State.Valid() {
		return nil, fmt.Errorf("state %q: %w", sb.State, ErrInvalid)
	}
	if sb.StartedAt.IsZero() {
		return nil, fmt.Errorf("zero start time: %w", ErrInvalid)
	}
	startedAt, err := toNanos(sb.StartedAt)
	if err != nil {
		return nil, fmt.Errorf("start time: %w", err)
	}
	endAt, err := toNanos(sb.EndAt)
	if err != nil {
		return nil, fmt.Errorf("end time: %w", err)
	}
	updatedAt, err := toNanos(sb.UpdatedAt)
	if err != nil {
		return nil, fmt.Errorf("update time: %w", err)
	}
	metadata, err := encodeMap(sb.Metadata)
	if err != nil {
		return nil, fmt.Errorf("encoding metadata: %w", err)
	}
	envVars, err := encodeMap(sb.EnvVars)
	if err != nil {
		return nil, fmt.Errorf("encoding env vars: %w", err)
	}
	network, err := rawValue(sb.Network)
	if err != nil {
		return nil, fmt.Errorf("network: %w", err)
	}
	backendState, err := rawValue(sb.BackendState)
	if err != nil {
		return nil, fmt.Errorf("backend state: %w", err)
	}
	var allowInternet sql.NullBool
	if sb.AllowInternetAccess != nil {
		allowInternet = sql.NullBool{Bool: *sb.AllowInternetAccess, Valid: true}
	}
	if !sb.PausedAs.Valid() {
		return nil, fmt.Errorf("pause kind %q: %w", sb.PausedAs, ErrInvalid)
	}
	mounts, err := json.Marshal(append([]VolumeMount{}, sb.VolumeMounts...))
	if err != nil {
		return nil, fmt.Errorf("encoding volume mounts: %w", err)
	}
	return []any{
		sb.ID, sb.TemplateID, sb.Alias, string(sb.State), sb.Reason, startedAt, endAt,
		sb.CPUCount, sb.MemoryMB, sb.DiskSizeMB, metadata, envVars,
		sb.EnvdAccessToken, sb.Secure, sb.TrafficAccessToken, allowInternet, sb.AutoPause,
		network, sb.Backend, backendState, updatedAt,
		int64(sb.Timeout / time.Second), sb.AutoPauseFiles, sb.AutoResume, string(sb.PausedAs), sb.SnapshotID, sb.ResumedBy, sb.Reboots,
		string(mounts),
	}, nil
}

type scanner interface{ Scan(dest ...any) error }

// scanSandbox reads one row selected with sandboxColumns.
func scanSandbox(row scanner) (Sandbox, error) {
	var (
		sb                    Sandbox
		state                 string
		startedAt, endAt      sql.NullInt64
		updatedAt             sql.NullInt64
		metadata, envVars     string
		allowInternet         sql.NullBool
		network, backendState sql.NullString
		timeout               int64
		pausedAs, mounts      string
	)
	err := row.Scan(&sb.ID, &sb.TemplateID, &sb.Alias, &state, &sb.Reason, &startedAt, &endAt,
		&sb.CPUCount, &sb.MemoryMB, &sb.DiskSizeMB, &metadata, &envVars,
		&sb.EnvdAccessToken, &sb.Secure, &sb.TrafficAccessToken, &allowInternet, &sb.AutoPause,
		&network, &sb.Backend, &backendState, &updatedAt,
		&timeout, &sb.AutoPauseFiles, &sb.AutoResume, &pausedAs, &sb.SnapshotID, &sb.ResumedBy, &sb.Reboots, &mounts)
	if err != nil {
		return Sandbox{}, err
	}
	sb.State = State(state)
	sb.Timeout = time.Duration(timeout) * time.Second
	sb.PausedAs = PauseKind(pausedAs)
	if err := json.Unmarshal([]byte(mounts), &sb.VolumeMounts); err != nil {
		return Sandbox{}, fmt.Errorf("decoding volume mounts of %s: %w", sb.ID, err)
	}
	if len(sb.VolumeMounts) == 0 {
		sb.VolumeMounts = nil
	}
	sb.StartedAt = fromNanos(startedAt)
	sb.EndAt = fromNanos(endAt)
	sb.UpdatedAt = fromNanos(updatedAt)
	if sb.Metadata, err = decodeMap(metadata); err != nil {
		return Sandbox{}, fmt.Errorf("decoding metadata of %s: %w", sb.ID, err)
	}
	if sb.EnvVars, err = decodeMap(envVars); err != nil {
		return Sandbox{}, fmt.Errorf("decoding env vars of %s: %w", sb.ID, err)
	}
	if allowInternet.Valid {
		v := allowInternet.Bool
		sb.AllowInternetAccess = &v
	}
	if network.Valid {
		sb.Network = json.RawMessage(network.String)
	}
	if backendState.Valid {
		sb.BackendState = json.RawMessage(backendState.String)
	}
	return sb, nil
}

// encodeMap stores a nil or empty map as "{}".
func encodeMap(m map[string]string) (string, error) {
	if len(m) == 0 {
		return "{}", nil
	}
	b, err := json.Marshal(m)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// decodeMap reads back what encodeMap wrote; an empty map becomes nil.
func decodeMap(s string) (map[string]string, error) {
	var m map[string]string
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return nil, err
	}
	if len(m) == 0 {
		return nil, nil
	}
	return m, nil
}

// rawValue stores an empty raw message as NULL and rejects malformed JSON.
func rawValue(raw json.RawMessage) (sql.NullString, error) {
	if len(raw) == 0 {
		return sql.NullString{}, nil
	}
	if !json.Valid(raw) {
		return sql.NullString{}, fmt.Errorf("malformed JSON: %w", ErrInvalid)
	}
	return sql.NullString{String: string(raw), Valid: true}, nil
}

// CreateSandbox inserts sb and returns it as stored (times in UTC, UpdatedAt
// set). A zero StartedAt is set to now. It returns an error wrapping
// ErrExists if a sandbox with the same ID exists (in any state).
func (s *Store) CreateSandbox(ctx context.Context, sb Sandbox) (Sandbox, error) {
	now := s.now()
	if sb.StartedAt.IsZero() {
		sb.StartedAt = now
	}
	sb.UpdatedAt = now
	vals, err := sandboxValues(&sb)
	if err != nil {
		return Sandbox{}, fmt.Errorf("creating sandbox %s: %w", sb.ID, err)
	}
	q := `INSERT INTO sandboxes (` + sandboxColumns + `) VALUES (` + placeholders(len(vals)) + `)
		ON CONFLICT (id) DO NOTHING`
	res, err := s.w.ExecContext(ctx, q, vals...)
	if err != nil {
		return Sandbox{}, fmt.Errorf("creating sandbox %s: %w", sb.ID, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return Sandbox{}, fmt.Errorf("creating sandbox %s: %w", sb.ID, err)
	} else if n == 0 {
		return Sandbox{}, fmt.Errorf("creating sandbox %s: %w", sb.ID, ErrExists)
	}
	return normalize(sb), nil
}

// normalize returns sb as a read would: UTC times without monotonic
// readings, empty maps and raw messages as nil.
func normalize(sb Sandbox) Sandbox {
	utc := func(t time.Time) time.Time {
		if t.IsZero() {
			return time.Time{}
		}
		return time.Unix(0, t.UnixNano()).UTC()
	}
	sb.StartedAt, sb.EndAt, sb.UpdatedAt = utc(sb.StartedAt), utc(sb.EndAt), utc(sb.UpdatedAt)
	if len(sb.Metadata) == 0 {
		sb.Metadata = nil
	}
	if len(sb.EnvVars) == 0 {
		sb.EnvVars = nil
	}
	if len(sb.Network) == 0 {
		sb.Network = nil
	}
	if len(sb.BackendState) == 0 {
		sb.BackendState = nil
	}
	if len(sb.VolumeMounts) == 0 {
		sb.VolumeMounts = nil
	}
	if sb.AllowInternetAccess != nil {
		v := *sb.AllowInternetAccess
		sb.AllowInternetAccess = &v
	}
	return sb
}

// GetSandbox returns the sandbox with the given ID, in any state, or an
// error wrapping ErrNotFound.
func (s *Store) GetSandbox(ctx context.Context, id string) (Sandbox, error) {
	sb, err := getSandbox(ctx, s.r, id)
	if err != nil {
		return Sandbox{}, fmt.Errorf("getting sandbox %s: %w", id, err)
	}
	return sb, nil
}

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func getSandbox(ctx context.Context, q querier, id string) (Sandbox, error) {
	row := q.QueryRowContext(ctx, `SELECT `+sandboxColumns+` FROM sandboxes WHERE id = ?`, id)
	sb, err := scanSandbox(row)
	if errors.Is(err, sql.ErrNoRows) {
		return Sandbox{}, ErrNotFound
	}
	return sb, err
}

// UpdateSandbox reads the sandbox, lets fn change it, and writes it back, all
// in one write transaction; it returns the record as stored. If fn returns an
// error nothing is written and that error is returned unwrapped, so fn can
// refuse a transition (for example "already paused") with the caller's own
// error. fn must not change the ID and must not call the Store's write
// methods (the single writer connection is held while fn runs). UpdatedAt is
// set by the store.
func (s *Store) UpdateSandbox(ctx context.Context, id string, fn func(*Sandbox) error) (Sandbox, error) {
	var out Sandbox
	var fnErr error
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		out, fnErr, err = s.updateSandboxTx(ctx, tx, id, fn)
		return err
	})
	if fnErr != nil {
		return Sandbox{}, fnErr
	}
	if err != nil {
		return Sandbox{}, fmt.Errorf("updating sandbox %s: %w", id, err)
	}
	return out, nil
}

// updateSandboxTx is UpdateSandbox within tx: fnErr is fn's error, err
// any other (both abort the transaction).
func (s *Store) updateSandboxTx(ctx context.Context, tx *sql.Tx, id string, fn func(*Sandbox) error) (out Sandbox, fnErr, err error) {
	sb, err := getSandbox(ctx, tx, id)
	if err != nil {
		return Sandbox{}, nil, err
	}
	if err := fn(&sb); err != nil {
		return Sandbox{}, err, err
	}
	if sb.ID != id {
		return Sandbox{}, nil, fmt.Errorf("changing id to %q: %w", sb.ID, ErrInvalid)
	}
	sb.UpdatedAt = s.now()
	vals, err := sandboxValues(&sb)
	if err != nil {
		return Sandbox{}, nil, err
	}
	// vals[0] is the id: SET the rest, match on the id.
	cols := strings.Split(sandboxColumns, ",")
	sets := make([]string, 0, len(cols)-1)
	for _, c := range cols[1:] {
		sets = append(sets, strings.TrimSpace(c)+" = ?")
	}
	args := append(vals[1:], id)
	if _, err := tx.ExecContext(ctx, `UPDATE sandboxes SET `+strings.Join(sets, ", ")+` WHERE id = ?`, args...); err != nil {
		return Sandbox{}, nil, err
	}
	return normalize(sb), nil, nil
}

// SetState records a state change and its reason (empty while alive).
func (s *Store) SetState(ctx context.Context, id string, state State, reason string) error {
	if !state.Valid() {
		return fmt.Errorf("setting state of sandbox %s: state %q: %w", id, state, ErrInvalid)
	}
	return s.setColumns(ctx, "setting state of sandbox "+id, id, "state = ?, reason = ?", string(state), reason)
}

// SetEndAt records a new absolute timeout; the zero time clears it.
func (s *Store) SetEndAt(ctx context.Context, id string, endAt time.Time) error {
	v, err := toNanos(endAt)
	if err != nil {
		return fmt.Errorf("setting end time of sandbox %s: %w", id, err)
	}
	return s.setColumns(ctx, "setting end time of sandbox "+id, id, "end_at = ?", v)
}

// SetBackendState records what the isolation backend needs to adopt or clean
// up the sandbox after a restart; nil clears it.
func (s *Store) SetBackendState(ctx context.Context, id string, state json.RawMessage) error {
	v, err := rawValue(state)
	if err != nil {
		return fmt.Errorf("setting backend state of sandbox %s: %w", id, err)
	}
	return s.setColumns(ctx, "setting backend state of sandbox "+id, id, "backend_state = ?", v)
}

// setColumns runs UPDATE sandboxes SET <set>, updated_at = now WHERE id = id.
func (s *Store) setColumns(ctx context.Context, step, id, set string, args ...any) error {
	args = append(args, s.now().UnixNano(), id)
	res, err := s.w.ExecContext(ctx, `UPDATE sandboxes SET `+set+`, updated_at = ? WHERE id = ?`, args...)
	if err != nil {
		return fmt.Errorf("%s: %w", step, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("%s: %w", step, err)
	}
	if n == 0 {
		return fmt.Errorf("%s: %w", step, ErrNotFound)
	}
	return nil
}

// PurgeKilled deletes killed sandboxes whose last update (the kill) is
// before cutoff, and returns how many it deleted.
func (s *Store) PurgeKilled(ctx context.Context, cutoff time.Time) (int64, error) {
	c, err := toNanos(cutoff)
	if err != nil {
		return 0, fmt.Errorf("purging killed sandboxes: %w", err)
	}
	res, err := s.w.ExecContext(ctx, `DELETE FROM sandboxes WHERE state = ? AND updated_at < ?`, string(StateKilled), c)
	if err != nil {
		return 0, fmt.Errorf("purging killed sandboxes: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("purging killed sandboxes: %w", err)
	}
	return n, nil
}

func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}
