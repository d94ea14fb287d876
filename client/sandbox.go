package client

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"connectrpc.com/connect"

	"github.com/agent-sandbox/agent-sandbox/gen/filesystem/filesystemconnect"
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

	client     *Client
	envdURL    string
	http       *envdHTTP
	process    processconnect.ProcessClient
	filesystem filesystemconnect.FilesystemClient
}

func (c *Client) newSandbox(w sandboxWire) *Sandbox {
	domain := w.Domain
	if domain == "" {
		domain = c.domain
	}
	s := &Sandbox{
		ID:                 w.SandboxID,
		TemplateID:         w.TemplateID,
		Alias:              w.Alias,
		EnvdVersion:        w.EnvdVersion,
		EnvdAccessToken:    w.EnvdAccessToken,
		TrafficAccessToken: w.TrafficAccessToken,
		Domain:             domain,
		client:             c,
	}
	s.envdURL, s.http = s.portURL(EnvdPort), s.portHTTP(EnvdPort)
	// The SDKs negotiate no compression; neither do we.
	opts := []connect.ClientOption{connect.WithProtoJSON(), connect.WithAcceptCompression("gzip", nil, nil)}
	s.process = processconnect.NewProcessClient(s.http, s.envdURL, opts...)
	s.filesystem = filesystemconnect.NewFilesystemClient(s.http, s.envdURL, opts...)
	return s
}

// EnvdURL returns the base URL of the sandbox's envd.
func (s *Sandbox) EnvdURL() string { return s.envdURL }

// portURL is the base URL the client sends requests for a port of the
// sandbox to: the header-routing URL when configured (the port then goes in
// a header, see portHTTP), else the port's own host.
func (s *Sandbox) portURL(port int) string {
	switch {
	case s.client.sandboxURL != "":
		return s.client.sandboxURL
	case stableHostDomains[s.Domain]:
		return "https://sandbox." + s.Domain
	}
	return "https://" + s.Host(port)
}

// portHTTP is the HTTP client for requests to a port of the sandbox.
func (s *Sandbox) portHTTP(port int) *envdHTTP {
	return &envdHTTP{client: s.client.http, id: s.ID, port: port, token: s.EnvdAccessToken}
}

// Host returns the host name of a port of the sandbox, <port>-<id>.<domain>,
// as the SDKs' getHost does: what a browser or any client outside the SDK
// reaches the port by when the server routes by host.
func (s *Sandbox) Host(port int) string {
	return strconv.Itoa(port) + "-" + s.ID + "." + s.Domain
}

// envdHTTP adds the headers every request to a sandbox port carries: the
// header-routing pair, the access token and the user agent.
type envdHTTP struct {
	client *http.Client
	id     string
	port   int
	token  string
}

var _ connect.HTTPClient = (*envdHTTP)(nil)

// Do implements connect.HTTPClient.
func (e *envdHTTP) Do(r *http.Request) (*http.Response, error) {
	r.Header.Set("E2b-Sandbox-Id", e.id)
	r.Header.Set("E2b-Sandbox-Port", strconv.Itoa(e.port))
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
