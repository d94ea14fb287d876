package router

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/template"
)

// Dialer opens connections to ports inside sandboxes; *sandbox.Manager
// implements it. Errors wrap sandbox.ErrNotFound, sandbox.ErrPaused or
// isolation.ErrPortClosed.
type Dialer interface {
	Dial(ctx context.Context, id string, port int) (net.Conn, error)
}

// IngressPolicies gives each sandbox's sandbox.Ingress (traffic token, Host
// mask). It is called on every request to a user port, so it must not do
// I/O.
type IngressPolicies interface {
	Ingress(id string) (sandbox.Ingress, error)
}

// TrafficTokenHeader carries the traffic access token.
const TrafficTokenHeader = "E2b-Traffic-Access-Token"

// EnvdPort is the port of envd inside every sandbox.
const EnvdPort = 49983

// internalRoutes are envd endpoints only the server may call (spec §3.5).
var internalRoutes = map[string]bool{
	"/init": true, "/freeze": true, "/unfreeze": true,
	"/collapse": true, "/fsfreeze": true, "/fsthaw": true,
}

// Config wires a Router.
type Config struct {
	Dialer Dialer
	// Ingress enforces traffic tokens and host masks; nil: ports are
	// public and Host headers pass unchanged.
	Ingress IngressPolicies
	// Waker resumes paused sandboxes that traffic may wake (wake.go);
	// nil: requests to a paused sandbox get 502.
	Waker Waker
	// LiveView verifies live view share links; nil refuses every
	// WebSocket to the live view ports.
	LiveView LiveViewTokens
	// BrowserView serves the live view of browser sandboxes under
	// liveview.BrowserPath of the live view ports; nil leaves those
	// paths to the sandbox, like the rest of the ports.
	BrowserView BrowserLiveView
	// Domain is the sandbox domain D of <port>-<id>.D hosts; it may carry
	// a port ("example.test:8443"). Empty disables host routing: only the
	// header routing on localhost, IP literals and sandbox.* works.
	Domain string
	Log    *slog.Logger
}

// Router proxies sandbox traffic. It is safe for concurrent use.
type Router struct {
	dialer      Dialer
	ingress     IngressPolicies // nil: no checks
	waker       Waker           // nil: nothing wakes
	liveView    LiveViewTokens  // nil: no live view
	browserView BrowserLiveView // nil: no live view of browsers
	routes      Routes
	log         *slog.Logger
	proxy       *httputil.ReverseProxy
	transport   *http.Transport
}

// New returns a router for cfg.
func New(cfg Config) (*Router, error) {
	if cfg.Dialer == nil {
		return nil, errors.New("router: Dialer is required")
	}
	routes, err := NewRoutes(cfg.Domain)
	if err != nil {
		return nil, err
	}
	rt := &Router{
		dialer:      cfg.Dialer,
		ingress:     cfg.Ingress,
		waker:       cfg.Waker,
		liveView:    cfg.LiveView,
		browserView: cfg.BrowserView,
		routes:      routes,
		log:         cfg.Log,
	}
	if rt.log == nil {
		rt.log = slog.New(slog.DiscardHandler)
	}
	rt.transport = &http.Transport{
		// The URL host is "<id>:<port>" (see rewrite), which keeps pooled
		// connections per sandbox port and tells dial where to go.
		DialContext:           rt.dial,
		ForceAttemptHTTP2:     false,
		DisableCompression:    true,
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	rt.proxy = &httputil.ReverseProxy{
		Rewrite:        rewrite,
		Transport:      rt.transport,
		ModifyResponse: rewriteDevTools,
		FlushInterval:  -1,
		ErrorHandler:   rt.proxyError,
		ErrorLog:       slog.NewLogLogger(rt.log.Handler(), slog.LevelDebug),
	}
	return rt, nil
}

// Close closes idle connections to sandboxes.
func (rt *Router) Close() error {
	rt.transport.CloseIdleConnections()
	return nil
}

// Match reports whether r is sandbox traffic: routed by headers (Host
// localhost, an IP literal or sandbox.*, with E2b-Sandbox-Id or
// E2b-Sandbox-Port) or by a Host under the domain other than api.<domain>.
// Malformed sandbox requests match too; ServeHTTP answers them with 400.
func (rt *Router) Match(r *http.Request) bool { return rt.routes.Match(r) }

// Front returns the handler for the server's one listener: sandbox traffic
// (Match) goes to the router, everything else to api.
func (rt *Router) Front(api http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rt.Match(r) {
			rt.ServeHTTP(w, r)
			return
		}
		api.ServeHTTP(w, r)
	})
}

// ServeHTTP implements http.Handler: it proxies r to its sandbox port.
func (rt *Router) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	t, ok, err := rt.resolve(r)
	if !ok {
		writeJSON(w, http.StatusBadRequest, errorBody{Code: http.StatusBadRequest, Message: "not a sandbox request"})
		return
	}
	if err != nil {
		Refuse(w, Route{SandboxID: t.id, Port: t.port}, err)
		return
	}
	if t.port == EnvdPort && internalRoutes[path.Clean("/"+r.URL.Path)] {
		writeJSON(w, http.StatusNotFound, errorBody{Code: http.StatusNotFound, Message: "route not found"})
		return
	}
	if t.port != EnvdPort && rt.ingress != nil {
		// An unknown sandbox passes: the dial answers for it.
		if in, err := rt.ingress.Ingress(t.id); err == nil {
			if !authorize(w, r, t, in.TrafficToken) || !authorizeOurPort(w, r, t.port, in.AccessToken) {
				return
			}
			t.host = strings.ReplaceAll(in.MaskRequestHost, "${PORT}", strconv.Itoa(t.port))
		}
	}
	if !rt.authorizeLiveView(w, r, t) {
		return
	}
	if rt.isBrowserView(r, t) {
		rt.serveBrowserView(w, r, t)
		return
	}
	if t.port == template.DevToolsPort {
		t = devToolsTarget(r, t)
	}
	if !rt.wake(w, r, t) {
		return
	}
	// Let a streamed request body keep flowing after the response starts
	// (HTTP/1.1; HTTP/2 is full duplex already and reports an error).
	_ = http.NewResponseController(w).EnableFullDuplex()
	ctx := context.WithValue(r.Context(), targetKey{}, t)
	rt.proxy.ServeHTTP(w, r.WithContext(ctx))
}

