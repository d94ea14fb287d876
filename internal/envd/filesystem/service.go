package filesystem

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"

	"connectrpc.com/connect"

	"github.com/agent-sandbox/agent-sandbox/gen/filesystem/filesystemconnect"
	"github.com/agent-sandbox/agent-sandbox/internal/envd/identity"
	"github.com/agent-sandbox/agent-sandbox/internal/envd/state"
)

// Service implements filesystemconnect.FilesystemHandler.
type Service struct {
	state   *state.State
	log     *slog.Logger
	entries *entries

	mu       sync.Mutex // guards watchers and closed
	watchers map[string]*pollingWatcher
	closed   bool
}

var _ filesystemconnect.FilesystemHandler = (*Service)(nil)

// NewService returns the filesystem service.
func NewService(st *state.State, log *slog.Logger) *Service {
	return &Service{
		state:    st,
		log:      log,
		entries:  newEntries(log),
		watchers: map[string]*pollingWatcher{},
	}
}

// Close stops every polling watcher and makes CreateWatcher fail from then
// on. Streaming watches end with their requests.
func (s *Service) Close() error {
	s.mu.Lock()
	s.closed = true
	ws := s.watchers
	s.watchers = map[string]*pollingWatcher{}
	s.mu.Unlock()

	var errs []error
	for _, w := range ws {
		errs = append(errs, w.Close())
	}
	return errors.Join(errs...)
}

// user returns the user a request acts as: the one named by its Basic auth
// header, or the default user set by /init.
func (s *Service) user(h http.Header) (*identity.User, error) {
	name, err := identity.BasicAuthUser(h)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnauthenticated, err)
	}
	if name == "" {
		name = s.state.DefaultUser()
	}
	u, err := identity.Lookup(name)
	if err != nil {
		if errors.Is(err, identity.ErrUnknownUser) {
			return nil, connect.NewError(connect.CodeUnauthenticated, fmt.Errorf("invalid username: '%s'", name))
		}
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("looking up user %s: %w", name, err))
	}
	return u, nil
}

// resolve turns a request path into an absolute path for u.
func (s *Service) resolve(u *identity.User, path string) (string, error) {
	p, err := identity.ResolvePath(path, u, s.state.DefaultWorkdir())
	if err != nil {
		if errors.Is(err, identity.ErrInvalidPath) {
			return "", connect.NewError(connect.CodeInvalidArgument, err)
		}
		return "", connect.NewError(connect.CodeInternal, fmt.Errorf("resolving path %q: %w", path, err))
	}
	return p, nil
}

// userPath resolves path for the user the request acts as.
func (s *Service) userPath(h http.Header, path string) (*identity.User, string, error) {
	u, err := s.user(h)
	if err != nil {
		return nil, "", err
	}
	p, err := s.resolve(u, path)
	if err != nil {
		return nil, "", err
	}
	return u, p, nil
}
