package codeinterp

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"sync"
)

// execContext is one context: a runtime of one language with its own state.
type execContext struct {
	id, language, cwd string
	factory           Factory

	// run holds a token while an execution (or a runtime replacement) uses
	// the context, so executions run one at a time.
	run chan struct{}

	mu sync.Mutex // guards the fields below
	rt Runtime
	// envLoaded says the sandbox-wide environment from envd was applied to rt.
	envLoaded bool
	closed    bool
}

// contextJSON is a context as the protocol shows it.
type contextJSON struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

func (c *execContext) json() contextJSON {
	return contextJSON{ID: c.id, Language: c.language, Cwd: c.cwd}
}

// runtime returns the context's current runtime, or nil once closed.
func (c *execContext) runtime() Runtime {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	return c.rt
}

// lock takes the context's run token, or fails when ctx ends first.
func (c *execContext) lock(ctx context.Context) error {
	select {
	case c.run <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *execContext) unlock() { <-c.run }

// swap installs a fresh runtime in place of old (or of whatever runs when
// old is nil) and closes the one it replaces. It fails, closing fresh, if
// the context was closed or old was already replaced.
func (c *execContext) swap(old, fresh Runtime) bool {
	c.mu.Lock()
	if c.closed || (old != nil && c.rt != old) {
		c.mu.Unlock()
		_ = fresh.Close()
		return false
	}
	prev := c.rt
	c.rt, c.envLoaded = fresh, false
	c.mu.Unlock()
	if prev != nil {
		_ = prev.Close()
	}
	return true
}

// close ends the context and its runtime.
func (c *execContext) close() {
	c.mu.Lock()
	rt := c.rt
	c.closed = true
	c.mu.Unlock()
	if rt != nil {
		_ = rt.Close()
	}
}

// newContextID returns a random id in the form of a UUID, like the Jupyter
// kernel ids the official server uses.
func newContextID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// createContext starts a runtime for lang in cwd and registers a context for it.
func (s *Server) createContext(ctx context.Context, lang, cwd string) (*execContext, error) {
	f := s.factory(lang)
	if f == nil {
		return nil, s.unsupported(lang)
	}
	rt, err := f(ctx, cwd)
	if err != nil {
		return nil, fmt.Errorf("starting %s runtime in %s: %w", lang, cwd, err)
	}
	c := &execContext{id: newContextID(), language: lang, cwd: cwd, factory: f, run: make(chan struct{}, 1), rt: rt}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		_ = rt.Close()
		return nil, errors.New("server is closed")
	}
	s.contexts[c.id] = c
	s.order = append(s.order, c)
	s.log.Info("created context", "context_id", c.id, "language", lang, "cwd", cwd)
	return c, nil
}

// defaultContext returns the default context of lang, creating it on first use.
func (s *Server) defaultContext(ctx context.Context, lang string) (*execContext, error) {
	s.mu.Lock()
	l := s.defaultLocks[lang]
	if l == nil {
		l = new(sync.Mutex)
		s.defaultLocks[lang] = l
	}
	s.mu.Unlock()

	l.Lock()
	defer l.Unlock()
	s.mu.Lock()
	c := s.contexts[s.defaults[lang]]
	s.mu.Unlock()
	if c != nil {
		return c, nil
	}
	c, err := s.createContext(ctx, lang, s.cfg.DefaultCwd)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.defaults[lang] = c.id
	s.mu.Unlock()
	return c, nil
}

func (s *Server) lookup(id string) *execContext {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.contexts[id]
}

func notFound(w http.ResponseWriter, id string) {
	writeText(w, http.StatusNotFound, fmt.Sprintf("Context %s not found", id))
}

func (s *Server) handleCreateContext(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Language string `json:"language"`
		Cwd      string `json:"cwd"`
	}
	if err := decodeBody(r, &req); err != nil {
		writeText(w, http.StatusBadRequest, "invalid request body: "+err.Error())
		return
	}
	cwd := req.Cwd
	if cwd == "" {
		cwd = s.cfg.DefaultCwd
	}
	c, err := s.createContext(r.Context(), normalizeLanguage(req.Language), cwd)
	if err != nil {
		s.log.Error("creating context", "err", err)
		writeText(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, c.json())
}

func (s *Server) handleListContexts(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	list := make([]contextJSON, 0, len(s.order))
	for _, c := range s.order {
		list = append(list, c.json())
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, list)
}

// handleRestartContext replaces a context's runtime with a fresh one of the
// same language and cwd. An execution in progress is not waited for: its
// runtime is closed under it and it ends with a ContextRestarting error.
func (s *Server) handleRestartContext(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	c := s.lookup(id)
	if c == nil {
		notFound(w, id)
		return
	}
	rt, err := c.factory(r.Context(), c.cwd)
	if err != nil {
		s.log.Error("restarting context", "context_id", id, "err", err)
		writeText(w, http.StatusInternalServerError, fmt.Sprintf("Failed to restart context %s: %v", id, err))
		return
	}
	if !c.swap(nil, rt) {
		notFound(w, id) // removed while restarting
		return
	}
	s.log.Info("restarted context", "context_id", id)
	writeJSON(w, http.StatusOK, nil)
}

func (s *Server) handleDeleteContext(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.mu.Lock()
	c := s.contexts[id]
	if c != nil {
		delete(s.contexts, id)
		for i, o := range s.order {
			if o == c {
				s.order = append(s.order[:i:i], s.order[i+1:]...)
				break
			}
		}
		if s.defaults[c.language] == id {
			delete(s.defaults, c.language)
		}
	}
	s.mu.Unlock()
	if c == nil {
		notFound(w, id)
		return
	}
	c.close()
	s.log.Info("removed context", "context_id", id)
	writeJSON(w, http.StatusOK, nil)
}
