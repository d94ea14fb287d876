// Package files serves envd's GET and POST /files: downloads and uploads,
// authorised by the access token or a signed URL.
//
// The server does not apply its token check to /files; Handler authorises
// every request itself (see VerifySignature), then resolves the user from
// the username query parameter and the path as every envd service does.
package files

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/envd/httpjson"
	"github.com/agent-sandbox/agent-sandbox/internal/envd/identity"
	"github.com/agent-sandbox/agent-sandbox/internal/envd/state"
)

// Handler serves /files.
type Handler struct {
	state *state.State
	log   *slog.Logger
	now   func() time.Time // for signature expiry; time.Now outside tests
}

// NewHandler returns the /files handler.
func NewHandler(st *state.State, log *slog.Logger) *Handler {
	return &Handler{state: st, log: log, now: time.Now}
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var err error
	switch r.Method {
	case http.MethodGet:
		err = h.serve(w, r, OpRead, h.download)
	case http.MethodPost:
		err = h.serve(w, r, OpWrite, h.upload)
	default:
		w.Header().Set("Allow", "GET, POST")
		err = errorf(http.StatusMethodNotAllowed, "method %s not allowed on /files", r.Method)
	}
	if err == nil {
		return
	}
	var he *httpError
	if !errors.As(err, &he) {
		he = &httpError{status: http.StatusInternalServerError, msg: err.Error()}
	}
	if he.status >= 500 {
		h.log.Warn("serving /files", "method", r.Method, "status", he.status, "err", he.msg)
	}
	httpjson.Error(w, he.status, he.msg)
}

// serve authorises r for op, looks up the user it acts as and hands both to
// do, which returns an *httpError for anything the client should see.
func (h *Handler) serve(w http.ResponseWriter, r *http.Request, op Op, do func(http.ResponseWriter, *http.Request, *identity.User) error) error {
	q := r.URL.Query()
	if err := h.authorize(r.Header, q, op); err != nil {
		return err
	}
	name := q.Get("username")
	if name == "" {
		name = h.state.DefaultUser()
	}
	u, err := identity.Lookup(name)
	if err != nil {
		return errorf(http.StatusUnauthorized, "error looking up user '%s': %v", name, err)
	}
	return do(w, r, u)
}

// authorize checks the access token header or, without one, the signature.
// Everything is allowed while envd has no access token.
func (h *Handler) authorize(hdr http.Header, q url.Values, op Op) error {
	token := h.state.AccessToken()
	if token == "" {
		return nil
	}
	if got := hdr.Get("X-Access-Token"); got != "" {
		if subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
			return errorf(http.StatusUnauthorized, "access token present in header but does not match")
		}
		return nil
	}
	if err := VerifySignature(q, op, token, h.now()); err != nil {
		return errorf(http.StatusUnauthorized, "%s", err)
	}
	return nil
}

// resolve turns a path from the request into the absolute path it names.
// A NUL byte cannot be part of a file name.
func (h *Handler) resolve(path string, u *identity.User) (string, error) {
	if strings.ContainsRune(path, 0) {
		return "", errorf(http.StatusBadRequest, "resolving path '%s': a path cannot contain a NUL byte", path)
	}
	p, err := identity.ResolvePath(path, u, h.state.DefaultWorkdir())
	if err != nil {
		return "", errorf(http.StatusBadRequest, "resolving path '%s': %v", path, err)
	}
	return p, nil
}

// httpError is an error with the status and message the client gets.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func errorf(status int, format string, args ...any) error {
	return &httpError{status: status, msg: fmt.Sprintf(format, args...)}
}
