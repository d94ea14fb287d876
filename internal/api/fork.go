package api

import (
	"net/http"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
)

// forkEntry is one SandboxForkResult: the sandbox, or why it did not
// start. Mode is our extension: "full" when the fork has the parent's
// processes and memory, "filesystem" when it booted afresh over a copy of
// the parent's files.
type forkEntry struct {
	Sandbox *sandboxView `json:"sandbox,omitempty"`
	Mode    string       `json:"mode,omitempty"`
	Error   *errorBody   `json:"error,omitempty"`
}

// fork implements POST /sandboxes/{id}/fork {timeout?, count?}: 201 with
// one entry per fork; 400 for a count outside 1..100 or a bad timeout,
// 404 for an unknown sandbox, 409 for a paused one.
func (h *Handler) fork(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var body struct {
		Timeout *int64 `json:"timeout"`
		Count   *int64 `json:"count"`
	}
	if err := h.decodeBody(w, r, &body); err != nil && err != errNoBody {
		return
	}
	count, timeout := int64(1), sandbox.DefaultForkTimeout
	if body.Count != nil {
		count = min(max(*body.Count, 0), sandbox.MaxForks+1) // the manager says which bound
	}
	if body.Timeout != nil {
		timeout = time.Duration(min(max(*body.Timeout, 0), 1<<31)) * time.Second
	}
	results, mode, err := h.sandboxes.Fork(r.Context(), id, timeout, int(count))
	if err != nil {
		h.fail(w, r, id, err)
		return
	}
	out := make([]forkEntry, len(results))
	for i, res := range results {
		if res.Err != nil {
			status, msg := h.failure(r, "", res.Err)
			out[i].Error = &errorBody{Code: status, Message: msg}
			continue
		}
		v := h.sandboxView(res.Sandbox)
		out[i].Sandbox, out[i].Mode = &v, mode
	}
	writeJSON(w, http.StatusCreated, out)
}
