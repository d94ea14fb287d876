package api

import (
	"errors"
	"net/http"

	"github.com/agent-sandbox/agent-sandbox/internal/recording"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/template"
)

// Recordings of a sandbox's display (docs/BROWSER.md): ffmpeg in the
// sandbox writes the file, which the files API serves.

// recorder records sandbox id's X display.
func (h *Handler) recorder(id string) *recording.Recorder {
	return recording.New(h.displayRun(id), template.DesktopDisplay)
}

// startRecording implements POST /sandboxes/{id}/recordings
// {"format": "mp4" | "webm"}, mp4 when the body is absent.
func (h *Handler) startRecording(w http.ResponseWriter, r *http.Request) {
	body := struct {
		Format string `json:"format"`
	}{Format: "mp4"}
	if err := h.decodeBody(w, r, &body); err != nil && !errors.Is(err, errNoBody) {
		return
	}
	rec, err := h.recorder(r.PathValue("id")).Start(r.Context(), body.Format)
	if err != nil {
		h.failRecording(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, rec)
}

// stopRecording implements POST /sandboxes/{id}/recordings/{recordingId}/stop.
func (h *Handler) stopRecording(w http.ResponseWriter, r *http.Request) {
	rec, err := h.recorder(r.PathValue("id")).Stop(r.Context(), r.PathValue("recordingId"))
	if err != nil {
		h.failRecording(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, rec)
}

// failRecording answers a bad request 400 naming the field, an unknown
// recording 404, and a sandbox ffmpeg cannot record (no display, no
// ffmpeg: not a desktop sandbox) 409 with what failed.
func (h *Handler) failRecording(w http.ResponseWriter, r *http.Request, err error) {
	var input *recording.InputError
	var exec *sandbox.ExecError
	switch {
	case errors.As(err, &input):
		writeError(w, http.StatusBadRequest, input.Error())
	case errors.Is(err, recording.ErrUnknown):
		writeError(w, http.StatusNotFound, err.Error())
	case errors.As(err, &exec):
		writeError(w, http.StatusConflict, "sandbox "+r.PathValue("id")+" cannot record its display (a desktop sandbox can): "+err.Error())
	default:
		h.fail(w, r, r.PathValue("id"), err)
	}
}
