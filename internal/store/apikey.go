package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"time"
)

// APIKeyPrefix starts every API key; 40 lower-case hex characters follow.
const APIKeyPrefix = "e2b_"

// apiKeyFormat is the only accepted shape of an API key.
var apiKeyFormat = regexp.MustCompile(`^e2b_[0-9a-f]{40}$`)

// touchInterval bounds how often VerifyAPIKey writes LastUsedAt.
const touchInterval = time.Minute

// APIKey is the stored, non-secret description of an API key. The key itself
// is never stored, only its SHA-256 hash.
type APIKey struct {
	ID   string
	Name string
	// Prefix and Suffix are the first 6 ("e2b_" and two hex digits) and
	// last 4 characters of the key, for display.
	Prefix     string
	Suffix     string
	CreatedAt  time.Time
	LastUsedAt time.Time // zero if never used
	// MaxTimeout is the longest sandbox timeout a request with this key
	// may ask for; 0: none of its own (the server's applies).
	MaxTimeout time.Duration
}

// Masked returns the key's display form, e.g. "e2b_3f...a91c".
func (k APIKey) Masked() string { return k.Prefix + "..." + k.Suffix }

// ValidAPIKey reports whether s has the shape of an API key.
func ValidAPIKey(s string) bool { return apiKeyFormat.MatchString(s) }

func hashAPIKey(plaintext string) []byte {
	h := sha256.Sum256([]byte(plaintext))
	return h[:]
}

const apiKeyColumns = `id, name, prefix, suffix, created_at, last_used_at, max_timeout`

func scanAPIKey(row scanner) (APIKey, error) {
	var (
		k                   APIKey
		createdAt, lastUsed sql.NullInt64
	)
	if err := row.Scan(&k.ID, &k.Name, &k.Prefix, &k.Suffix, &createdAt, &lastUsed, &k.MaxTimeout); err != nil {
		return APIKey{}, err
	}
	k.CreatedAt, k.LastUsedAt = fromNanos(createdAt), fromNanos(lastUsed)
	return k, nil
}

// CreateAPIKey generates a new random key named name, limited to sandbox
// timeouts of maxTimeout (0: no limit of its own), and stores its hash.
// The plaintext is returned only here; it cannot be recovered later.
func (s *Store) CreateAPIKey(ctx context.Context, name string, maxTimeout time.Duration) (string, APIKey, error) {
	if maxTimeout < 0 {
		return "", APIKey{}, fmt.Errorf("creating api key: max timeout %v is negative: %w", maxTimeout, ErrInvalid)
	}
	plaintext := APIKeyPrefix + hex.EncodeToString(randomBytes(20))
	k, created, err := s.addAPIKey(ctx, name, plaintext, maxTimeout)
	if err != nil {
		return "", APIKey{}, fmt.Errorf("creating api key: %w", err)
	}
	if !created {
		// 160 random bits collided with a stored key: the random source
		// is broken.
		return "", APIKey{}, fmt.Errorf("creating api key: generated key: %w", ErrExists)
	}
	return plaintext, k, nil
}

// AddAPIKey stores a key the operator supplied (flag or environment). Adding a
// key that is already stored is not an error: the stored key is returned
// unchanged, keeping its original name. A key not matching
// ^e2b_[0-9a-f]{40}$ gives an error wrapping ErrInvalid.
func (s *Store) AddAPIKey(ctx context.Context, name, plaintext string) (APIKey, error) {
	if !ValidAPIKey(plaintext) {
		return APIKey{}, fmt.Errorf("adding api key %q: key must be %q followed by 40 lower-case hex characters: %w",
			name, APIKeyPrefix, ErrInvalid)
	}
	k, _, err := s.addAPIKey(ctx, name, plaintext, 0)
	if err != nil {
		return APIKey{}, fmt.Errorf("adding api key %q: %w", name, err)
	}
	return k, nil
}

