package store

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const operatorKey = "e2b_0123456789abcdef0123456789abcdef01234567"

func TestAPIKeyLifecycle(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	fakeClock(s, &now)

	plaintext, key, err := s.CreateAPIKey(ctx, "laptop", 0)
	if err != nil {
		t.Fatalf("CreateAPIKey: %v", err)
	}
	if !ValidAPIKey(plaintext) {
		t.Errorf("generated key %q does not match the key format", plaintext)
	}
	wantKey := APIKey{ID: key.ID, Name: "laptop", Prefix: plaintext[:6], Suffix: plaintext[40:], CreatedAt: now}
	if diff := cmp.Diff(wantKey, key); diff != "" {
		t.Errorf("created key (-want +got):\n%s", diff)
	}
	if got, want := key.Masked(), plaintext[:6]+"..."+plaintext[40:]; got != want {
		t.Errorf("Masked() = %q, want %q", got, want)
	}
	other, _, err := s.CreateAPIKey(ctx, "ci", 0)
	if err != nil {
		t.Fatal(err)
	}
	if other == plaintext {
		t.Fatal("two created keys are equal")
	}

	got, err := s.VerifyAPIKey(ctx, plaintext)
	if err != nil {
		t.Fatalf("VerifyAPIKey: %v", err)
	}
	wantKey.LastUsedAt = now
	if diff := cmp.Diff(wantKey, got); diff != "" {
		t.Errorf("verified key (-want +got):\n%s", diff)
	}

	list, err := s.ListAPIKeys(ctx)
	if err != nil {
		t.Fatalf("ListAPIKeys: %v", err)
	}
	if len(list) != 2 || list[0].Name != "laptop" || list[1].Name != "ci" {
		t.Errorf("ListAPIKeys = %+v, want laptop then ci", list)
	}

	if err := s.RevokeAPIKey(ctx, key.ID); err != nil {
		t.Fatalf("RevokeAPIKey: %v", err)
	}
	if _, err := s.VerifyAPIKey(ctx, plaintext); !errors.Is(err, ErrNotFound) {
		t.Errorf("VerifyAPIKey after revoke: %v, want ErrNotFound", err)
	}
	if err := s.RevokeAPIKey(ctx, key.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("second RevokeAPIKey: %v, want ErrNotFound", err)
	}
	if _, err := s.VerifyAPIKey(ctx, other); err != nil {
		t.Errorf("other key after revoking the first: %v", err)
	}
	list, _ = s.ListAPIKeys(ctx)
	if len(list) != 1 || list[0].Name != "ci" {
		t.Errorf("ListAPIKeys after revoke = %+v, want only ci", list)
	}
}

func TestVerifyAPIKeyRejects(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	if _, err := s.AddAPIKey(ctx, "op", operatorKey); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, key string }{
		{"empty", ""},
		{"unknown well-formed", "e2b_" + strings.Repeat("f", 40)},
		{"upper case of a stored key", strings.ToUpper(operatorKey)},
		{"stored key with trailing space", operatorKey + " "},
		{"stored key truncated", operatorKey[:len(operatorKey)-1]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := s.VerifyAPIKey(ctx, tc.key); !errors.Is(err, ErrNotFound) {
				t.Errorf("VerifyAPIKey(%q) error = %v, want ErrNotFound", tc.key, err)
			}
		})
	}
}

