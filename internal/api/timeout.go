package api

import "net/http"

// setTimeout implements POST /sandboxes/{id}/timeout {timeout}: endAt =
// now + timeout, which may shorten the sandbox's life.
func (h *Handler) setTimeout(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var body connectBody
	if err := h.decodeBody(w, r, &body); err != nil {
		if err == errNoBody {
			writeError(w, http.StatusBadRequest, errNoBody.Error())
		}
		return
	}
	if body.Timeout == nil {
		writeError(w, http.StatusBadRequest, "timeout is required")
		return
	}
	d, msg := seconds("timeout", *body.Timeout)
	if msg != "" {
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	if err := h.sandboxes.SetTimeout(r.Context(), id, d); err != nil {
		h.fail(w, r, id, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
