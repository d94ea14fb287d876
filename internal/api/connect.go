package api

import (
	"fmt"
	"net/http"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/store"
)

// maxRefresh bounds POST /sandboxes/{id}/refreshes.
const maxRefresh = 3600

// defaultRefresh is the extension of a refresh without a duration.
const defaultRefresh = 15 * time.Second

// connectBody is the body of both connect versions. memory false (v2's
// onResume 'reboot') resumes a paused sandbox by booting it again over its
// files.
type connectBody struct {
	Timeout *int64 `json:"timeout"`
	Memory  *bool  `json:"memory"`
}

// connectV1 implements POST /sandboxes/{id}/connect: the body and its
// timeout are required.
func (h *Handler) connectV1(w http.ResponseWriter, r *http.Request) {
	if timeout, ok := h.requiredTimeout(w, r); ok {
		h.connect(w, r, timeout, false)
	}
}

// requiredTimeout decodes a connectBody whose body and timeout are
// required. ok is false when the request has already been answered (400 or
// 413).
func (h *Handler) requiredTimeout(w http.ResponseWriter, r *http.Request) (timeout int64, ok bool) {
	var body connectBody
	if !h.decodeRequiredBody(w, r, &body) {
		return 0, false
	}
	if body.Timeout == nil {
		writeError(w, http.StatusBadRequest, "timeout is required")
		return 0, false
	}
	return *body.Timeout, true
}

// connectV2 implements POST /v2/sandboxes/{id}/connect: the body is
// optional and the timeout defaults to 300 s.
func (h *Handler) connectV2(w http.ResponseWriter, r *http.Request) {
	var body connectBody
	if err := h.decodeBody(w, r, &body); err != nil && err != errNoBody {
		return
	}
	timeout := int64(h.defTimeout / time.Second)
	if body.Timeout != nil {
		timeout = *body.Timeout
	}
	h.connect(w, r, timeout, body.Memory != nil && !*body.Memory)
}

// connect extends a running sandbox (200) or resumes a paused one (201),
// with reboot by booting it again over its files.
func (h *Handler) connect(w http.ResponseWriter, r *http.Request, timeout int64, reboot bool) {
	id := r.PathValue("id")
	d, ok := h.timeout(w, r, timeout)
	if !ok {
		return
	}
	sb, resumed, err := h.sandboxes.Connect(r.Context(), id, d, reboot)
	if err != nil {
		h.fail(w, r, id, err)
		return
	}
	status := http.StatusOK
	if resumed {
		status = http.StatusCreated
	}
	writeJSON(w, status, h.sandboxView(sb))
}

// refresh implements POST /sandboxes/{id}/refreshes {duration}: it only
// extends a running sandbox, like connect, and never resumes a paused one
// (409). The body is optional; duration defaults to 15 s, 0 changes nothing.
func (h *Handler) refresh(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var body struct {
		Duration *int64 `json:"duration"`
	}
	if err := h.decodeBody(w, r, &body); err != nil && err != errNoBody {
		return
	}
	d := defaultRefresh
	if body.Duration != nil {
		n := *body.Duration
		if n < 0 || n > maxRefresh {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("duration must be between 0 and %d seconds, got %d", maxRefresh, n))
			return
		}
		d = time.Duration(n) * time.Second
	}
	sb, err := h.sandboxes.Get(r.Context(), id)
	if err != nil {
		h.fail(w, r, id, err)
		return
	}
	if sb.State == store.StatePaused {
		writeError(w, http.StatusConflict, fmt.Sprintf("sandbox %q is paused; connect to resume it", id))
		return
	}
	if d > 0 {
		// Connect only extends a running sandbox. If it was paused since
		// Get, this resumes it, which a refresh should not do; the window
		// is small and the outcome harmless.
		if _, _, err := h.sandboxes.Connect(r.Context(), id, d, false); err != nil {
			h.fail(w, r, id, err)
			return
		}
	}
	w.WriteHeader(http.StatusNoContent)
}
