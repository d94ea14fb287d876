package api

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/browser"
	"github.com/agent-sandbox/agent-sandbox/internal/computeruse"
	"github.com/agent-sandbox/agent-sandbox/internal/egress"
	"github.com/agent-sandbox/agent-sandbox/internal/liveview"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
)

// Sandboxes is what the API needs from the sandbox manager.
type Sandboxes interface {
	Create(ctx context.Context, req sandbox.CreateRequest) (store.Sandbox, error)
	Get(ctx context.Context, id string) (store.Sandbox, error)
	List(ctx context.Context, q store.ListQuery) ([]store.Sandbox, string, error)
	Kill(ctx context.Context, id string) error
	SetTimeout(ctx context.Context, id string, d time.Duration) error
	Connect(ctx context.Context, id string, d time.Duration, reboot bool) (sb store.Sandbox, resumed bool, err error)
	Pause(ctx context.Context, id string, keepMemory bool) error
	Fork(ctx context.Context, id string, timeout time.Duration, count int) ([]sandbox.ForkResult, string, error)
	CreateSnapshot(ctx context.Context, id string, req sandbox.SnapshotRequest) (store.Snapshot, error)
	ListSnapshots(ctx context.Context, q sandbox.SnapshotQuery) ([]store.Snapshot, string, error)
	DeleteSnapshot(ctx context.Context, ref string) error
	DeleteTemplate(ctx context.Context, name string, remove func(context.Context) error) error
	Metrics(ctx context.Context, id string, start, end time.Time) ([]sandbox.Metric, error)
	Logs(ctx context.Context, id string, q store.SandboxLogQuery) ([]store.SandboxLog, error)
	UpdateNetwork(ctx context.Context, id string, u sandbox.NetworkUpdate) error
	EgressEvents(id string, after uint64, limit int) ([]egress.Event, uint64, error)
	Exec(ctx context.Context, id string, env map[string]string, args ...string) ([]byte, error)
	OpenTerminal(ctx context.Context, id string, cols, rows uint32) (*sandbox.Terminal, error)
	ListDir(ctx context.Context, id, path string) (sandbox.Directory, error)
	ReadFile(ctx context.Context, id, path string) (io.ReadCloser, error)
	WriteFile(ctx context.Context, id, path string, r io.Reader) error
	Host() (sandbox.HostStatus, error)
}

// Keys verifies API keys; *store.Store implements it.
type Keys interface {
	VerifyAPIKey(ctx context.Context, plaintext string) (store.APIKey, error)
}

// MCPServer serves the MCP tools at /mcp; *mcp.HTTPHandler implements it.
type MCPServer interface {
	// ServeMCP serves r, whose API key apiKey the API has verified.
	ServeMCP(w http.ResponseWriter, r *http.Request, apiKey string)
}

// DefaultMaxBodyBytes bounds request bodies when Config.MaxBodyBytes is 0.
const DefaultMaxBodyBytes = 1 << 20

// DefaultBodyTimeout bounds the sending of a JSON body when
// Config.BodyTimeout is 0. The bodies are small; a client trickling one
// would otherwise hold a connection and a goroutine as long as it liked.
const DefaultBodyTimeout = 30 * time.Second

// Config wires a Handler.
type Config struct {
	Sandboxes Sandboxes
	Keys      Keys
	// APIKeys serves the dashboard's keys page; nil leaves it out.
	APIKeys APIKeys
	// EnvdVersion is reported as envdVersion (envd.Version); required.
	EnvdVersion string
	// Domain is returned as the sandbox domain; empty gives null, so the
	// SDK keeps using its own E2B_DOMAIN.
	Domain string
	// Templates serves the template build API; nil leaves it out.
	Templates *TemplateBuilds
	// Volumes serves the volume API and its content API; nil leaves them
	// out.
	Volumes Volumes
	// MCP serves the MCP tools at /mcp; nil leaves the route out.
	MCP MCPServer
	// Browsers drive the browser action API; nil leaves the route out.
	Browsers *browser.Sessions
	// LiveView signs live view links; nil leaves the route out.
	LiveView *liveview.Signer
	// Ready reports whether the server can take requests (GET /health);
	// nil means always ready.
	Ready func() bool
	// MaxBodyBytes bounds request bodies (default DefaultMaxBodyBytes).
	MaxBodyBytes int64
	// BodyTimeout bounds the time a client may take to send a JSON body
	// (default DefaultBodyTimeout).
	BodyTimeout time.Duration
	// DefaultTimeout is the timeout of a v2 create or connect that sends
	// none (default DefaultSandboxTimeout, E2B's).
	DefaultTimeout time.Duration
	Log            *slog.Logger
	// Now returns the current time (default time.Now).
	Now func() time.Time
}

// Handler serves the control-plane API. It is safe for concurrent use.
type Handler struct {
	sandboxes   Sandboxes
	keys        Keys
	apiKeys     APIKeys
	templates   *TemplateBuilds
	volumes     Volumes
	mcp         MCPServer
	browsers    *browser.Sessions
	liveView    *liveview.Signer
	envdVersion string
	domain      string
	ready       func() bool
	maxBody     int64
	bodyTimeout time.Duration
	defTimeout  time.Duration
	log         *slog.Logger
	now         func() time.Time

	mux *http.ServeMux
}

