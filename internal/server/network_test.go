package server

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/egress"
)

func TestEgressCASecret(t *testing.T) {
	path := filepath.Join(t.TempDir(), "egress-ca.secret")
	first, err := egressCASecret(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != egress.MinCASecretLen {
		t.Errorf("secret of %d bytes", len(first))
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("secret file: %v, %v", fi, err)
	}
	again, err := egressCASecret(path)
	if err != nil || !bytes.Equal(again, first) {
		t.Errorf("the secret read again differs: %v", err)
	}
	if err := os.WriteFile(path, []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := egressCASecret(path); err == nil {
		t.Error("a short secret was accepted")
	}
}
