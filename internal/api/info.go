package api

import "net/http"

// getInfo implements GET /sandboxes/{id} (SandboxDetail), for running and
// paused sandboxes.
func (h *Handler) getInfo(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	sb, err := h.sandboxes.Get(r.Context(), id)
	if err != nil {
		h.fail(w, r, id, err)
		return
	}
	writeJSON(w, http.StatusOK, h.detailView(sb))
}

// kill implements DELETE /sandboxes/{id}: 204, or 404 {"code":404} which
// makes the SDK's kill() return false.
func (h *Handler) kill(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := h.sandboxes.Kill(r.Context(), id); err != nil {
		h.fail(w, r, id, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
