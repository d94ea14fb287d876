package api

import (
	"errors"
	"net/http"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/recording"
	"github.com/agent-sandbox/agent-sandbox/internal/template"
)

// Recordings of a sandbox's display (docs/BROWSER.md): ffmpeg in the
// sandbox writes the file, which the files API serves.

// recorder records sandbox id's X display.
func (h *Handler) recorder(id string) *recording.Recorder {
	return recording.New(h.displayRun(id), template.DesktopDisplay)
}

// startRecording implements POST /sandboxes/{id}/recordings
// {"format": "mp4" | "webm", "durationSeconds": N}: mp4 when the body is
// absent, until stopped without a duration.
func (h *Handler) startRecording(w http.ResponseWriter, r *http.Request) {
	body := struct {
		Format          string  `json:"format"`
		DurationSeconds float64 `json:"durationSeconds"`
	}{Format: "mp4"}
	if err := h.decodeBody(w, r, &body); err != nil && !errors.Is(err, errNoBody) {
		return
	}
	// Past the bound before the conversion, which would overflow.
	d := time.Duration(min(body.DurationSeconds, recording.MaxDuration.Seconds()+1) * float64(time.Second))
	rec, err := h.recorder(r.PathValue("id")).Start(r.Context(), body.Format, d)
	if err != nil {
		h.failDisplay(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, rec)
}

// stopRecording implements POST /sandboxes/{id}/recordings/{recordingId}/stop.
func (h *Handler) stopRecording(w http.ResponseWriter, r *http.Request) {
	rec, err := h.recorder(r.PathValue("id")).Stop(r.Context(), r.PathValue("recordingId"))
	if err != nil {
		h.failDisplay(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, rec)
}

// listRecordings implements GET /sandboxes/{id}/recordings: the
// recordings in progress (those a template started with the sandbox
// among them), which stopRecording ends, and the files in
// recording.Dir, which the files API serves.
func (h *Handler) listRecordings(w http.ResponseWriter, r *http.Request) {
	l, err := h.recorder(r.PathValue("id")).List(r.Context())
	if err != nil {
		h.failDisplay(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, l)
}
