package jail

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// removeDir removes a sandbox directory. Nothing is ever mounted in it in
// the host's mount namespace (the mounts live in the sandbox's), so a
// plain recursive removal cannot cross into a mount.
func removeDir(dir string) error {
	if err := os.RemoveAll(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing %s: %w", dir, err)
	}
	return nil
}
