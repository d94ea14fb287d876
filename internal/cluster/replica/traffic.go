package replica

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/cluster/v1alpha1"
	"github.com/agent-sandbox/agent-sandbox/internal/router"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
)

// Traffic forwards sandbox traffic to the node that holds the sandbox,
// at its SandboxNode's spec.address, as the client sent it (Host, headers,
// path, body; streams and protocol upgrades such as WebSocket too): the
// node's router, whose domain is the replicas', routes it by the same
// rules and applies its own (envd and traffic tokens, host masks), as for
// a client of its own. The sandbox's ID is its object's name, which the
// node gives the local sandbox.
type Traffic struct {
	routes    router.Routes
	sandboxes *Sandboxes
	log       *slog.Logger
	proxy     *httputil.ReverseProxy
	transport *http.Transport
}

// nodeKey carries the node's address from ServeHTTP to rewrite and the
// error handler.
type nodeKey struct{}

// NewTraffic forwards the requests routes matches to the nodes of the
// objects s reads.
func NewTraffic(routes router.Routes, s *Sandboxes, log *slog.Logger) *Traffic {
	t := &Traffic{routes: routes, sandboxes: s, log: log}
	t.transport = &http.Transport{
		// Every sandbox of a node is behind one address: keep enough
		// connections to it for many clients at once.
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
		ForceAttemptHTTP2:     false,
	}
	t.proxy = &httputil.ReverseProxy{
		Rewrite:       rewrite,
		Transport:     t.transport,
		FlushInterval: -1,
		ErrorHandler:  t.nodeError,
		ErrorLog:      slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	return t
}

// Close closes idle connections to the nodes.
func (t *Traffic) Close() error {
	t.transport.CloseIdleConnections()
	return nil
}

// Front returns the handler for the replica's listener: sandbox traffic
// goes to its node, everything else to api.
func (t *Traffic) Front(api http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		route, ok, err := t.routes.Resolve(r)
		switch {
		case !ok:
			api.ServeHTTP(w, r)
		case err != nil:
			router.Refuse(w, route, err)
		default:
			t.forward(w, r, route)
		}
	})
}

// forward sends r to the node of route's sandbox, or answers as the
// router does when there is none: a sandbox unknown or ended is not
// found, a paused one paused.
func (t *Traffic) forward(w http.ResponseWriter, r *http.Request, route router.Route) {
	addr, err := t.nodeOf(r.Context(), route.SandboxID)
	if err != nil {
		if !errors.Is(err, sandbox.ErrNotFound) && !errors.Is(err, sandbox.ErrPaused) {
			t.log.Warn("finding the node of a sandbox", "sandbox_id", route.SandboxID, "err", err)
		}
		router.Refuse(w, route, err)
		return
	}
	// As the router: a streamed request body keeps flowing after the
	// response starts.
	_ = http.NewResponseController(w).EnableFullDuplex()
	t.proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), nodeKey{}, addr)))
}

// nodeOf returns the address of the node running sandbox id. Its object
// comes from the cache or, when the cache lacks it or has it not yet
// started, from the API server: the cache lags, and a create through
// another replica may have returned already.
func (t *Traffic) nodeOf(ctx context.Context, id string) (string, error) {
	o, cached := t.sandboxes.cfg.Cache.Sandbox(id)
	if !cached || o.Status.State == "" || o.Status.State == v1alpha1.SandboxPending {
		var err error
		if o, err = t.sandboxes.get(ctx, id); err != nil {
			return "", err
		}
	}
	switch {
	case o.Deleting(): // killed: its node finishes the kill
		return "", sandbox.ErrNotFound
	case o.Status.State == v1alpha1.SandboxRunning:
	case o.Status.State == v1alpha1.SandboxPaused:
		return "", sandbox.ErrPaused
	default: // not started yet, or ended
		return "", sandbox.ErrNotFound
	}
	name := cmp.Or(o.Status.Node, o.Spec.Node)
	n, ok := t.sandboxes.cfg.Cache.Node(name)
	if !ok || n.Spec.Address == "" {
		return "", fmt.Errorf("sandbox %s runs on node %s, which has no address", id, name)
	}
	return n.Spec.Address, nil
}

// rewrite points the outgoing request at the node and keeps the Host the
// client sent, by which the node routes it. ReverseProxy drops hop-by-hop
// headers (and X-Forwarded-*, which the node sets again) and passes
// Upgrade through.
func rewrite(pr *httputil.ProxyRequest) {
	pr.Out.URL.Scheme = "http"
	pr.Out.URL.Host = pr.In.Context().Value(nodeKey{}).(string)
	pr.Out.Host = pr.In.Host
}

// nodeError answers a request the node did not take.
func (t *Traffic) nodeError(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil {
		return // the client went away; nobody reads the answer
	}
	route, _, _ := t.routes.Resolve(r)
	t.log.Warn("forwarding sandbox traffic to its node", "sandbox_id", route.SandboxID, "node", r.Context().Value(nodeKey{}), "err", err)
	router.Refuse(w, route, err)
}
