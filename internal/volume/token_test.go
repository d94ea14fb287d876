package volume

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

func TestTokens(t *testing.T) {
	key := filepath.Join(t.TempDir(), "key")
	a, err := loadTokens(key)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(key); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, %v", fi, err)
	}
	tok := a.issue("vol-1")
	if err := a.verify(tok, "vol-1"); err != nil {
		t.Errorf("a fresh token: %v", err)
	}
	// A restarted server reads the same key: its tokens still work.
	b, err := loadTokens(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.verify(tok, "vol-1"); err != nil {
		t.Errorf("after a restart: %v", err)
	}
	later := time.Now().Add(TokenTTL + time.Minute)
	b.now = func() time.Time { return later }
	for name, c := range map[string]struct{ tok, id string }{
		"another volume": {tok, "vol-2"},
		"tampered":       {tok[:len(tok)-2] + "xx", "vol-1"},
		"malformed":      {"nonsense", "vol-1"},
		"expired":        {tok, "vol-1"},
	} {
		if err := b.verify(c.tok, c.id); !errors.Is(err, ErrUnauthorized) {
			t.Errorf("%s: %v, want ErrUnauthorized", name, err)
		}
	}
	if err := os.WriteFile(key, []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadTokens(key); err == nil {
		t.Error("a malformed key file was accepted")
	}
}

// Servers starting at once on a fresh data dir all end up with the one
// key that was written first.
func TestTokensFirstStartsAtOnce(t *testing.T) {
	for round := range 20 {
		key := filepath.Join(t.TempDir(), "key")
		got := make([]*tokens, 8)
		errs := make([]error, len(got))
		var wg sync.WaitGroup
		for i := range got {
			wg.Go(func() { got[i], errs[i] = loadTokens(key) })
		}
		wg.Wait()
		for i, tk := range got {
			if errs[i] != nil {
				t.Fatalf("round %d, start %d: %v", round, i, errs[i])
			}
			if !bytes.Equal(tk.key, got[0].key) {
				t.Fatalf("round %d: start %d has another key than start 0", round, i)
			}
		}
	}
}
