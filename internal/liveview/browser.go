package liveview

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/agent-sandbox/agent-sandbox/internal/browser"
)

// BrowserPath is where the live view of a sandbox's browser is served, on
// ViewPort and TakeoverPort alike: its page, the page's script, and its
// WebSocket (BrowserPath + "websocket"). The router hands requests under
// it to a BrowserView instead of the sandbox.
const BrowserPath = "/browser/"

// BrowserPagePath is the page of the browser's live view, connecting with
// token.
func BrowserPagePath(token string) string {
	return BrowserPath + "?token=" + token
}

var (
	//go:embed page/index.html
	pageHTML []byte
	//go:embed page/view.js
	pageJS []byte
)

// pageCSP lets the page run its own script, draw frames and open its
// WebSocket, and nothing else; no-referrer keeps the token in its URL
// from leaving with a request.
const pageCSP = "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"

const (
	// maxInputMessage bounds a message of the page: one input event.
	maxInputMessage = 4096
	// socketWriteTimeout bounds the sending of a frame; a viewer that
	// cannot take one for that long is dropped.
	socketWriteTimeout = 10 * time.Second
	// dispatchTimeout bounds the page's handling of one input event.
	dispatchTimeout = 10 * time.Second
)

// Screen is one viewer's screencast of a sandbox's page and its way to
// send input there; *browser.Watcher implements it.
type Screen interface {
	Next(ctx context.Context) (browser.Frame, error)
	Dispatch(ctx context.Context, ev browser.InputEvent) error
	Close()
}

var _ Screen = (*browser.Watcher)(nil)

// BrowserView serves the live view of sandboxes' browsers, drawn by the
// server from the DevTools session it keeps with each (internal/browser):
// nothing runs in the sandbox for it. It is safe for concurrent use.
type BrowserView struct {
	watch func(ctx context.Context, id string) (Screen, error)
}

// NewBrowserView returns the live view of the browsers of sessions.
func NewBrowserView(sessions *browser.Sessions) *BrowserView {
	return &BrowserView{watch: func(ctx context.Context, id string) (Screen, error) {
		sess, err := sessions.Get(ctx, id)
		if err != nil {
			return nil, err
		}
		w, err := sess.Watch(ctx)
		if err != nil {
			return nil, err
		}
		return w, nil
	}}
}

// ServeLiveView serves r, a request under BrowserPath to ViewPort
// (takeover false) or TakeoverPort of sandbox id. The router has checked
// the token of a WebSocket upgrade for that port, so it is the port, not
// the token, that decides whether the page's input is taken. It returns
// an error, having answered nothing, when the sandbox's browser cannot be
// watched.
func (v *BrowserView) ServeLiveView(w http.ResponseWriter, r *http.Request, id string, takeover bool) error {
	name := strings.TrimPrefix(r.URL.Path, BrowserPath)
	if name == "websocket" {
		return v.serveSocket(w, r, id, takeover)
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return nil
	}
	var body []byte
	switch name {
	case "":
		body = pageHTML
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Content-Security-Policy", pageCSP)
	case "view.js":
		body = pageJS
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
	default:
		http.NotFound(w, r)
		return nil
	}
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("Referrer-Policy", "no-referrer")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if r.Method == http.MethodGet {
		w.Write(body)
	}
	return nil
}

// status is a text message to the page: which link it was opened with
// (first), or why its input was refused.
type status struct {
	Mode  string `json:"mode,omitempty"` // "view" or "takeover"
	Error string `json:"error,omitempty"`
}

// serveSocket streams the screencast to the page as binary messages (one
// JPEG each) and, through the takeover port, dispatches the input events
// the page sends as text messages.
func (v *BrowserView) serveSocket(w http.ResponseWriter, r *http.Request, id string, takeover bool) error {
	// The router checks the token of every request that asks for an
	// upgrade: nothing else may open a session.
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		http.Error(w, "the live view's WebSocket takes only WebSocket upgrades", http.StatusUpgradeRequired)
		return nil
	}
	screen, err := v.watch(r.Context(), id)
	if err != nil {
		return err
	}
	defer screen.Close()
	ws, err := websocket.Accept(w, r, nil) // same origin only: the page is ours
	if err != nil {
		return nil // Accept answered
	}
	defer ws.CloseNow()
	ws.SetReadLimit(maxInputMessage)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	mode := "view"
	if takeover {
		mode = "takeover"
	}
	if send(ctx, ws, status{Mode: mode}) != nil {
		return nil
	}
	framesDone := make(chan struct{})
	defer func() {
		cancel() // ends a Next waiting for a frame
		<-framesDone
	}()
	go func() {
		defer close(framesDone)
		defer cancel()
		sendFrames(ctx, ws, screen)
	}()
	for {
		_, msg, err := ws.Read(ctx)
		if err != nil {
			return nil
		}
		if why := gateInput(ctx, screen, msg, takeover); why != "" && send(ctx, ws, status{Error: why}) != nil {
			return nil
		}
	}
}

// sendFrames sends the screen's frames until it or ws fails; a session
// that ended closes ws with the reason, for the page to connect again.
func sendFrames(ctx context.Context, ws *websocket.Conn, screen Screen) {
	for {
		f, err := screen.Next(ctx)
		if errors.Is(err, browser.ErrSessionEnded) {
			ws.Close(websocket.StatusGoingAway, "the browser's session ended")
			return
		}
		if err != nil {
			return
		}
		wctx, cancel := context.WithTimeout(ctx, socketWriteTimeout)
		err = ws.Write(wctx, websocket.MessageBinary, f.JPEG)
		cancel()
		if err != nil {
			return
		}
	}
}

// gateInput is the input gate: a message through the view port is
// refused whatever it says, one through the takeover port is decoded and
// dispatched to the page. It answers why the input went nowhere, "" when
// the page got it.
func gateInput(ctx context.Context, screen Screen, msg []byte, takeover bool) string {
	if !takeover {
		return "input refused: this is the view-only link; the takeover link takes the mouse and keyboard"
	}
	ev, err := browser.DecodeInput(msg)
	if err != nil {
		return "input refused: " + err.Error()
	}
	ctx, cancel := context.WithTimeout(ctx, dispatchTimeout)
	defer cancel()
	if err := screen.Dispatch(ctx, ev); err != nil {
		return "input failed: " + err.Error()
	}
	return ""
}

// send sends s as a text message.
func send(ctx context.Context, ws *websocket.Conn, s status) error {
	msg, _ := json.Marshal(s) // two strings always marshal
	ctx, cancel := context.WithTimeout(ctx, socketWriteTimeout)
	defer cancel()
	return ws.Write(ctx, websocket.MessageText, msg)
}
