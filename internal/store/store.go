package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver
)

// Sentinel errors, wrapped by the errors this package returns.
var (
	// ErrNotFound means the sandbox or API key does not exist (or an API key
	// presented for verification is unknown, revoked or malformed).
	ErrNotFound = errors.New("not found")
	// ErrExists means a record with the same identity already exists.
	ErrExists = errors.New("already exists")
	// ErrInvalidToken means a list pagination token could not be decoded or
	// does not belong to the query it was given with.
	ErrInvalidToken = errors.New("invalid pagination token")
	// ErrInvalid means an argument failed validation (unknown state or
	// order, malformed API key, malformed JSON, missing ID).
	ErrInvalid = errors.New("invalid argument")
)

// busyTimeout is how long a connection waits for another process's lock.
const busyTimeout = 5 * time.Second

// Store is the SQLite-backed store. It is safe for concurrent use.
type Store struct {
	w *sql.DB // single writer connection
	r *sql.DB // read-only connections

	// now returns the current time; tests replace it.
	now func() time.Time
}

// Open opens (creating if needed) the database at path and brings its schema
// up to date. The file and its parent directory are created private to the
// owner because the database holds sandbox access tokens.
func Open(ctx context.Context, path string) (*Store, error) {
	if path == "" || strings.ContainsRune(path, '?') {
		return nil, fmt.Errorf("opening store: database path %q: %w", path, ErrInvalid)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("opening store: creating directory: %w", err)
	}
	// Create the file ourselves so its mode is 0600; SQLite gives the -wal
	// and -shm files the mode of the database file.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening store: creating database file: %w", err)
	}
	f.Close()

	common := fmt.Sprintf("_pragma=busy_timeout(%d)&_pragma=foreign_keys(1)&_pragma=synchronous(NORMAL)",
		busyTimeout.Milliseconds())
	w, err := sql.Open("sqlite", path+"?"+common+"&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("opening store: writer: %w", err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)

	s := &Store{w: w, now: time.Now}
	// Migrate on the writer before any reader connects: the writer switches
	// the file to WAL, which readers then inherit.
	if err := s.migrate(ctx); err != nil {
		w.Close()
		return nil, fmt.Errorf("opening store: %w", err)
	}

	r, err := sql.Open("sqlite", path+"?"+common+"&_query_only=1")
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("opening store: readers: %w", err)
	}
	r.SetMaxOpenConns(max(4, runtime.GOMAXPROCS(0)))
	r.SetMaxIdleConns(max(4, runtime.GOMAXPROCS(0)))
	if err := r.PingContext(ctx); err != nil {
		w.Close()
		r.Close()
		return nil, fmt.Errorf("opening store: connecting reader: %w", err)
	}
	s.r = r
	return s, nil
}

// Close closes the database. It does not wait for callers still using the
// store; they get errors.
func (s *Store) Close() error {
	var errs []error
	if s.r != nil {
		errs = append(errs, s.r.Close())
	}
	errs = append(errs, s.w.Close())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("closing store: %w", err)
	}
	return nil
}

// write runs fn in a write transaction (BEGIN IMMEDIATE) on the writer
// connection and commits if fn returns nil.
func (s *Store) write(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("beginning transaction: %w", err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("committing: %w", err)
	}
	return nil
}

// Bounds of what a unix-nanosecond int64 can hold.
var (
	minTime = time.Unix(0, -1<<63).UTC()
	maxTime = time.Unix(0, 1<<63-1).UTC()
)

// toNanos converts t to the stored form. The zero time is stored as NULL.
func toNanos(t time.Time) (sql.NullInt64, error) {
	if t.IsZero() {
		return sql.NullInt64{}, nil
	}
	if t.Before(minTime) || t.After(maxTime) {
		return sql.NullInt64{}, fmt.Errorf("time %s out of range: %w", t, ErrInvalid)
	}
	return sql.NullInt64{Int64: t.UnixNano(), Valid: true}, nil
}

// fromNanos is the inverse of toNanos.
func fromNanos(n sql.NullInt64) time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return time.Unix(0, n.Int64).UTC()
}
