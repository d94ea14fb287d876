package router

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/envd"
	"github.com/agent-sandbox/agent-sandbox/internal/envd/state"
	"github.com/agent-sandbox/agent-sandbox/internal/template"
)

// TestOurPortsNeedTheAccessToken checks the code interpreter's port of a
// secure sandbox in both routing modes: without the access token only the
// routes the official SDK calls without it pass; other ports, envd's and
// sandboxes that are not secure are left alone.
func TestOurPortsNeedTheAccessToken(t *testing.T) {
	const token = "the-access-token"
	ci := template.CodeInterpreterPort
	d := newDialer()
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "reached "+r.Method+" "+r.URL.Path) })
	for _, id := range []string{"isecure", "iopen"} {
		for _, port := range []int{ci, 8000, EnvdPort} {
			d.serve(t, id, port, echo)
		}
	}
	rt, err := New(Config{Dialer: d, Domain: "example.test",
		Ingress: ingress{"isecure": {AccessToken: token}, "iopen": {}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(rt.Front(apiMarker))
	t.Cleanup(func() { srv.Close(); rt.Close() })
	refused := envdRefusal(t)

	for _, tc := range []struct {
		name, id       string
		port           int
		method, path   string
		token          string
		wantReachedFor string // "" means refused
	}{
		{"execute without the token", "isecure", ci, "POST", "/execute", "", ""},
		{"execute with a wrong token", "isecure", ci, "POST", "/execute", "wrong", ""},
		{"execute with the token", "isecure", ci, "POST", "/execute", token, "POST /execute"},
		{"an unknown route", "isecure", ci, "GET", "/anything", "", ""},
		{"execute behind ..", "isecure", ci, "POST", "/contexts/../execute", "", ""},
		{"a context route the SDK calls without it, with the wrong method", "isecure", ci, "PUT", "/contexts", "", ""},
		{"health", "isecure", ci, "GET", "/health", "", "GET /health"},
		{"list contexts", "isecure", ci, "GET", "/contexts", "", "GET /contexts"},
		{"create a context", "isecure", ci, "POST", "/contexts", "", "POST /contexts"},
		{"remove a context", "isecure", ci, "DELETE", "/contexts/c1", "", "DELETE /contexts/c1"},
		{"restart a context", "isecure", ci, "POST", "/contexts/c1/restart", "", "POST /contexts/c1/restart"},
		{"a user port", "isecure", 8000, "POST", "/execute", "", "POST /execute"},
		{"envd's port (envd checks)", "isecure", EnvdPort, "GET", "/envs", "", "GET /envs"},
		{"a sandbox that is not secure", "iopen", ci, "POST", "/execute", "", "POST /execute"},
	} {
		for _, mode := range []string{"host", "header"} {
			t.Run(tc.name+"/"+mode, func(t *testing.T) {
				host := strconv.Itoa(tc.port) + "-" + tc.id + ".example.test"
				hdr := map[string]string{}
				if mode == "header" {
					host = "127.0.0.1"
					hdr[headerSandboxID], hdr[headerSandboxPort] = tc.id, strconv.Itoa(tc.port)
				}
				if tc.token != "" {
					hdr[AccessTokenHeader] = tc.token
				}
				res := get(t, srv, tc.method, host, tc.path, hdr)
				body := readAll(t, res.Body)
				if tc.wantReachedFor != "" {
					if res.StatusCode != 200 || body != "reached "+tc.wantReachedFor {
						t.Errorf("got %d %q, want it passed to the sandbox", res.StatusCode, body)
					}
					return
				}
				got := refusal{res.StatusCode, res.Header.Get("Content-Type"), body}
				if got != refused {
					t.Errorf("got %+v, want envd's refusal %+v", got, refused)
				}
			})
		}
	}
}

// refusal is the part of a 401 that must match envd's.
type refusal struct {
	status            int
	contentType, body string
}

// envdRefusal is what envd answers a request without its token.
func envdRefusal(t *testing.T) refusal {
	t.Helper()
	srv := envd.NewServer(state.New(state.Defaults{AccessToken: "x"}), slog.New(slog.DiscardHandler))
	defer srv.Close()
	w := httptest.NewRecorder()
	srv.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/envs", nil))
	if w.Code != http.StatusUnauthorized || !strings.Contains(w.Body.String(), unauthorizedMessage) {
		t.Fatalf("envd without its token: %d %s (does envd still refuse, with this message?)", w.Code, w.Body)
	}
	return refusal{w.Code, w.Header().Get("Content-Type"), w.Body.String()}
}

func TestRouteMatches(t *testing.T) {
	for _, tc := range []struct {
		r            route
		method, path string
		want         bool
	}{
		{route{"GET", "/contexts"}, "GET", "/contexts", true},
		{route{"GET", "/contexts"}, "POST", "/contexts", false},
		{route{"GET", "/contexts"}, "GET", "/contexts/x", false},
		{route{"DELETE", "/contexts/*"}, "DELETE", "/contexts/abc", true},
		{route{"DELETE", "/contexts/*"}, "DELETE", "/contexts", false},
		{route{"POST", "/contexts/*/restart"}, "POST", "/contexts/abc/restart", true},
		{route{"POST", "/contexts/*/restart"}, "POST", "/contexts/abc/restart/x", false},
		{route{"POST", "/contexts/*/restart"}, "POST", "/execute/abc/restart", false},
	} {
		if got := tc.r.matches(tc.method, tc.path); got != tc.want {
			t.Errorf("%v matches %s %s = %v, want %v", tc.r, tc.method, tc.path, got, tc.want)
		}
	}
}
