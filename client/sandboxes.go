package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// DefaultTemplate is the template CreateSandbox starts when none is given.
const DefaultTemplate = "base"

// State is the lifecycle state of a listed sandbox.
type State string

// The states a listed sandbox can be in.
const (
	StateRunning State = "running"
	StatePaused  State = "paused"
)

// SandboxInfo describes a sandbox as GET /v2/sandboxes and
// GET /sandboxes/{id} report it. Its JSON form is the wire form.
type SandboxInfo struct {
	ID          string            `json:"sandboxID"`
	TemplateID  string            `json:"templateID"`
	Alias       string            `json:"alias,omitempty"`
	ClientID    string            `json:"clientID,omitempty"`
	StartedAt   time.Time         `json:"startedAt"`
	EndAt       time.Time         `json:"endAt"` // when the sandbox times out
	CPUCount    int               `json:"cpuCount"`
	MemoryMB    int               `json:"memoryMB"`
	DiskSizeMB  int               `json:"diskSizeMB"`
	Metadata    map[string]string `json:"metadata,omitempty"`
	State       State             `json:"state"`
	EnvdVersion string            `json:"envdVersion"`
	Domain      string            `json:"domain,omitempty"` // GetSandbox only
}

// CreateOptions configures CreateSandbox.
type CreateOptions struct {
	// Template is a template name, alias or ID. Default: DefaultTemplate.
	Template string
	// Timeout is how long the sandbox lives before the server kills it,
	// rounded up to whole seconds. Zero means the server's default (300 s).
	Timeout time.Duration
	// Metadata is returned by list and get and can filter lists.
	Metadata map[string]string
	// EnvVars are set for every process in the sandbox.
	EnvVars map[string]string
	// AutoPause pauses the sandbox when it times out, instead of killing
	// it; AutoResume resumes it, paused, when a request reaches it.
	AutoPause, AutoResume bool
	// AllowOut and DenyOut are the sandbox's egress rules (network.allowOut
	// and network.denyOut): CIDRs, IPs, domains and "*." wildcards. On
	// agent-sandbox denyOut wins over allowOut, and allowOut widens the
	// operator's ceiling only where the operator lets sandboxes do so.
	AllowOut, DenyOut []string
}

// ConnectOptions configures Connect.
type ConnectOptions struct {
	// Timeout extends the sandbox's life to at least now+Timeout (it never
	// shortens it). Zero means the server's default (300 s).
	Timeout time.Duration
}

// ListOptions filters and pages ListSandboxes.
type ListOptions struct {
	// Metadata keeps sandboxes that carry every one of these pairs.
	Metadata map[string]string
	// State keeps sandboxes in one of these states; empty means all.
	State []State
	// Limit is the page size, 1..100; zero means the server's default (100).
	Limit int
	// NextToken continues a previous listing.
	NextToken string
}

// sandboxWire is the Sandbox object that create and connect answer with.
type sandboxWire struct {
	SandboxID          string `json:"sandboxID"`
	TemplateID         string `json:"templateID"`
	Alias              string `json:"alias"`
	EnvdVersion        string `json:"envdVersion"`
	EnvdAccessToken    string `json:"envdAccessToken"`
	TrafficAccessToken string `json:"trafficAccessToken"`
	Domain             string `json:"domain"`
}

// CreateSandbox starts a sandbox (POST /v2/sandboxes) and returns once envd
// inside it is ready.
func (c *Client) CreateSandbox(ctx context.Context, opts CreateOptions) (*Sandbox, error) {
	type autoResume struct {
		Enabled bool `json:"enabled"`
	}
	type network struct {
		AllowOut []string `json:"allowOut,omitempty"`
		DenyOut  []string `json:"denyOut,omitempty"`
	}
	body := struct {
		TemplateID string            `json:"templateID"`
		Timeout    int64             `json:"timeout,omitempty"`
		Metadata   map[string]string `json:"metadata,omitempty"`
		EnvVars    map[string]string `json:"envVars,omitempty"`
		AutoPause  bool              `json:"autoPause,omitempty"`
		AutoResume *autoResume       `json:"autoResume,omitempty"`
		Network    *network          `json:"network,omitempty"`
	}{
		TemplateID: opts.Template,
		Timeout:    seconds(opts.Timeout),
		Metadata:   opts.Metadata,
		EnvVars:    opts.EnvVars,
		AutoPause:  opts.AutoPause,
	}
	if opts.AutoResume {
		body.AutoResume = &autoResume{Enabled: true}
	}
	if len(opts.AllowOut) > 0 || len(opts.DenyOut) > 0 {
		body.Network = &network{AllowOut: opts.AllowOut, DenyOut: opts.DenyOut}
	}
	if body.TemplateID == "" {
		body.TemplateID = DefaultTemplate
	}
	var w sandboxWire
	_, err := c.do(ctx, apiRequest{
		method: http.MethodPost, path: "/v2/sandboxes", body: body, ok: []int{http.StatusCreated, http.StatusOK},
	}, &w)
	if err != nil {
		return nil, fmt.Errorf("creating sandbox from template %q: %w", body.TemplateID, err)
	}
	return c.newSandbox(w), nil
}

