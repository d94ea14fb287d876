package store

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// openTest opens a store in a fresh temporary directory and closes it when
// the test ends.
func openTest(t *testing.T) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state", "store.db")
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s, path
}

// fakeClock makes s.now return *now.
func fakeClock(s *Store, now *time.Time) { s.now = func() time.Time { return *now } }

func userVersion(t *testing.T, s *Store) int {
	t.Helper()
	var v int
	if err := s.r.QueryRowContext(context.Background(), "PRAGMA user_version").Scan(&v); err != nil {
		t.Fatalf("reading user_version: %v", err)
	}
	return v
}

func TestOpenSetsPragmas(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	for _, tc := range []struct {
		pragma string
		want   string
	}{
		{"journal_mode", "wal"},
		{"foreign_keys", "1"},
		{"busy_timeout", "5000"},
	} {
		var got string
		if err := s.w.QueryRowContext(ctx, "PRAGMA "+tc.pragma).Scan(&got); err != nil {
			t.Fatalf("PRAGMA %s: %v", tc.pragma, err)
		}
		if !strings.EqualFold(got, tc.want) {
			t.Errorf("PRAGMA %s = %q, want %q", tc.pragma, got, tc.want)
		}
	}
	if got := userVersion(t, s); got != len(migrations) {
		t.Errorf("user_version = %d, want %d", got, len(migrations))
	}
}

func TestMigrationsIdempotent(t *testing.T) {
	s, path := openTest(t)
	ctx := context.Background()
	// Migrating an up-to-date database again is a no-op.
	if err := s.migrate(ctx); err != nil {
		t.Fatalf("second migrate: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	s2, err := Open(ctx, path)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s2.Close()
	if got := userVersion(t, s2); got != len(migrations) {
		t.Errorf("user_version after reopen = %d, want %d", got, len(migrations))
	}
}

// TestMigrateSecure migrates sandboxes recorded before migration 3: those
// with an envd token were the secure ones.
func TestMigrateSecure(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "store.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range migrations[:2] {
		if _, err := db.ExecContext(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.ExecContext(ctx, `PRAGMA user_version = 2;
		INSERT INTO sandboxes (id, template_id, state, started_at, envd_access_token, updated_at) VALUES
			('isecure', 't', 'running', 1, 'tok', 1), ('iopen', 't', 'running', 1, '', 1)`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for id, want := range map[string]bool{"isecure": true, "iopen": false} {
		sb, err := s.GetSandbox(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if sb.Secure != want {
			t.Errorf("%s: secure %v after migrating, want %v", id, sb.Secure, want)
		}
	}
}

func TestOpenRefusesNewerSchema(t *testing.T) {
	s, path := openTest(t)
	ctx := context.Background()
	if _, err := s.w.ExecContext(ctx, "PRAGMA user_version = 999"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if s2, err := Open(ctx, path); err == nil {
		s2.Close()
		t.Fatal("Open of a newer schema succeeded, want error")
	} else if !strings.Contains(err.Error(), "newer") {
		t.Errorf("error = %v, want it to mention the newer schema", err)
	}
}

func TestOpenRejectsBadPath(t *testing.T) {
	for _, path := range []string{"", filepath.Join(t.TempDir(), "a?mode=ro")} {
		if s, err := Open(context.Background(), path); err == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded, want error", path)
		}
	}
}

func TestReopenKeepsData(t *testing.T) {
	s, path := openTest(t)
	ctx := context.Background()
	want, err := s.CreateSandbox(ctx, testSandbox("isb1", time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	plaintext, key, err := s.CreateAPIKey(ctx, "ci", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	s2, err := Open(ctx, path)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s2.Close()
	got, err := s2.GetSandbox(ctx, "isb1")
	if err != nil {
		t.Fatalf("GetSandbox after reopen: %v", err)
	}
	if diff := cmpSandbox(want, got); diff != "" {
		t.Errorf("sandbox after reopen (-want +got):\n%s", diff)
	}
	k, err := s2.VerifyAPIKey(ctx, plaintext)
	if err != nil {
		t.Fatalf("VerifyAPIKey after reopen: %v", err)
	}
	if k.ID != key.ID {
		t.Errorf("verified key id = %s, want %s", k.ID, key.ID)
	}
}
