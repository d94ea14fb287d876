package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/browser"
	"github.com/agent-sandbox/agent-sandbox/internal/liveview"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/template"
)

// DefaultLiveViewTTL is how long a live view link works when the request
// names no ttl; MaxLiveViewTTL is the longest it may ask for.
const (
	DefaultLiveViewTTL = time.Hour
	MaxLiveViewTTL     = 24 * time.Hour
)

// liveViewLinks is the answer of POST /sandboxes/{id}/live-view.
type liveViewLinks struct {
	URL         string    `json:"url"`
	TakeoverURL string    `json:"takeoverUrl"`
	ExpiresAt   time.Time `json:"expiresAt"`
}

// createLiveView implements POST /sandboxes/{id}/live-view {"ttl":
// seconds}: it starts the live view of the sandbox (internal/liveview)
// and answers with a view-only link and a takeover link, both good for
// ttl. The links are absolute when the server has a sandbox domain, and
// paths to append to getHost(port) otherwise.
func (h *Handler) createLiveView(w http.ResponseWriter, r *http.Request) {
	var raw json.RawMessage
	if err := h.decodeBody(w, r, &raw); err != nil && !errors.Is(err, errNoBody) {
		return
	}
	var body struct {
		TTL *int64 `json:"ttl"`
	}
	if len(raw) > 0 {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&body); err != nil {
			writeError(w, http.StatusBadRequest, "body: "+err.Error())
			return
		}
	}
	ttl := DefaultLiveViewTTL
	if body.TTL != nil {
		ttl = time.Duration(*body.TTL) * time.Second
		if *body.TTL < 1 || ttl > MaxLiveViewTTL {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("ttl: want 1 to %d seconds, got %d", int64(MaxLiveViewTTL/time.Second), *body.TTL))
			return
		}
	}
	id := r.PathValue("id")
	pagePath, err := h.startLiveView(r.Context(), id)
	var exec *sandbox.ExecError
	switch {
	case errors.As(err, &exec):
		writeError(w, http.StatusConflict, fmt.Sprintf("sandbox %s has nothing to show: no X display (the %s template has one) and no Chromium with DevTools on port %d (the %s template runs one): %v",
			id, template.DesktopName, template.DevToolsPort, template.BrowserName, err))
		return
	case err != nil:
		h.failBrowser(w, r, err)
		return
	}
	expires := h.now().Add(ttl).Truncate(time.Second)
	writeJSON(w, http.StatusCreated, liveViewLinks{
		URL:         h.liveViewURL(r, id, liveview.ViewPort) + pagePath(h.liveView.Sign(id, false, expires), false),
		TakeoverURL: h.liveViewURL(r, id, liveview.TakeoverPort) + pagePath(h.liveView.Sign(id, true, expires), true),
		ExpiresAt:   expires.UTC(),
	})
}

// startLiveView starts what the live view of sandbox id shows, and
// answers the path of its page for a token: the X display when the
// sandbox has one (noVNC, in the sandbox), else the page of its browser
// (drawn by the server from its DevTools session, which it opens here).
// A sandbox with neither is the display's *sandbox.ExecError.
func (h *Handler) startLiveView(ctx context.Context, id string) (func(token string, takeover bool) string, error) {
	err := liveview.Start(ctx, h.displayRun(id), template.DesktopDisplay)
	var exec *sandbox.ExecError
	switch {
	case err == nil:
		return liveview.PagePath, nil
	case !errors.As(err, &exec) || h.browsers == nil:
		return nil, err
	}
	if _, berr := h.browsers.Get(ctx, id); berr != nil {
		if errors.Is(berr, browser.ErrNoBrowser) {
			return nil, err
		}
		return nil, berr
	}
	return func(token string, _ bool) string { return liveview.BrowserPagePath(token) }, nil
}

// liveViewURL is the origin of port of sandbox id as getHost names it,
// with the scheme r came in with; "" without a sandbox domain.
func (h *Handler) liveViewURL(r *http.Request, id string, port int) string {
	if h.domain == "" {
		return ""
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + strconv.Itoa(port) + "-" + id + "." + h.domain
}
