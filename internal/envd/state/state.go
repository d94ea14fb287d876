// Package state holds what the control plane configures in envd through
// POST /init: the default user and workdir, the sandbox-wide environment and
// the access token. Every envd service reads it; only /init writes it.
package state

import (
	"crypto/subtle"
	"maps"
	"sync"
)

// Defaults are the values envd starts with, before any /init.
type Defaults struct {
	User    string // "root" when unset, as in the reference envd
	Workdir string // "" means the user's home
	// AccessToken is required from the first request; "" means none until
	// /init sets one.
	AccessToken string
}

// State is safe for concurrent use.
type State struct {
	mu          sync.RWMutex // guards every field below
	user        string
	workdir     string
	envVars     map[string]string
	accessToken string
}

// New returns the state envd has before /init.
func New(d Defaults) *State {
	if d.User == "" {
		d.User = "root"
	}
	return &State{user: d.User, workdir: d.Workdir, envVars: map[string]string{}, accessToken: d.AccessToken}
}

// Update is what one /init call sets. Nil fields leave the current value.
type Update struct {
	User        *string
	Workdir     *string
	EnvVars     map[string]string // replaces the whole set when non-nil
	AccessToken string            // "" clears the token
}

// Apply stores u.
func (s *State) Apply(u Update) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if u.User != nil && *u.User != "" {
		s.user = *u.User
	}
	if u.Workdir != nil {
		s.workdir = *u.Workdir
	}
	if u.EnvVars != nil {
		s.envVars = maps.Clone(u.EnvVars)
	}
	s.accessToken = u.AccessToken
}

// DefaultUser is the user that requests without an explicit user act as.
func (s *State) DefaultUser() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.user
}

// DefaultWorkdir is the directory for an empty path or cwd; "" means home.
func (s *State) DefaultWorkdir() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.workdir
}

// EnvVars returns a copy of the sandbox-wide environment.
func (s *State) EnvVars() map[string]string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return maps.Clone(s.envVars)
}

// AccessToken returns the token requests must carry; "" means none is needed.
func (s *State) AccessToken() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.accessToken
}

// TokenMatches reports, in constant time, whether got is the access token.
// It is true for any input when no token is set.
func (s *State) TokenMatches(got string) bool {
	want := s.AccessToken()
	if want == "" {
		return true
	}
	return subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}