// New returns the API handler for cfg.
func New(cfg Config) (*Handler, error) {
	if cfg.Sandboxes == nil || cfg.Keys == nil {
		return nil, errors.New("api: Sandboxes and Keys are required")
	}
	if cfg.EnvdVersion == "" {
		return nil, errors.New("api: EnvdVersion is required")
	}
	h := &Handler{
		sandboxes:   cfg.Sandboxes,
		keys:        cfg.Keys,
		apiKeys:     cfg.APIKeys,
		templates:   cfg.Templates,
		volumes:     cfg.Volumes,
		liveView:    cfg.LiveView,
		mcp:         cfg.MCP,
		browsers:    cfg.Browsers,
		envdVersion: cfg.EnvdVersion,
		domain:      cfg.Domain,
		ready:       cfg.Ready,
		maxBody:     cfg.MaxBodyBytes,
		bodyTimeout: cfg.BodyTimeout,
		defTimeout:  cfg.DefaultTimeout,
		log:         cfg.Log,
		now:         cfg.Now,
	}
	if h.ready == nil {
		h.ready = func() bool { return true }
	}
	if h.maxBody <= 0 {
		h.maxBody = DefaultMaxBodyBytes
	}
	if h.bodyTimeout <= 0 {
		h.bodyTimeout = DefaultBodyTimeout
	}
	if h.defTimeout <= 0 {
		h.defTimeout = DefaultSandboxTimeout
	}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	if h.now == nil {
		h.now = time.Now
	}
	h.mux = http.NewServeMux()
	h.routes()
	return h, nil
}

// routes registers every endpoint; handlers live in one file per group.
func (h *Handler) routes() {
	h.mux.HandleFunc("GET /health", h.health)
	h.dashboardRoutes()

	h.mux.Handle("POST /sandboxes", h.auth(h.createV1))
	h.mux.Handle("POST /v2/sandboxes", h.auth(h.createV2))
	h.mux.Handle("GET /sandboxes", h.auth(h.listLegacy))
	h.mux.Handle("GET /v2/sandboxes", h.auth(h.listV2))
	h.mux.Handle("GET /sandboxes/{id}", h.auth(h.getInfo))
	h.mux.Handle("DELETE /sandboxes/{id}", h.auth(h.kill))
	h.mux.Handle("POST /sandboxes/{id}/connect", h.auth(h.connectV1))
	h.mux.Handle("POST /v2/sandboxes/{id}/connect", h.auth(h.connectV2))
	h.mux.Handle("POST /sandboxes/{id}/timeout", h.auth(h.setTimeout))
	h.mux.Handle("POST /sandboxes/{id}/refreshes", h.auth(h.refresh))
	h.mux.Handle("POST /sandboxes/{id}/pause", h.auth(h.pause))
	h.mux.Handle("GET /sandboxes/{id}/metrics", h.auth(h.metrics))
	h.mux.Handle("GET /sandboxes/{id}/logs", h.auth(h.logsV1))
	h.mux.Handle("GET /v2/sandboxes/{id}/logs", h.auth(h.logsV2))
	h.mux.Handle("PUT /sandboxes/{id}/network", h.auth(h.updateNetwork))
	h.mux.Handle("GET /sandboxes/{id}/network/audit", h.auth(h.egressAudit))
	h.mux.Handle("POST /sandboxes/{id}/fork", h.auth(h.fork))
	h.mux.Handle("POST /sandboxes/{id}/snapshots", h.auth(h.createSnapshot))
	h.mux.Handle("POST /sandboxes/{id}/computer-use/anthropic", h.auth(computerUse(h, computeruse.DecodeAnthropic, (*computeruse.Executor).Anthropic)))
	h.mux.Handle("POST /sandboxes/{id}/computer-use/openai", h.auth(computerUse(h, computeruse.DecodeOpenAI, (*computeruse.Executor).OpenAI)))
	h.mux.Handle("POST /sandboxes/{id}/recordings", h.auth(h.startRecording))
	h.mux.Handle("GET /sandboxes/{id}/recordings", h.auth(h.listRecordings))
	if h.browsers != nil {
		h.mux.Handle("POST /sandboxes/{id}/browser/actions", h.auth(h.browserAction))
	}
	h.mux.Handle("POST /sandboxes/{id}/recordings/{recordingId}/stop", h.auth(h.stopRecording))
	if h.liveView != nil {
		h.mux.Handle("POST /sandboxes/{id}/live-view", h.auth(h.createLiveView))
	}
	h.mux.Handle("GET /snapshots", h.auth(h.listSnapshots))
	h.mux.Handle("DELETE /templates/{templateID}", h.auth(h.deleteTemplate))
	if h.templates != nil {
		h.templateRoutes()
	}
	if h.volumes != nil {
		h.volumeRoutes()
	}
	if h.mcp != nil {
		h.mux.Handle("/mcp", h.mcpRoute())
	}
}

