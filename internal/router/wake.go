package router

import (
	"context"
	"crypto/subtle"
	"errors"
	"net/http"

	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
)

// Waker resumes a paused sandbox for a request to it, where its lifecycle
// policy says traffic may (E2B's autoResume); *sandbox.Manager implements
// it.
type Waker interface {
	// Asleep reports whether sandbox id is paused and Wake would resume
	// it. It is called on every request, so it must not do I/O.
	Asleep(id string) bool
	// Wake resumes sandbox id if it is asleep, and returns once it runs.
	// Errors wrap sandbox.ErrConflict (another transition holds it too
	// long), sandbox.ErrLimit or sandbox.ErrNotFound.
	Wake(ctx context.Context, id string) error
}

// wakeDenied is E2B's answer to a request that would resume a sandbox
// without the credentials that sandbox requires.
const wakeDenied = "This sandbox can't be resumed with the credentials provided. Check your access token and try again."

// wake resumes t's sandbox before r is proxied, if it is asleep. A
// request to envd of a sandbox that requires its access token must carry
// it (the other ports' checks have run already). It reports whether r
// may go on; when not, the answer is written.
func (rt *Router) wake(w http.ResponseWriter, r *http.Request, t target) bool {
	if rt.waker == nil || !rt.waker.Asleep(t.id) {
		return true
	}
	if t.port == EnvdPort && rt.ingress != nil {
		in, err := rt.ingress.Ingress(t.id)
		if err == nil && in.AccessToken != "" && subtle.ConstantTimeCompare([]byte(r.Header.Get(AccessTokenHeader)), []byte(in.AccessToken)) != 1 {
			writeJSON(w, http.StatusForbidden, sandboxErrorBody{SandboxID: t.id, Message: wakeDenied, Code: http.StatusForbidden})
			return false
		}
	}
	err := rt.waker.Wake(r.Context(), t.id)
	switch {
	case err == nil, errors.Is(err, sandbox.ErrNotFound):
		return true // the dial answers for a sandbox gone meanwhile
	case r.Context().Err() != nil:
		return false // the client went away
	case errors.Is(err, sandbox.ErrConflict):
		writeJSON(w, http.StatusConflict, sandboxErrorBody{SandboxID: t.id, Message: err.Error(), Code: http.StatusConflict})
	case errors.Is(err, sandbox.ErrLimit):
		writeJSON(w, http.StatusTooManyRequests, sandboxErrorBody{SandboxID: t.id, Message: err.Error(), Code: http.StatusTooManyRequests})
	default:
		rt.log.Error("resuming a sandbox for a request", "sandbox_id", t.id, "err", err)
		writeJSON(w, http.StatusBadGateway, sandboxErrorBody{SandboxID: t.id, Message: "The sandbox could not be resumed", Code: http.StatusBadGateway})
	}
	return false
}
