package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
)

// DefaultDomain is the domain used when neither Config.Domain nor
// E2B_DOMAIN is set: E2B's cloud.
const DefaultDomain = "e2b.app"

// EnvdPort is the port envd listens on inside every sandbox.
const EnvdPort = 49983

// userAgent identifies this SDK to the server.
const userAgent = "agent-sandbox-go-client"

// maxErrorBody bounds how much of an error response is read.
const maxErrorBody = 64 << 10

var (
	// ErrNotFound is matched (with errors.Is) by errors for a sandbox,
	// process or file that does not exist.
	ErrNotFound = errors.New("not found")
	// ErrNoAPIKey is returned by control-plane calls when the Client has no
	// API key.
	ErrNoAPIKey = errors.New("no API key configured (set E2B_API_KEY)")
)

// APIError is a non-2xx answer from the control plane or from envd's HTTP
// endpoints. Both send a JSON body {"code": <int>, "message": "<text>"}.
type APIError struct {
	Status  int    // HTTP status code
	Code    int    // "code" field of the body; E2B servers set it to Status
	Message string // "message" field of the body, or the body text
}

// Error implements error.
func (e *APIError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	return fmt.Sprintf("%d: %s", e.Status, msg)
}

// Is reports whether e is a 404, so that errors.Is(err, ErrNotFound) holds
// for it. The JS SDK decides on the body's code, the Python SDK on the
// status; either counts.
func (e *APIError) Is(target error) bool {
	return target == ErrNotFound && (e.Status == http.StatusNotFound || e.Code == http.StatusNotFound)
}

// Config says where the server is and how to authenticate. The zero value
// of each field means its default.
type Config struct {
	// APIURL is the control-plane base URL. Default: https://api.<Domain>.
	APIURL string
	// SandboxURL, when set, receives every envd request for every sandbox;
	// the sandbox is named only by the E2b-Sandbox-Id and E2b-Sandbox-Port
	// headers (header routing). Default: a per-sandbox host under the
	// domain, https://49983-<id>.<domain>.
	SandboxURL string
	// Domain is the base domain for derived URLs. Default: DefaultDomain.
	// A domain returned by the server when a sandbox is created or
	// connected takes precedence for that sandbox's host.
	Domain string
	// APIKey is sent as X-API-KEY on every control-plane request.
	APIKey string
	// HTTPClient makes every request. Default: a client without a timeout
	// (process output streams are long-lived; bound calls with ctx).
	HTTPClient *http.Client
}

// FromEnv returns the Config the E2B environment variables describe:
// E2B_API_URL, E2B_SANDBOX_URL, E2B_DOMAIN and E2B_API_KEY. Unset variables
// leave their fields empty, so New applies the defaults. Callers may
// override fields (with flags, say) before calling New.
func FromEnv() Config {
	return Config{
		APIURL:     os.Getenv("E2B_API_URL"),
		SandboxURL: os.Getenv("E2B_SANDBOX_URL"),
		Domain:     os.Getenv("E2B_DOMAIN"),
		APIKey:     os.Getenv("E2B_API_KEY"),
	}
}

// Client talks to the control plane and builds Sandbox handles for envd.
// It is safe for concurrent use.
type Client struct {
	apiURL     string // no trailing slash
	sandboxURL string // no trailing slash; "" means per-sandbox hosts
	domain     string
	apiKey     string
	http       *http.Client
}

// New returns a Client for cfg after applying the defaults described on
// Config. It fails only when a URL is malformed.
func New(cfg Config) (*Client, error) {
	c := &Client{
		domain: cfg.Domain,
		apiKey: cfg.APIKey,
		http:   cfg.HTTPClient,
	}
	if c.domain == "" {
		c.domain = DefaultDomain
	}
	if c.http == nil {
		c.http = &http.Client{}
	}
	apiURL := cfg.APIURL
	if apiURL == "" {
		apiURL = "https://api." + c.domain
	}
	var err error
	if c.apiURL, err = checkBaseURL(apiURL); err != nil {
		return nil, fmt.Errorf("api url: %w", err)
	}
	if cfg.SandboxURL != "" {
		if c.sandboxURL, err = checkBaseURL(cfg.SandboxURL); err != nil {
			return nil, fmt.Errorf("sandbox url: %w", err)
		}
	}
	return c, nil
}

// APIURL returns the control-plane base URL the client uses.
func (c *Client) APIURL() string { return c.apiURL }

// SandboxURL returns the URL sandbox traffic is sent to with header
// routing, or "" when each sandbox port has a host of its own.
func (c *Client) SandboxURL() string { return c.sandboxURL }

func checkBaseURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("%q: scheme must be http or https", raw)
	}
	if u.Host == "" {
		return "", fmt.Errorf("%q: no host", raw)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("%q: a base URL has no query or fragment", raw)
	}
	return strings.TrimRight(raw, "/"), nil
}

// apiRequest is one control-plane call.
type apiRequest struct {
	method string
	path   string // starts with "/"; already escaped
	query  string // raw, already escaped
	body   any    // JSON-encoded when non-nil
	ok     []int  // accepted statuses
}

// do sends r and decodes a successful JSON answer into out (when non-nil).
// It returns the response headers.
func (c *Client) do(ctx context.Context, r apiRequest, out any) (http.Header, error) {
	if c.apiKey == "" {
		return nil, ErrNoAPIKey
	}
	u := c.apiURL + r.path
	if r.query != "" {
		u += "?" + r.query
	}
	var body io.Reader
	if r.body != nil {
		b, err := json.Marshal(r.body)
		if err != nil {
			return nil, fmt.Errorf("encoding request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-API-KEY", c.apiKey)
	req.Header.Set("User-Agent", userAgent)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	ok := false
	for _, s := range r.ok {
		ok = ok || res.StatusCode == s
	}
	if !ok {
		return nil, readAPIError(res)
	}
	if out != nil {
		if err := json.NewDecoder(res.Body).Decode(out); err != nil {
			return nil, fmt.Errorf("decoding %d response: %w", res.StatusCode, err)
		}
	}
	return res.Header, nil
}

// readAPIError turns a non-2xx response into an *APIError.
func readAPIError(res *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(res.Body, maxErrorBody))
	e := &APIError{Status: res.StatusCode}
	var body struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if json.Unmarshal(b, &body) == nil && (body.Code != 0 || body.Message != "") {
		e.Code, e.Message = body.Code, body.Message
	} else {
		e.Message = strings.TrimSpace(string(b))
	}
	return e
}
