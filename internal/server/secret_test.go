package server

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/liveview"
)

// TestLiveViewSignerAcrossRestarts: a link signed before a restart opens
// the live view after it, until it expires; the key is the data
// directory's, 0600, made once.
func TestLiveViewSignerAcrossRestarts(t *testing.T) {
	dir := t.TempDir()
	before, err := liveViewSigner(dir)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "live-view.key")
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the key file: %v, %v; want mode 0600", fi, err)
	}
	now := time.Now()
	link := before.Sign("sb1", true, now.Add(time.Hour))

	after, err := liveViewSigner(dir) // the restarted server's
	if err != nil {
		t.Fatal(err)
	}
	if err := after.Verify(link, "sb1", liveview.TakeoverPort, now); err != nil {
		t.Errorf("a takeover link from before the restart: %v", err)
	}
	if err := after.Verify(link, "sb1", liveview.TakeoverPort, now.Add(2*time.Hour)); !errors.Is(err, liveview.ErrExpired) {
		t.Errorf("the same link past its expiry: %v, want ErrExpired", err)
	}

	other, err := liveViewSigner(t.TempDir()) // another data directory
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Verify(link, "sb1", liveview.ViewPort, now); !errors.Is(err, liveview.ErrInvalid) {
		t.Errorf("a link checked by a server on another data directory: %v, want ErrInvalid", err)
	}
}
