package codeinterp

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// envsTimeout bounds the request for the sandbox-wide environment.
const envsTimeout = 5 * time.Second

// fetchEnvs asks envd for the sandbox-wide environment variables,
// authenticating with the envd access token the client sent.
func (s *Server) fetchEnvs(ctx context.Context, token string) (map[string]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.cfg.EnvdURL+"/envs", nil)
	if err != nil {
		return nil, fmt.Errorf("building envd request: %w", err)
	}
	if token != "" {
		req.Header.Set("X-Access-Token", token)
	}
	resp, err := s.envd.Do(req)
	if err != nil {
		return nil, fmt.Errorf("asking envd for /envs: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("envd /envs answered %s: %s", resp.Status, body)
	}
	var vars map[string]string
	if err := json.NewDecoder(resp.Body).Decode(&vars); err != nil {
		return nil, fmt.Errorf("decoding envd /envs: %w", err)
	}
	return vars, nil
}
