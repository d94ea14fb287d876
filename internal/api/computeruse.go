package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/agent-sandbox/agent-sandbox/internal/computeruse"
	"github.com/agent-sandbox/agent-sandbox/internal/recording"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/template"
)

// The computer-use executors (docs/BROWSER.md): a vendor's action, taken
// verbatim, performed on the sandbox's display, answered in the vendor's
// result shape.

// displayRun runs a command on sandbox id's X display: through envd, as
// the template's user, with DISPLAY set. The executors and the recorder
// act through it.
func (h *Handler) displayRun(id string) func(ctx context.Context, args ...string) ([]byte, error) {
	env := map[string]string{"DISPLAY": template.DesktopDisplay}
	return func(ctx context.Context, args ...string) ([]byte, error) {
		return h.sandboxes.Exec(ctx, id, env, args...)
	}
}

// computerUse is the handler of POST /sandboxes/{id}/computer-use/<vendor>:
// the body decoded strictly by decode, performed by act.
func computerUse[Req, Res any](h *Handler, decode func([]byte) (Req, error), act func(*computeruse.Executor, context.Context, Req) (Res, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var body json.RawMessage
		if !h.decodeRequiredBody(w, r, &body) {
			return
		}
		req, err := decode(body)
		if err != nil {
			h.failDisplay(w, r, err)
			return
		}
		res, err := act(computeruse.New(h.displayRun(r.PathValue("id")), template.DesktopDisplay), r.Context(), req)
		if err != nil {
			h.failDisplay(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, res)
	}
}

// failDisplay answers a failure of an action on sandbox's display: a
// bad request 400 naming the field, an unknown recording 404, a paused
// sandbox or one whose display cannot do it (no X server, no xdotool or
// ffmpeg: not a desktop sandbox) 409 with what failed.
func (h *Handler) failDisplay(w http.ResponseWriter, r *http.Request, err error) {
	id := r.PathValue("id")
	var input *computeruse.InputError
	var recInput *recording.InputError
	var exec *sandbox.ExecError
	switch {
	case errors.As(err, &input):
		writeError(w, http.StatusBadRequest, input.Error())
	case errors.As(err, &recInput):
		writeError(w, http.StatusBadRequest, recInput.Error())
	case errors.Is(err, recording.ErrUnknown):
		writeError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, sandbox.ErrPaused):
		writePaused(w, id)
	case errors.As(err, &exec):
		writeError(w, http.StatusConflict, fmt.Sprintf("sandbox %s has no display this can be done on (the %s template has one, with Chromium on it; the %s template's Chromium is headless): %v",
			id, template.DesktopName, template.BrowserName, err))
	default:
		h.fail(w, r, id, err)
	}
}

// writePaused answers an action that needs sandbox id running while it is
// paused (sandbox.ErrPaused).
func writePaused(w http.ResponseWriter, id string) {
	writeError(w, http.StatusConflict, fmt.Sprintf("sandbox %s is paused: connect to resume it first", id))
}
