package client

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"connectrpc.com/connect"

	processpb "github.com/agent-sandbox/agent-sandbox/gen/process"
	"github.com/agent-sandbox/agent-sandbox/gen/process/processconnect"
)

// stableHostDomains are E2B's cloud domains, which serve every sandbox's
// envd on one host and route by header (spec §1.2).
var stableHostDomains = map[string]bool{"e2b.app": true, "e2b.dev": true, "e2b.pro": true, "e2b-staging.dev": true}

// keepaliveSeconds is the Keepalive-Ping-Interval sent on streaming calls,
// the SDKs' value.
const keepaliveSeconds = "50"

// controlTimeout bounds the unary envd calls made without a caller's
// context (PTY.Write) and the kill sent after a Run was canceled.
const controlTimeout = 30 * time.Second

// Sandbox is a handle for one sandbox's envd, returned by
// Client.CreateSandbox and Client.Connect. It is safe for concurrent use.
type Sandbox struct {
	// ID is the sandbox ID.
	ID string
	// TemplateID is the resolved ID of the template it was started from.
	TemplateID string
	// Alias is the template alias, if the server reported one.
	Alias string
	// EnvdVersion is the version of envd inside the sandbox.
	EnvdVersion string
	// EnvdAccessToken authenticates requests to envd (X-Access-Token).
	EnvdAccessToken string
	// TrafficAccessToken guards the sandbox's other ports when the sandbox
	// does not allow public traffic; empty otherwise.
	TrafficAccessToken string
	// Domain is the domain the sandbox's hosts live under.
	Domain string

	client  *Client
	envdURL string
	http    *envdHTTP
	process processconnect.ProcessClient
}

func (c *Client) newSandbox(w sandboxWire) *Sandbox {
	domain := w.Domain
	if domain == "" {
		domain = c.domain
	}
	base := c.sandboxURL
	switch {
	case base != "":
	case stableHostDomains[domain]:
		base = "https://sandbox." + domain
	default:
		base = "https://" + strconv.Itoa(EnvdPort) + "-" + w.SandboxID + "." + domain
	}
	h := &envdHTTP{client: c.http, id: w.SandboxID, token: w.EnvdAccessToken}
	return &Sandbox{
		ID:                 w.SandboxID,
		TemplateID:         w.TemplateID,
		Alias:              w.Alias,
		EnvdVersion:        w.EnvdVersion,
		EnvdAccessToken:    w.EnvdAccessToken,
		TrafficAccessToken: w.TrafficAccessToken,
		Domain:             domain,
		client:             c,
		envdURL:            base,
		http:               h,
		process: processconnect.NewProcessClient(h, base,
			connect.WithProtoJSON(),
			// The SDKs negotiate no compression; neither do we.
			connect.WithAcceptCompression("gzip", nil, nil)),
	}
}

// EnvdURL returns the base URL of the sandbox's envd.
func (s *Sandbox) EnvdURL() string { return s.envdURL }

// envdHTTP adds the headers every envd request carries: the header-routing
// pair, the access token and the user agent.
type envdHTTP struct {
	client *http.Client
	id     string
	token  string
}

var _ connect.HTTPClient = (*envdHTTP)(nil)

// Do implements connect.HTTPClient.
func (e *envdHTTP) Do(r *http.Request) (*http.Response, error) {
	r.Header.Set("E2b-Sandbox-Id", e.id)
	r.Header.Set("E2b-Sandbox-Port", strconv.Itoa(EnvdPort))
	if e.token != "" {
		r.Header.Set("X-Access-Token", e.token)
	}
	r.Header.Set("User-Agent", userAgent)
	return e.client.Do(r)
}

// setUser makes a request act as user; "" leaves envd's default user.
func setUser(h http.Header, user string) {
	if user != "" {
		h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":")))
	}
}

func selector(pid uint32) *processpb.ProcessSelector {
	return &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: pid}}
}

// Kill kills the sandbox; see Client.KillSandbox.
func (s *Sandbox) Kill(ctx context.Context) error { return s.client.KillSandbox(ctx, s.ID) }

// SetTimeout makes the sandbox time out d from now; see Client.SetTimeout.
func (s *Sandbox) SetTimeout(ctx context.Context, d time.Duration) error {
	return s.client.SetTimeout(ctx, s.ID, d)
}

// killProcess sends SIGKILL to the process pid in the sandbox. A process
// that does not exist (or has exited) gives an error matching ErrNotFound.
func (s *Sandbox) killProcess(ctx context.Context, pid uint32) error {
	_, err := s.process.SendSignal(ctx, connect.NewRequest(&processpb.SendSignalRequest{
		Process: selector(pid),
		Signal:  processpb.Signal_SIGNAL_SIGKILL,
	}))
	if err != nil {
		return fmt.Errorf("killing process %d: %w", pid, envdError(err))
	}
	return nil
}

// envdError makes a Connect not_found error match ErrNotFound.
func envdError(err error) error {
	if connect.CodeOf(err) == connect.CodeNotFound {
		return &notFoundError{err}
	}
	return err
}

type notFoundError struct{ err error }

func (e *notFoundError) Error() string        { return e.err.Error() }
func (e *notFoundError) Unwrap() error        { return e.err }
func (e *notFoundError) Is(target error) bool { return target == ErrNotFound }