// addAPIKey inserts the hash of plaintext unless it is stored already, and
// returns the stored key and whether it was inserted now.
func (s *Store) addAPIKey(ctx context.Context, name, plaintext string, maxTimeout time.Duration) (APIKey, bool, error) {
	hash := hashAPIKey(plaintext)
	k := APIKey{
		ID:         hex.EncodeToString(randomBytes(8)),
		Name:       name,
		Prefix:     plaintext[:len(APIKeyPrefix)+2],
		Suffix:     plaintext[len(plaintext)-4:],
		CreatedAt:  time.Unix(0, s.now().UnixNano()).UTC(),
		MaxTimeout: maxTimeout,
	}
	var (
		out     APIKey
		created bool
	)
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO api_keys (id, name, hash, prefix, suffix, created_at, max_timeout)
			VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (hash) DO NOTHING`,
			k.ID, k.Name, hash, k.Prefix, k.Suffix, k.CreatedAt.UnixNano(), int64(k.MaxTimeout))
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if n == 1 {
			out, created = k, true
			return nil
		}
		out, err = scanAPIKey(tx.QueryRowContext(ctx, `SELECT `+apiKeyColumns+` FROM api_keys WHERE hash = ?`, hash))
		return err
	})
	if err != nil {
		return APIKey{}, false, err
	}
	return out, created, nil
}

// ListAPIKeys returns every stored key, oldest first (in insertion order).
func (s *Store) ListAPIKeys(ctx context.Context) ([]APIKey, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+apiKeyColumns+` FROM api_keys ORDER BY created_at, rowid`)
	if err != nil {
		return nil, fmt.Errorf("listing api keys: %w", err)
	}
	defer rows.Close()
	var out []APIKey
	for rows.Next() {
		k, err := scanAPIKey(rows)
		if err != nil {
			return nil, fmt.Errorf("listing api keys: %w", err)
		}
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing api keys: %w", err)
	}
	return out, nil
}

// RevokeAPIKey deletes the key with the given ID, or returns an error
// wrapping ErrNotFound.
func (s *Store) RevokeAPIKey(ctx context.Context, id string) error {
	res, err := s.w.ExecContext(ctx, `DELETE FROM api_keys WHERE id = ?`, id)
	if err != nil {
		return fmt.Errorf("revoking api key %s: %w", id, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("revoking api key %s: %w", id, err)
	}
	if n == 0 {
		return fmt.Errorf("revoking api key %s: %w", id, ErrNotFound)
	}
	return nil
}

// VerifyAPIKey returns the stored key matching plaintext, or an error
// wrapping ErrNotFound when the key is malformed, unknown or revoked. The
// lookup is by SHA-256 hash, so its timing does not depend on how much of a
// guess matches a real key. LastUsedAt is written at most once a minute.
func (s *Store) VerifyAPIKey(ctx context.Context, plaintext string) (APIKey, error) {
	if !ValidAPIKey(plaintext) {
		return APIKey{}, fmt.Errorf("verifying api key: %w", ErrNotFound)
	}
	hash := hashAPIKey(plaintext)
	var (
		k                   APIKey
		createdAt, lastUsed sql.NullInt64
		stored              []byte
	)
	err := s.r.QueryRowContext(ctx, `SELECT `+apiKeyColumns+`, hash FROM api_keys WHERE hash = ?`, hash).
		Scan(&k.ID, &k.Name, &k.Prefix, &k.Suffix, &createdAt, &lastUsed, &k.MaxTimeout, &stored)
	if errors.Is(err, sql.ErrNoRows) {
		return APIKey{}, fmt.Errorf("verifying api key: %w", ErrNotFound)
	}
	if err != nil {
		return APIKey{}, fmt.Errorf("verifying api key: %w", err)
	}
	if subtle.ConstantTimeCompare(stored, hash) != 1 {
		return APIKey{}, fmt.Errorf("verifying api key: %w", ErrNotFound)
	}
	k.CreatedAt, k.LastUsedAt = fromNanos(createdAt), fromNanos(lastUsed)

	now := time.Unix(0, s.now().UnixNano()).UTC()
	if k.LastUsedAt.IsZero() || now.Sub(k.LastUsedAt) >= touchInterval {
		// The condition is repeated in SQL so concurrent verifications
		// write at most once per interval.
		_, err := s.w.ExecContext(ctx, `UPDATE api_keys SET last_used_at = ?
			WHERE id = ? AND (last_used_at IS NULL OR last_used_at <= ?)`,
			now.UnixNano(), k.ID, now.Add(-touchInterval).UnixNano())
		if err != nil {
			return APIKey{}, fmt.Errorf("verifying api key: recording use: %w", err)
		}
		k.LastUsedAt = now
	}
	return k, nil
}

// randomBytes returns n bytes from crypto/rand, which never fails on
// supported platforms (it panics rather than return short output).
func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}
