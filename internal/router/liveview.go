package router

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/liveview"
)

// LiveViewTokens verifies the tokens of live view share links;
// *liveview.Signer implements it.
type LiveViewTokens interface {
	Verify(token, id string, port int, now time.Time) error
}

var _ LiveViewTokens = (*liveview.Signer)(nil)

// authorizeLiveView guards the live view (internal/liveview): the x11vnc
// ports are never routed, and a WebSocket to a noVNC port needs a token
// for that sandbox and port in its token query parameter. The pages and
// scripts of noVNC pass without one: they are Debian's, the same for
// every sandbox. It answers 403 and reports false when r may not pass.
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

// isUpgrade reports whether r asks to switch protocols (a WebSocket).
func isUpgrade(r *http.Request) bool {
	return r.Header.Get("Upgrade") != ""
}
