package router

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/liveview"
	"github.com/agent-sandbox/agent-sandbox/internal/template"
)

// LiveViewTokens verifies the tokens of live view share links;
// *liveview.Signer implements it.
type LiveViewTokens interface {
	Verify(token, id string, port int, now time.Time) error
}

var _ LiveViewTokens = (*liveview.Signer)(nil)

// BrowserLiveView serves the live view of a sandbox's browser, which the
// server draws itself; *liveview.BrowserView implements it.
type BrowserLiveView interface {
	// ServeLiveView serves r, under liveview.BrowserPath of sandbox id's
	// view port (takeover false) or takeover port. It returns an error,
	// having answered nothing, when the sandbox's browser cannot be
	// reached.
	ServeLiveView(w http.ResponseWriter, r *http.Request, id string, takeover bool) error
}

var _ BrowserLiveView = (*liveview.BrowserView)(nil)

// authorizeLiveView guards the live view (internal/liveview): the x11vnc
// ports are never routed, and a WebSocket to a live view port (noVNC's,
// or the browser view's) needs a token for that sandbox and port in its
// token query parameter. Pages and scripts pass without one: noVNC's are
// Debian's and the browser view's the server's, the same for every
// sandbox. It answers 403 and reports false when r may not pass.
func (rt *Router) authorizeLiveView(w http.ResponseWriter, r *http.Request, t target) bool {
	var msg string
	switch {
	case liveview.VNCPorts[t.port]:
		msg = fmt.Sprintf("port %d is the live view's VNC server, reachable only through its share link", t.port)
	case t.port != liveview.ViewPort && t.port != liveview.TakeoverPort, !isUpgrade(r):
		return true
	case rt.liveView == nil:
		msg = "this server signs no live view links"
	default:
		err := rt.liveView.Verify(r.URL.Query().Get("token"), t.id, t.port, time.Now())
		switch {
		case err == nil:
			return true
		case errors.Is(err, liveview.ErrExpired):
			msg = "the live view link has expired: ask for a new one (POST /sandboxes/{id}/live-view)"
		case t.port == liveview.TakeoverPort:
			msg = "taking over the live view needs its takeover token"
		default:
			msg = "the live view needs the token of its share link"
		}
	}
	writeJSON(w, http.StatusForbidden, sandboxErrorBody{SandboxID: t.id, Message: msg, Code: http.StatusForbidden})
	return false
}

// isBrowserView reports whether r, to t, is for the live view of a
// browser (liveview.BrowserPath of a live view port), which the server
// serves instead of the sandbox.
func (rt *Router) isBrowserView(r *http.Request, t target) bool {
	return rt.browserView != nil && (t.port == liveview.ViewPort || t.port == liveview.TakeoverPort) &&
		strings.HasPrefix(r.URL.Path, liveview.BrowserPath)
}

// serveBrowserView serves the live view of t's browser, once the checks
// of any request to the port have passed (the traffic token, the live
// view token of a WebSocket) and a sandbox asleep was woken.
func (rt *Router) serveBrowserView(w http.ResponseWriter, r *http.Request, t target) {
	if !rt.wake(w, r, t) {
		return
	}
	if err := rt.browserView.ServeLiveView(w, r, t.id, t.port == liveview.TakeoverPort); err != nil {
		t.port = template.DevToolsPort // what could not be reached: the browser
		rt.writeDialError(w, t, err)
	}
}

// isUpgrade reports whether r asks to switch protocols (a WebSocket).
func isUpgrade(r *http.Request) bool {
	return r.Header.Get("Upgrade") != ""
}