// authorize checks the traffic access token of a sandbox created with
// allowPublicTraffic: false (envd's port is exempt: it has its own token),
// answering 403 when it is missing or wrong.
func authorize(w http.ResponseWriter, r *http.Request, t target, want string) bool {
	got := r.Header.Get(TrafficTokenHeader)
	if want == "" {
		return true
	}
	if subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1 {
		return true
	}
	msg := "missing traffic access token: send it in the e2b-traffic-access-token header"
	if got != "" {
		msg = "invalid traffic access token"
	}
	writeJSON(w, http.StatusForbidden, sandboxErrorBody{SandboxID: t.id, Message: msg, Code: http.StatusForbidden})
	return false
}

// targetKey carries the resolved target from ServeHTTP to rewrite and the
// error handler.
type targetKey struct{}

// rewrite points the outgoing request at the sandbox port. The Host header
// is kept as the client sent it unless the sandbox masks it (t.host);
// X-Forwarded-For/-Host/-Proto are set;
// ReverseProxy drops hop-by-hop headers and passes Upgrade through.
func rewrite(pr *httputil.ProxyRequest) {
	t := pr.In.Context().Value(targetKey{}).(target)
	pr.Out.URL.Scheme = "http"
	pr.Out.URL.Host = net.JoinHostPort(t.id, strconv.Itoa(t.port))
	pr.Out.Host = pr.In.Host
	if t.host != "" {
		pr.Out.Host = t.host
	}
	pr.SetXForwarded()
}

// dial opens a connection for the transport; addr is "<id>:<port>".
func (rt *Router) dial(ctx context.Context, _, addr string) (net.Conn, error) {
	id, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("dialing sandbox address %q: %w", addr, err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return nil, fmt.Errorf("dialing sandbox address %q: %w", addr, err)
	}
	return rt.dialer.Dial(ctx, id, port)
}

// proxyError answers a request the proxy could not complete before any
// response header was written.
func (rt *Router) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	t := r.Context().Value(targetKey{}).(target)
	if r.Context().Err() != nil {
		return // the client went away; nobody reads the answer
	}
	if !isSandboxError(err) {
		// A pooled connection may have been cut by a kill or pause just
		// before use; a fresh dial says what is wrong with the sandbox.
		if conn, derr := rt.dialer.Dial(r.Context(), t.id, t.port); derr != nil {
			err = derr
		} else {
			conn.Close()
		}
	}
	rt.writeDialError(w, t, err)
}

// writeDialError answers a request whose sandbox port t could not be
// reached with err.
func (rt *Router) writeDialError(w http.ResponseWriter, t target, err error) {
	if !isSandboxError(err) {
		rt.log.Warn("reaching a sandbox port", "sandbox_id", t.id, "port", t.port, "err", err)
	}
	Refuse(w, Route{SandboxID: t.id, Port: t.port}, err)
}

// Refuse answers a sandbox request that cannot reach route's port with
// err, in the router's words: a malformed route (Resolve's error) is 400;
// a sandbox not found (sandbox.ErrNotFound), paused (sandbox.ErrPaused) or
// a port closed (isolation.ErrPortClosed) is 502 saying so; anything else
// is 502 "The sandbox did not answer".
func Refuse(w http.ResponseWriter, route Route, err error) {
	var re *routeError
	switch {
	case errors.As(err, &re):
		writeJSON(w, http.StatusBadRequest, errorBody{Code: http.StatusBadRequest, Message: re.msg})
	case errors.Is(err, sandbox.ErrNotFound):
		writeJSON(w, http.StatusBadGateway, sandboxErrorBody{SandboxID: route.SandboxID, Message: "The sandbox was not found", Code: http.StatusBadGateway})
	case errors.Is(err, sandbox.ErrPaused):
		writeJSON(w, http.StatusBadGateway, sandboxErrorBody{SandboxID: route.SandboxID, Message: "The sandbox is paused", Code: http.StatusBadGateway})
	case errors.Is(err, isolation.ErrPortClosed):
		writeJSON(w, http.StatusBadGateway, portErrorBody{SandboxID: route.SandboxID, Message: "The sandbox is running but port is not open", Port: route.Port, Code: http.StatusBadGateway})
	default:
		writeJSON(w, http.StatusBadGateway, sandboxErrorBody{SandboxID: route.SandboxID, Message: "The sandbox did not answer", Code: http.StatusBadGateway})
	}
}

func isSandboxError(err error) bool {
	return errors.Is(err, sandbox.ErrNotFound) || errors.Is(err, sandbox.ErrPaused) || errors.Is(err, isolation.ErrPortClosed)
}
