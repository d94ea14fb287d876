package codeinterp

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// executeRequest is the body of POST /execute.
type executeRequest struct {
	Code      string            `json:"code"`
	ContextID string            `json:"context_id"`
	Language  string            `json:"language"`
	EnvVars   map[string]string `json:"env_vars"`
}

// restoreTimeout bounds restoring env_vars after an execution.
const restoreTimeout = 10 * time.Second

func (s *Server) handleExecute(w http.ResponseWriter, r *http.Request) {
	var req executeRequest
	if err := decodeBody(r, &req); err != nil {
		writeText(w, http.StatusBadRequest, "invalid request body: "+err.Error())
		return
	}
	if req.ContextID != "" && req.Language != "" {
		writeText(w, http.StatusBadRequest, "Only one of context_id or language can be provided")
		return
	}
	var c *execContext
	if req.ContextID != "" {
		if c = s.lookup(req.ContextID); c == nil {
			notFound(w, req.ContextID)
			return
		}
	} else {
		var err error
		if c, err = s.defaultContext(r.Context(), normalizeLanguage(req.Language)); err != nil {
			s.log.Error("creating default context", "err", err)
			writeText(w, http.StatusInternalServerError, err.Error())
			return
		}
	}
	s.stream(w, r, c, req)
}

// stream runs an execution and writes its lines as they come, with a
// keepalive line after each Keepalive of silence and end_of_execution last.
// The headers go out first, so a request queued behind another execution
// still gets its response (and keepalives) while it waits.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, c *execContext, req executeRequest) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()

	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	failed := rc.Flush() != nil

	timer := time.NewTimer(s.cfg.Keepalive)
	defer timer.Stop()
	write := func(line []byte) {
		timer.Reset(s.cfg.Keepalive)
		if failed || ctx.Err() != nil {
			return
		}
		if _, err := w.Write(line); err != nil || rc.Flush() != nil {
			failed = true
			cancel() // the client is gone: interrupt the execution
		}
	}

	lines := make(chan []byte, 64)
	send := func(line []byte) {
		select {
		case lines <- line:
		case <-ctx.Done():
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.execute(ctx, c, req, r.Header.Get("X-Access-Token"), send)
	}()

	for {
		select {
		case line := <-lines:
			write(line)
		case <-timer.C:
			write(keepaliveLine)
		case <-done:
			for {
				select {
				case line := <-lines:
					write(line)
					continue
				default:
				}
				break
			}
			write(endLine)
			return
		}
	}
}

// execute runs one execution on c, sending its lines. It applies the
// sandbox-wide environment on a runtime's first execution and the request's
// env_vars around the code.
func (s *Server) execute(ctx context.Context, c *execContext, req executeRequest, token string, send func([]byte)) {
	if c.lock(ctx) != nil {
		return // the client left while queued
	}
	release := true
	defer func() {
		if release {
			c.unlock()
		}
	}()
	log := s.log.With("context_id", c.id)

	rt := c.runtime()
	if rt == nil {
		send(errorLine(unexpectedEnd, "The context was removed"))
		return
	}

	// died reports that rt failed and, unless it was already replaced or
	// removed, replaces it in the background while keeping the run token,
	// so the next execution gets a fresh runtime.
	died := func(err error) {
		c.mu.Lock()
		current, closed := c.rt == rt, c.closed
		c.mu.Unlock()
		switch {
		case closed:
			send(errorLine(unexpectedEnd, "The context was removed"))
			return
		case !current:
			send(errorLine("ContextRestarting", "Context was restarted"))
			return
		}
		log.Error("runtime died", "err", err)
		send(errorLine(unexpectedEnd, "Connection to the execution was closed before the execution was finished"))
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return
		}
		s.wg.Add(1)
		s.mu.Unlock()
		release = false
		go func() {
			defer s.wg.Done()
			defer c.unlock()
			fresh, err := c.factory(context.WithoutCancel(ctx), c.cwd)
			if err != nil {
				log.Error("restarting dead runtime", "err", err)
				return
			}
			if c.swap(rt, fresh) {
				log.Info("restarted dead runtime")
			}
		}()
	}
	interrupted := func(err error) bool {
		return ctx.Err() != nil && errors.Is(err, ctx.Err())
	}

	c.mu.Lock()
	envLoaded := c.envLoaded
	c.mu.Unlock()
	if !envLoaded {
		vars, err := s.fetchEnvs(ctx, token)
		switch {
		case err != nil:
			log.Warn("fetching the sandbox environment from envd", "err", err)
		case len(vars) > 0:
			if _, err := rt.SetEnv(ctx, vars); err != nil {
				if !interrupted(err) {
					died(err)
				}
				return
			}
		}
		if err == nil {
			c.mu.Lock()
			if c.rt == rt {
				c.envLoaded = true
			}
			c.mu.Unlock()
		}
	}

	if len(req.EnvVars) > 0 {
		restore, err := rt.SetEnv(ctx, req.EnvVars)
		if err != nil {
			if !interrupted(err) {
				died(err)
			}
			return
		}
		defer func() {
			if c.runtime() != rt {
				return // replaced: nothing to restore
			}
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), restoreTimeout)
			defer cancel()
			if err := restore(rctx); err != nil {
				log.Error("restoring env_vars", "err", err)
			}
		}()
	}

	now := func() time.Time { return time.Now().UTC() }
	err := rt.Execute(ctx, req.Code, func(o Output) { send(outputLine(o, now())) })
	if err != nil && !interrupted(err) {
		died(err)
	}
}
