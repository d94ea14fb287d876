package api

import "net/http"

// setTimeout implements POST /sandboxes/{id}/timeout {timeout}: endAt =
// now + timeout, which may shorten the sandbox's life.
func (h *Handler) setTimeout(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	timeout, ok := h.requiredTimeout(w, r)
	if !ok {
		return
	}
	d, ok := h.timeout(w, r, timeout)
	if !ok {
		return
	}
	if err := h.sandboxes.SetTimeout(r.Context(), id, d); err != nil {
		h.fail(w, r, id, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
