package server

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/agent-sandbox/agent-sandbox/internal/liveview"
)

// keptSecret returns the secret of n random bytes kept in path (0600),
// made there on the first start and never rotated, so that what was
// derived from or signed with it outlives a restart. what names it in
// errors; lost says what removing the file breaks.
func keptSecret(path, what string, n int, lost string) ([]byte, error) {
	secret := make([]byte, n)
	rand.Read(secret)
	// O_EXCL: of two first starts, the one that wrote it first wins.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		_, err = f.Write(secret)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, fmt.Errorf("writing the %s %s: %w", what, path, err)
		}
		return secret, nil
	}
	if !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("making the %s %s: %w", what, path, err)
	}
	if secret, err = os.ReadFile(path); err != nil {
		return nil, fmt.Errorf("reading the %s: %w", what, err)
	}
	if len(secret) < n {
		return nil, fmt.Errorf("the %s %s is too short: remove it to make a new one (%s)", what, path, lost)
	}
	return secret, nil
}

// liveViewSigner returns the signer of live view links, with its key kept
// in the data directory: a link stays good until it expires, across
// restarts.
func liveViewSigner(dataDir string) (*liveview.Signer, error) {
	key, err := keptSecret(filepath.Join(dataDir, "live-view.key"), "live view key", 32,
		"live view links given out so far stop working")
	if err != nil {
		return nil, err
	}
	return liveview.NewSigner(key)
}