// probeMethods are tried to tell "wrong method" (405) from "no such path".
var probeMethods = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	setCORS(w, r)
	if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if _, pattern := h.mux.Handler(r); pattern == "" {
		var allow []string
		for _, m := range probeMethods {
			probe := r.Clone(r.Context())
			probe.Method = m
			if _, p := h.mux.Handler(probe); p != "" {
				allow = append(allow, m)
			}
		}
		if len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			writeError(w, http.StatusMethodNotAllowed, "method "+r.Method+" is not allowed on "+r.URL.Path)
			return
		}
		writeError(w, http.StatusNotFound, "no route for "+r.Method+" "+r.URL.Path)
		return
	}
	h.mux.ServeHTTP(w, r)
}

// auth wraps next with the X-API-Key check. Header names are
// case-insensitive (net/http canonicalizes them).
func (h *Handler) auth(next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("X-API-Key")
		if key == "" {
			writeError(w, http.StatusUnauthorized, "missing API key: set the X-API-Key header")
			return
		}
		if r, ok := h.verify(w, r, key); ok {
			next(w, r)
		}
	})
}

// mcpRoute serves /mcp to callers with a valid API key, which MCP clients
// send as a bearer token ("Authorization: Bearer KEY") and our SDKs as
// X-API-Key; either is taken.
func (h *Handler) mcpRoute() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("X-API-Key")
		if key == "" {
			if scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") {
				key = strings.TrimSpace(token)
			}
		}
		if key == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="agent-sandbox"`)
			writeError(w, http.StatusUnauthorized, "missing API key: send it as Authorization: Bearer KEY (or X-API-Key)")
			return
		}
		if r, ok := h.verify(w, r, key); ok {
			h.mcp.ServeMCP(w, r, key)
		}
	})
}

// verify checks the API key a request carries and that the server is
// ready, answering the request when either fails. It returns the request
// with the verified key in its context.
func (h *Handler) verify(w http.ResponseWriter, r *http.Request, key string) (*http.Request, bool) {
	k, err := h.keys.VerifyAPIKey(r.Context(), key)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			writeError(w, http.StatusUnauthorized, "invalid API key")
			return nil, false
		}
		h.log.Error("verifying api key", "err", err)
		writeError(w, http.StatusInternalServerError, internalMessage)
		return nil, false
	}
	if !h.ready() {
		writeError(w, http.StatusServiceUnavailable, notReadyMessage)
		return nil, false
	}
	return r.WithContext(context.WithValue(r.Context(), apiKeyContext{}, k)), true
}

// apiKeyContext keys the request's verified store.APIKey in its context.
type apiKeyContext struct{}

// timeout converts a timeout in seconds from a request (seconds) and holds
// it to the limit of the request's API key; ok is false when the request
// has been answered with a 400.
func (h *Handler) timeout(w http.ResponseWriter, r *http.Request, n int64) (d time.Duration, ok bool) {
	d, msg := seconds("timeout", n)
	if msg != "" {
		writeError(w, http.StatusBadRequest, msg)
		return 0, false
	}
	return d, h.withinKeyLimit(w, r, d)
}

// withinKeyLimit holds timeout d to the limit of the request's API key,
// answering 400 when it is beyond.
func (h *Handler) withinKeyLimit(w http.ResponseWriter, r *http.Request, d time.Duration) bool {
	k, _ := r.Context().Value(apiKeyContext{}).(store.APIKey)
	if err := sandbox.CheckTimeoutLimit(d, k.MaxTimeout, "this API key's limit"); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return false
	}
	return true
}

// notReadyMessage answers every call made before the server can create
// sandboxes (on first start it builds the base template, which takes
// minutes).
const notReadyMessage = "server is starting (it may be building the base template); retry when GET /health answers 204"

// exposedHeaders are the response headers a browser client may read.
const exposedHeaders = "X-Next-Token, X-Total-Running, Content-Length"

// setCORS allows any origin, method and request header (spec §7.13).
func setCORS(w http.ResponseWriter, r *http.Request) {
	hdr := w.Header()
	if origin := r.Header.Get("Origin"); origin != "" {
		hdr.Set("Access-Control-Allow-Origin", origin)
		hdr.Add("Vary", "Origin")
	} else {
		hdr.Set("Access-Control-Allow-Origin", "*")
	}
	hdr.Set("Access-Control-Expose-Headers", exposedHeaders)
	if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
		hdr.Set("Access-Control-Allow-Methods", "GET, POST, PUT, PATCH, DELETE, HEAD, OPTIONS")
		if req := r.Header.Get("Access-Control-Request-Headers"); req != "" {
			hdr.Set("Access-Control-Allow-Headers", req)
		} else {
			hdr.Set("Access-Control-Allow-Headers", "X-API-Key, Content-Type, Authorization")
		}
		hdr.Set("Access-Control-Max-Age", "7200")
	}
}

// health answers 204 once the server is ready, 503 before.
func (h *Handler) health(w http.ResponseWriter, r *http.Request) {
	if !h.ready() {
		writeError(w, http.StatusServiceUnavailable, notReadyMessage)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
