// Package identity resolves who an envd request acts as and where its paths
// point: users from HTTP Basic auth or a query parameter, falling back to the
// default user set by /init, and paths relative to that user's home.
package identity

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
)

// ErrUnknownUser is returned (wrapped) when a requested user does not exist.
var ErrUnknownUser = errors.New("unknown user")

// ErrInvalidPath is returned (wrapped) for paths that cannot be resolved,
// such as "~other/x".
var ErrInvalidPath = errors.New("invalid path")

// User is an account inside the sandbox that processes and files belong to.
type User struct {
	Name   string
	UID    uint32
	GID    uint32
	Groups []uint32 // supplementary groups, including GID
	Home   string
}

// Lookup finds a user by name in the sandbox's account database.
func Lookup(name string) (*User, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnknownUser, err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("parsing uid of %q: %w", name, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("parsing gid of %q: %w", name, err)
	}
	res := &User{Name: u.Username, UID: uint32(uid), GID: uint32(gid), Home: u.HomeDir}
	ids, err := u.GroupIds()
	if err != nil {
		ids = []string{u.Gid}
	}
	for _, id := range ids {
		g, err := strconv.ParseUint(id, 10, 32)
		if err == nil {
			res.Groups = append(res.Groups, uint32(g))
		}
	}
	return res, nil
}

// BasicAuthUser returns the user name carried in an "Authorization: Basic"
// header (the SDKs send "<name>:" with an empty password), or "" when the
// header is absent.
func BasicAuthUser(h http.Header) (string, error) {
	v := h.Get("Authorization")
	if v == "" {
		return "", nil
	}
	scheme, encoded, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return "", fmt.Errorf("unsupported authorization scheme")
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(encoded))
	if err != nil {
		return "", fmt.Errorf("decoding basic auth: %w", err)
	}
	name, _, _ := strings.Cut(string(raw), ":")
	return name, nil
}

// ResolvePath turns a request path into an absolute, cleaned path:
// "" is the default workdir (or home when none is set), "~" and "~/x" are
// under the user's home, absolute paths stay, and anything else is relative to
// the user's home (not the workdir), as in the reference envd.
func ResolvePath(path string, u *User, defaultWorkdir string) (string, error) {
	switch {
	case path == "":
		if defaultWorkdir != "" {
			return filepath.Clean(defaultWorkdir), nil
		}
		return filepath.Clean(u.Home), nil
	case path == "~":
		return filepath.Clean(u.Home), nil
	case strings.HasPrefix(path, "~/"):
		return filepath.Join(u.Home, path[2:]), nil
	case strings.HasPrefix(path, "~"):
		return "", fmt.Errorf("%w: %q: paths relative to another user's home are not supported", ErrInvalidPath, path)
	case filepath.IsAbs(path):
		return filepath.Clean(path), nil
	default:
		return filepath.Join(u.Home, path), nil
	}
}

// MkdirAll creates dir and any missing parents with mode 0755, giving every
// directory it creates to u. Existing directories are left as they are.
func (u *User) MkdirAll(dir string) error {
	dir = filepath.Clean(dir)
	fi, err := os.Stat(dir)
	if err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("path '%s' exists and is not a directory: %w", dir, os.ErrExist)
		}
		return nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if parent := filepath.Dir(dir); parent != dir {
		if err := u.MkdirAll(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil // created concurrently
		}
		return err
	}
	// Mkdir's mode is cut by envd's umask; the contract is 0755.
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	return u.Chown(dir)
}

// Chown gives path (following symlinks, like the write that created it) to
// u. It is a no-op when envd is not root and already
// runs as u, so envd works unprivileged on a developer machine.
func (u *User) Chown(path string) error {
	return u.chowned(path, os.Chown(path, int(u.UID), int(u.GID)))
}

func (u *User) chowned(path string, err error) error {
	if err == nil || (os.Geteuid() != 0 && uint32(os.Geteuid()) == u.UID) {
		return nil
	}
	return fmt.Errorf("chown %s to %s: %w", path, u.Name, err)
}
