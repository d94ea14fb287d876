package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// ForkOptions configures Fork.
type ForkOptions struct {
	// Count is how many forks; zero means 1.
	Count int
	// Timeout is how long the forks live; zero means the server's
	// default (15 s, E2B's).
	Timeout time.Duration
}

// Fork forks sandbox id (POST /sandboxes/{id}/fork): the forks start from
// its state at one instant, and it runs on. Each fork is a sandbox or an
// error of its own; mode says what they kept ("full": the processes and
// memory too; "filesystem": the files, booted afresh).
func (c *Client) Fork(ctx context.Context, id string, opts ForkOptions) (forks []*Sandbox, errs []error, mode string, err error) {
	body := struct {
		Count   int   `json:"count,omitempty"`
		Timeout int64 `json:"timeout,omitempty"`
	}{opts.Count, seconds(opts.Timeout)}
	var out []struct {
		Sandbox *sandboxWire `json:"sandbox"`
		Mode    string       `json:"mode"`
		Error   *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	_, err = c.do(ctx, apiRequest{method: http.MethodPost, path: "/sandboxes/" + url.PathEscape(id) + "/fork", body: body,
		ok: []int{http.StatusCreated}}, &out)
	if err != nil {
		return nil, nil, "", fmt.Errorf("forking sandbox %s: %w", id, err)
	}
	for _, e := range out {
		switch {
		case e.Sandbox != nil:
			forks, errs, mode = append(forks, c.newSandbox(*e.Sandbox)), append(errs, nil), e.Mode
		case e.Error != nil:
			forks, errs = append(forks, nil), append(errs, &APIError{Status: e.Error.Code, Code: e.Error.Code, Message: e.Error.Message})
		default:
			forks, errs = append(forks, nil), append(errs, errors.New("the server answered neither a sandbox nor an error"))
		}
	}
	return forks, errs, mode, nil
}

// Snapshot is a saved sandbox, which CreateSandbox takes as its template.
type Snapshot struct {
	ID    string   `json:"snapshotID"`
	Names []string `json:"names"`
	// Mode is "full" (processes and memory too) or "filesystem".
	Mode string `json:"mode"`
}

// CreateSnapshot saves sandbox id (POST /sandboxes/{id}/snapshots); name
// is "" or "name[:tag]". The sandbox runs on.
func (c *Client) CreateSnapshot(ctx context.Context, id, name string) (*Snapshot, error) {
	body := struct {
		Name string `json:"name,omitempty"`
	}{name}
	var s Snapshot
	if _, err := c.do(ctx, apiRequest{method: http.MethodPost, path: "/sandboxes/" + url.PathEscape(id) + "/snapshots", body: body,
		ok: []int{http.StatusCreated}}, &s); err != nil {
		return nil, fmt.Errorf("snapshotting sandbox %s: %w", id, err)
	}
	return &s, nil
}

// DeleteSnapshot deletes a snapshot (DELETE /templates/{id}); ErrNotFound
// when there is none.
func (c *Client) DeleteSnapshot(ctx context.Context, snapshotID string) error {
	if _, err := c.do(ctx, apiRequest{method: http.MethodDelete, path: "/templates/" + url.PathEscape(snapshotID),
		ok: []int{http.StatusNoContent}}, nil); err != nil {
		return fmt.Errorf("deleting snapshot %s: %w", snapshotID, err)
	}
	return nil
}

// Pause pauses sandbox id (POST /sandboxes/{id}/pause); with keepMemory
// false it keeps the file system only, and Connect reboots it.
func (c *Client) Pause(ctx context.Context, id string, keepMemory bool) error {
	body := struct {
		Memory bool `json:"memory"`
	}{keepMemory}
	if _, err := c.do(ctx, apiRequest{method: http.MethodPost, path: "/sandboxes/" + url.PathEscape(id) + "/pause", body: body,
		ok: []int{http.StatusNoContent}}, nil); err != nil {
		return fmt.Errorf("pausing sandbox %s: %w", id, err)
	}
	return nil
}

// IsRunning asks the sandbox's envd whether it answers (GET /health), as
// the SDKs' isRunning does: false when the sandbox is paused or gone (the
// router's 502). A paused sandbox created with AutoResume is resumed by
// the request, and answers.
func (s *Sandbox) IsRunning(ctx context.Context) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.envdURL+"/health", nil)
	if err != nil {
		return false, err
	}
	res, err := s.http.Do(req)
	if err != nil {
		return false, fmt.Errorf("checking sandbox %s: %w", s.ID, err)
	}
	res.Body.Close()
	switch res.StatusCode {
	case http.StatusNoContent, http.StatusOK:
		return true, nil
	case http.StatusBadGateway:
		return false, nil
	}
	return false, fmt.Errorf("checking sandbox %s: envd answered %s", s.ID, res.Status)
}
