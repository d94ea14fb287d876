package api

import "net/http"

// pause implements POST /sandboxes/{id}/pause: 204, 409 if already paused,
// 404 if unknown. The optional body {"memory": false} pauses with the file
// system only: the sandbox boots again over it when resumed.
func (h *Handler) pause(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var body struct {
		Memory *bool `json:"memory"`
	}
	if err := h.decodeBody(w, r, &body); err != nil && err != errNoBody {
		return
	}
	keepMemory := body.Memory == nil || *body.Memory
	if err := h.sandboxes.Pause(r.Context(), id, keepMemory); err != nil {
		h.fail(w, r, id, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
