package api

import "net/http"

// pause implements POST /sandboxes/{id}/pause: 204, 409 if already paused,
// 404 if unknown. The optional body {"memory": false} (a filesystem-only
// snapshot) is a 400: memory is always kept.
func (h *Handler) pause(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var body struct {
		Memory *bool `json:"memory"`
	}
	if err := h.decodeBody(w, r, &body); err != nil && err != errNoBody {
		return
	}
	if body.Memory != nil && !*body.Memory {
		writeError(w, http.StatusBadRequest, notSupported("memory false", "a filesystem-only snapshot; a paused sandbox keeps its memory"))
		return
	}
	if err := h.sandboxes.Pause(r.Context(), id); err != nil {
		h.fail(w, r, id, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
