package router

import (
	"crypto/subtle"
	"encoding/json"
	"net/http"
	"path"
	"strings"

	"github.com/agent-sandbox/agent-sandbox/internal/template"
)

// AccessTokenHeader carries a sandbox's envd access token, which envd and,
// in a secure sandbox, our other in-sandbox servers require.
const AccessTokenHeader = "X-Access-Token"

// unauthorizedMessage is the exact text envd answers a request without its
// token with (spec §3.2); a test checks it against envd itself.
const unauthorizedMessage = "unauthorized access, please provide a valid access token or method signing if supported"

// ourPorts are the in-sandbox servers of ours other than envd, which
// checks its own token: in a secure sandbox the router refuses a request to
// one of them that lacks the sandbox's access token, except for the routes
// listed with it, which the official SDKs call without the token (and
// which run no code).
var ourPorts = map[int][]route{
	// @e2b/code-interpreter sends X-Access-Token on POST /execute only.
	template.CodeInterpreterPort: {
		{http.MethodGet, "/health"},
		{http.MethodGet, "/contexts"},
		{http.MethodPost, "/contexts"},
		{http.MethodDelete, "/contexts/*"},
		{http.MethodPost, "/contexts/*/restart"},
	},
}

// route is a method and a path whose "*" segments match any one segment.
type route struct{ method, path string }

func (rt route) matches(method, p string) bool {
	if method != rt.method {
		return false
	}
	want, got := strings.Split(rt.path, "/"), strings.Split(p, "/")
	if len(want) != len(got) {
		return false
	}
	for i := range want {
		if want[i] != "*" && want[i] != got[i] {
			return false
		}
	}
	return true
}

// needsAccessToken reports whether r, to port of a sandbox whose access
// token is token ("" unless it is secure), must carry that token.
func needsAccessToken(r *http.Request, port int, token string) bool {
	open, ours := ourPorts[port]
	if !ours || token == "" {
		return false
	}
	// Decoded and cleaned as the server's mux routes it.
	p := path.Clean("/" + r.URL.Path)
	for _, o := range open {
		if o.matches(r.Method, p) {
			return false
		}
	}
	return true
}

// authorizeOurPort answers 401, as envd does, a request to one of our
// ports of a secure sandbox without its access token (see ourPorts).
func authorizeOurPort(w http.ResponseWriter, r *http.Request, port int, token string) bool {
	if !needsAccessToken(r, port, token) ||
		subtle.ConstantTimeCompare([]byte(r.Header.Get(AccessTokenHeader)), []byte(token)) == 1 {
		return true
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8") // envd's
	w.WriteHeader(http.StatusUnauthorized)
	_ = json.NewEncoder(w).Encode(errorBody{Code: http.StatusUnauthorized, Message: unauthorizedMessage})
	return false
}
