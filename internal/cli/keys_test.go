package cli

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/server"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
)

func TestKeys(t *testing.T) {
	dir := t.TempDir()

	res := runCLI(t, "", "keys", "create", "--name", "ci", "--data-dir", dir)
	if res.err != nil {
		t.Fatal(res.err)
	}
	key := strings.TrimSuffix(res.stdout, "\n")
	if !regexp.MustCompile(`^e2b_[0-9a-f]{40}$`).MatchString(key) {
		t.Fatalf("keys create printed %q, want only the key", res.stdout)
	}
	if !strings.Contains(res.stderr, "not shown again") {
		t.Errorf("keys create stderr = %q", res.stderr)
	}

	// The key is in the database serve opens, and it verifies.
	st, err := store.Open(t.Context(), server.DBPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	stored, err := st.VerifyAPIKey(t.Context(), key)
	st.Close()
	if err != nil {
		t.Fatalf("created key does not verify: %v", err)
	}

	res = runCLI(t, "", "keys", "list", "--data-dir", dir)
	if res.err != nil {
		t.Fatal(res.err)
	}
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "ID") || !strings.Contains(lines[0], "LAST USED") {
		t.Fatalf("keys list:\n%s", res.stdout)
	}
	if f := strings.Fields(lines[1]); f[0] != stored.ID || f[1] != "ci" || f[2] != stored.Masked() {
		t.Errorf("keys list row = %q", lines[1])
	}
	if strings.Contains(res.stdout, key) {
		t.Error("keys list shows the whole key")
	}

	res = runCLI(t, "", "keys", "list", "--json", "--data-dir", dir)
	var listed []struct{ ID, Name, Key string }
	if err := json.Unmarshal([]byte(res.stdout), &listed); err != nil || len(listed) != 1 || listed[0].ID != stored.ID || listed[0].Key != stored.Masked() {
		t.Errorf("keys list --json = %s (%v)", res.stdout, err)
	}

	res = runCLI(t, "", "keys", "revoke", "--data-dir", dir, stored.ID, "nope")
	if res.err == nil || !strings.Contains(res.err.Error(), "1 of 2 keys not revoked") || !strings.Contains(res.stderr, "no key with ID nope") {
		t.Errorf("keys revoke: err %v, stderr %q", res.err, res.stderr)
	}
	if res.stdout != stored.ID+"\n" {
		t.Errorf("keys revoke stdout = %q", res.stdout)
	}
	res = runCLI(t, "", "keys", "list", "--json", "--data-dir", dir)
	if strings.TrimSpace(res.stdout) != "[]" {
		t.Errorf("keys list after revoke = %s", res.stdout)
	}
}
