package api

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/agent-sandbox/agent-sandbox/internal/browser"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/template"
)

// The browser action API (docs/BROWSER.md): one action on the page of a
// browser sandbox's Chromium, driven over the DevTools protocol.

// browserAction implements POST /sandboxes/{id}/browser/actions.
func (h *Handler) browserAction(w http.ResponseWriter, r *http.Request) {
	var body json.RawMessage
	if !h.decodeRequiredBody(w, r, &body) {
		return
	}
	id := r.PathValue("id")
	a, err := browser.DecodeAction(body)
	if err != nil {
		h.failBrowser(w, r, err)
		return
	}
	sess, err := h.browsers.Get(r.Context(), id)
	if err != nil {
		h.failBrowser(w, r, err)
		return
	}
	res, err := sess.Do(r.Context(), a)
	if err != nil {
		h.failBrowser(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// failBrowser answers a failed browser action: bad input 400 naming the
// field, an action the page cannot do 422, a sandbox without a browser or
// paused 409.
func (h *Handler) failBrowser(w http.ResponseWriter, r *http.Request, err error) {
	id := r.PathValue("id")
	var input *browser.InputError
	var page *browser.PageError
	switch {
	case errors.As(err, &input):
		writeError(w, http.StatusBadRequest, input.Error())
	case errors.As(err, &page):
		writeError(w, http.StatusUnprocessableEntity, page.Error())
	case errors.Is(err, sandbox.ErrPaused):
		writePaused(w, id)
	case errors.Is(err, browser.ErrNoBrowser):
		tmpl := "its template"
		if sb, gerr := h.sandboxes.Get(r.Context(), id); gerr == nil {
			tmpl = "template " + cmp.Or(sb.Alias, sb.TemplateID)
		}
		writeError(w, http.StatusConflict, fmt.Sprintf("sandbox %s has no browser: %s runs no Chromium with DevTools on port %d (the %s template does, and the %s template once its display is up)",
			id, tmpl, template.DevToolsPort, template.BrowserName, template.DesktopName))
	default:
		h.fail(w, r, id, err)
	}
}
