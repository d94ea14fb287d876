package envd

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/envd/httpjson"
	"github.com/agent-sandbox/agent-sandbox/internal/envd/identity"
	"github.com/agent-sandbox/agent-sandbox/internal/envd/metrics"
	"github.com/agent-sandbox/agent-sandbox/internal/envd/state"
)

// initRequest is the body of POST /init (spec §3.5). Fields the reference
// also accepts for its own infrastructure (volume mounts, CA bundles, …) are
// ignored.
type initRequest struct {
	EnvVars        map[string]string `json:"envVars"`
	AccessToken    *string           `json:"accessToken"`
	Timestamp      *time.Time        `json:"timestamp"`
	DefaultUser    *string           `json:"defaultUser"`
	DefaultWorkdir *string           `json:"defaultWorkdir"`
}

// maxClockDrift is how far the sandbox clock may be from the control
// plane's before /init sets it (a resumed VM wakes with a stale clock).
const maxClockDrift = time.Second

// handleInit configures envd for a sandbox. The control plane calls it at
// every start and resume.
func (s *Server) handleInit(w http.ResponseWriter, r *http.Request) {
	var req initRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil && !errors.Is(err, io.EOF) {
		httpjson.Error(w, http.StatusBadRequest, fmt.Sprintf("decoding init request: %v", err))
		return
	}
	var newToken string
	if req.AccessToken != nil {
		newToken = *req.AccessToken
	}
	// Once a token is set, only a caller that knows it may change anything.
	if s.state.AccessToken() != "" && !s.state.TokenMatches(r.Header.Get("X-Access-Token")) && !s.state.TokenMatches(newToken) {
		httpjson.Error(w, http.StatusUnauthorized, unauthorizedMessage)
		return
	}
	if req.DefaultUser != nil && *req.DefaultUser != "" {
		if _, err := identity.Lookup(*req.DefaultUser); err != nil {
			httpjson.Error(w, http.StatusBadRequest, fmt.Sprintf("default user '%s': %v", *req.DefaultUser, err))
			return
		}
	}
	if req.Timestamp != nil {
		if drift := time.Since(*req.Timestamp).Abs(); drift > maxClockDrift {
			if err := setClock(*req.Timestamp); err != nil {
				s.log.Warn("setting the clock from /init", "drift", drift, "err", err)
			}
		}
	}
	s.state.Apply(state.Update{
		User:        req.DefaultUser,
		Workdir:     req.DefaultWorkdir,
		EnvVars:     req.EnvVars,
		AccessToken: newToken,
	})
	w.Header().Set("X-Envd-Version", Version)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	snap, err := metrics.Sample(r.Context())
	if err != nil {
		httpjson.Error(w, http.StatusInternalServerError, fmt.Sprintf("sampling metrics: %v", err))
		return
	}
	httpjson.Write(w, http.StatusOK, snap)
}
