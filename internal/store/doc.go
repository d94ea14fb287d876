// Package store is the server's source of truth: a SQLite database (through
// modernc.org/sqlite, pure Go) holding sandbox records and API keys.
//
// Every lifecycle change is written here before it is acted on, so that after
// a restart the sandbox manager can reconcile: adopt what is still alive
// (using the opaque [Sandbox.BackendState] the isolation backend saved) and
// clean up the rest.
//
// Layout and conventions:
//
//   - One writer connection (writes are serialized in Go, transactions begin
//     IMMEDIATE so another process sharing the file waits on busy_timeout)
//     and a small pool of read-only connections; the journal is in WAL mode
//     so readers never block the writer.
//   - The schema is versioned by PRAGMA user_version; [Open] applies the
//     missing entries of an append-only list of migrations, each in its own
//     transaction.
//   - Times are stored as UTC unix nanoseconds (INTEGER) and read back in
//     UTC; maps are stored as JSON text and empty maps read back as nil.
//   - API keys are stored only as SHA-256 hashes plus a short display mask.
//
// Errors name the step that failed and wrap the sentinels [ErrNotFound],
// [ErrExists], [ErrInvalidToken] and [ErrInvalid]; test them with errors.Is.
package store