// Connect returns a handle for an existing sandbox (POST
// /v2/sandboxes/{id}/connect), resuming it if it is paused. The handle
// carries the envd access token needed by Run, PTY and the file methods.
func (c *Client) Connect(ctx context.Context, id string, opts ConnectOptions) (*Sandbox, error) {
	body := struct {
		Timeout int64 `json:"timeout,omitempty"`
	}{Timeout: seconds(opts.Timeout)}
	var w sandboxWire
	_, err := c.do(ctx, apiRequest{
		method: http.MethodPost, path: "/v2/sandboxes/" + url.PathEscape(id) + "/connect", body: body,
		ok: []int{http.StatusOK, http.StatusCreated},
	}, &w)
	if err != nil {
		return nil, fmt.Errorf("connecting to sandbox %s: %w", id, err)
	}
	if w.SandboxID == "" {
		w.SandboxID = id
	}
	return c.newSandbox(w), nil
}

// ListSandboxes returns one page of running and paused sandboxes, newest
// first, and the token for the next page ("" after the last page).
func (c *Client) ListSandboxes(ctx context.Context, opts ListOptions) ([]SandboxInfo, string, error) {
	var out []SandboxInfo
	h, err := c.do(ctx, apiRequest{
		method: http.MethodGet, path: "/v2/sandboxes", query: listQuery(opts), ok: []int{http.StatusOK},
	}, &out)
	if err != nil {
		return nil, "", fmt.Errorf("listing sandboxes: %w", err)
	}
	return out, h.Get("X-Next-Token"), nil
}

// listQuery builds the query string the way the JS SDK's generated client
// does: every value escaped with encodeURIComponent, arrays comma-joined.
func listQuery(opts ListOptions) string {
	var q []string
	if len(opts.Metadata) > 0 {
		q = append(q, "metadata="+encodeURIComponent(EncodeMetadata(opts.Metadata)))
	}
	if len(opts.State) > 0 {
		states := make([]string, len(opts.State))
		for i, s := range opts.State {
			states[i] = encodeURIComponent(string(s))
		}
		q = append(q, "state="+strings.Join(states, ","))
	}
	if opts.Limit > 0 {
		q = append(q, "limit="+strconv.Itoa(opts.Limit))
	}
	if opts.NextToken != "" {
		q = append(q, "nextToken="+encodeURIComponent(opts.NextToken))
	}
	return strings.Join(q, "&")
}

// GetSandbox returns the sandbox's details (GET /sandboxes/{id}). An unknown
// or killed sandbox gives an error matching ErrNotFound.
func (c *Client) GetSandbox(ctx context.Context, id string) (*SandboxInfo, error) {
	var out SandboxInfo
	_, err := c.do(ctx, apiRequest{
		method: http.MethodGet, path: "/sandboxes/" + url.PathEscape(id), ok: []int{http.StatusOK},
	}, &out)
	if err != nil {
		return nil, fmt.Errorf("getting sandbox %s: %w", id, err)
	}
	return &out, nil
}

// KillSandbox kills the sandbox (DELETE /sandboxes/{id}). An unknown or
// already killed sandbox gives an error matching ErrNotFound.
func (c *Client) KillSandbox(ctx context.Context, id string) error {
	_, err := c.do(ctx, apiRequest{
		method: http.MethodDelete, path: "/sandboxes/" + url.PathEscape(id),
		ok: []int{http.StatusNoContent, http.StatusOK},
	}, nil)
	if err != nil {
		return fmt.Errorf("killing sandbox %s: %w", id, err)
	}
	return nil
}

// SetTimeout makes the sandbox time out d from now, rounded up to whole
// seconds (POST /sandboxes/{id}/timeout). It may shorten the sandbox's life.
func (c *Client) SetTimeout(ctx context.Context, id string, d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("setting timeout of sandbox %s: timeout %v is not positive", id, d)
	}
	body := struct {
		Timeout int64 `json:"timeout"`
	}{Timeout: seconds(d)}
	_, err := c.do(ctx, apiRequest{
		method: http.MethodPost, path: "/sandboxes/" + url.PathEscape(id) + "/timeout", body: body,
		ok: []int{http.StatusNoContent, http.StatusOK},
	}, nil)
	if err != nil {
		return fmt.Errorf("setting timeout of sandbox %s: %w", id, err)
	}
	return nil
}

// seconds rounds d up to whole seconds, as the SDKs do; 0 stays 0.
func seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}
