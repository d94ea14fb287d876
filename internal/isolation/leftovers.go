package isolation

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// DirLeftovers returns the IDs of sandboxes that have a directory in
// stateDir but are not in known, for a backend's Leftovers. The
// directory marks a sandbox as this server's: a backend's Start creates
// it before anything else and Cleanup removes it last. Network
// namespaces and cgroups alone are not enough, because several servers
// (with different data directories) may share a host, and one must never
// clean up another's sandboxes.
func DirLeftovers(stateDir string, known map[string]bool) ([]string, error) {
	entries, err := os.ReadDir(stateDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("listing sandbox directories: %w", err)
	}
	var ids []string
	for _, e := range entries {
		if id := e.Name(); e.IsDir() && !known[id] && ValidID(id) == nil {
			ids = append(ids, id)
		}
	}
	return ids, nil
}