func TestVerifyAPIKeyTouchesOncePerMinute(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	now := start
	fakeClock(s, &now)
	if _, err := s.AddAPIKey(ctx, "op", operatorKey); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		advance time.Duration
		want    time.Time
	}{
		{0, start},                // first use is recorded
		{30 * time.Second, start}, // within a minute: unchanged
		{59 * time.Second, start}, // still within a minute of the recorded use
		{61 * time.Second, start.Add(61 * time.Second)}, // a minute passed: recorded
		{61*time.Second + time.Millisecond, start.Add(61 * time.Second)},
	} {
		now = start.Add(step.advance)
		k, err := s.VerifyAPIKey(ctx, operatorKey)
		if err != nil {
			t.Fatalf("VerifyAPIKey at +%v: %v", step.advance, err)
		}
		if !k.LastUsedAt.Equal(step.want) {
			t.Errorf("at +%v: returned LastUsedAt = %v, want %v", step.advance, k.LastUsedAt, step.want)
		}
		list, err := s.ListAPIKeys(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !list[0].LastUsedAt.Equal(step.want) {
			t.Errorf("at +%v: stored LastUsedAt = %v, want %v", step.advance, list[0].LastUsedAt, step.want)
		}
	}
}

func TestAddAPIKey(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	first, err := s.AddAPIKey(ctx, "flag", operatorKey)
	if err != nil {
		t.Fatalf("AddAPIKey: %v", err)
	}
	if first.Prefix != "e2b_01" || first.Suffix != "4567" {
		t.Errorf("mask = %q/%q, want e2b_01/4567", first.Prefix, first.Suffix)
	}
	// Adding the same key again (next server start) returns the stored key.
	again, err := s.AddAPIKey(ctx, "env", operatorKey)
	if err != nil {
		t.Fatalf("second AddAPIKey: %v", err)
	}
	if diff := cmp.Diff(first, again); diff != "" {
		t.Errorf("second AddAPIKey returned a different key (-first +again):\n%s", diff)
	}
	list, err := s.ListAPIKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 {
		t.Errorf("ListAPIKeys has %d keys after adding one twice, want 1", len(list))
	}
	if _, err := s.VerifyAPIKey(ctx, operatorKey); err != nil {
		t.Errorf("VerifyAPIKey of added key: %v", err)
	}
}

func TestAddAPIKeyValidation(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	for _, tc := range []struct{ name, key string }{
		{"empty", ""},
		{"no prefix", strings.Repeat("a", 40)},
		{"wrong prefix", "e2c_" + strings.Repeat("a", 40)},
		{"upper-case hex", "e2b_" + strings.Repeat("A", 40)},
		{"too short", "e2b_" + strings.Repeat("a", 39)},
		{"too long", "e2b_" + strings.Repeat("a", 41)},
		{"non-hex", "e2b_" + strings.Repeat("g", 40)},
		{"trailing newline", operatorKey + "\n"},
		{"leading space", " " + operatorKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.AddAPIKey(ctx, "bad", tc.key)
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("AddAPIKey(%q) error = %v, want ErrInvalid", tc.key, err)
			}
			if !strings.Contains(err.Error(), "40 lower-case hex") {
				t.Errorf("error %q does not say what a key looks like", err)
			}
		})
	}
	if list, _ := s.ListAPIKeys(ctx); len(list) != 0 {
		t.Errorf("invalid keys were stored: %+v", list)
	}
}

func TestAPIKeyStoredAsHashOnly(t *testing.T) {
	s, path := openTest(t)
	ctx := context.Background()
	created, _, err := s.CreateAPIKey(ctx, "secret", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddAPIKey(ctx, "op", operatorKey); err != nil {
		t.Fatal(err)
	}
	if _, err := s.VerifyAPIKey(ctx, created); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		files, err := filepath.Glob(path + "*") // database, -wal, -shm
		if err != nil || len(files) == 0 {
			t.Fatalf("no database files at %s: %v", path, err)
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, key := range []string{created, operatorKey} {
				// The hex part alone would also be a leak.
				if bytes.Contains(b, []byte(key[len(APIKeyPrefix):])) {
					t.Errorf("%s: %s contains a plaintext API key", when, filepath.Base(f))
				}
			}
		}
	}
	check("while open") // the data may still be only in the WAL
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	check("after close")
	if fi, err := os.Stat(path); err != nil {
		t.Fatal(err)
	} else if fi.Mode().Perm() != 0o600 {
		t.Errorf("database file mode = %v, want 0600", fi.Mode().Perm())
	}
}
