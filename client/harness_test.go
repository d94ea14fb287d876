package client

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/envd/envdtest"
)

const (
	testKey   = "e2b_0123456789abcdef0123456789abcdef01234567"
	testToken = "envd-token"
)

// fakeAPI imitates the control plane: an in-memory set of sandboxes, every
// request recorded.
type fakeAPI struct {
	mu        sync.Mutex
	sandboxes map[string]SandboxInfo
	requests  []recorded
	nextID    int
}

type recorded struct {
	Method, Path, RawQuery, Body, APIKey string
}

func newFakeAPI() *fakeAPI { return &fakeAPI{sandboxes: map[string]SandboxInfo{}} }

func (f *fakeAPI) add(sb SandboxInfo) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sandboxes[sb.ID] = sb
}

func (f *fakeAPI) last() recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests[len(f.requests)-1]
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func apiError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"code": status, "message": msg})
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, recorded{r.Method, r.URL.EscapedPath(), r.URL.RawQuery, string(body), r.Header.Get("X-Api-Key")})
	if r.Header.Get("X-Api-Key") != testKey {
		apiError(w, 401, "Invalid API key")
		return
	}
	wire := func(sb SandboxInfo) map[string]any {
		return map[string]any{"sandboxID": sb.ID, "templateID": sb.TemplateID, "clientID": "6532622b",
			"envdVersion": "0.6.4", "envdAccessToken": testToken, "domain": nil}
	}
	path := r.URL.Path
	switch {
	case r.Method == "POST" && path == "/v2/sandboxes":
		var req struct {
			TemplateID string            `json:"templateID"`
			Metadata   map[string]string `json:"metadata"`
		}
		if err := json.Unmarshal(body, &req); err != nil {
			apiError(w, 400, err.Error())
			return
		}
		f.nextID++
		sb := SandboxInfo{ID: fmt.Sprintf("sb%d", f.nextID), TemplateID: req.TemplateID, State: StateRunning,
			Metadata: req.Metadata, StartedAt: time.Now().UTC(), EndAt: time.Now().UTC().Add(5 * time.Minute)}
		f.sandboxes[sb.ID] = sb
		writeJSON(w, 201, wire(sb))
	case r.Method == "GET" && path == "/v2/sandboxes":
		ids := slices.Sorted(func(yield func(string) bool) {
			for id := range f.sandboxes {
				if !yield(id) {
					return
				}
			}
		})
		var out []SandboxInfo
		for _, id := range ids {
			out = append(out, f.sandboxes[id])
		}
		// One sandbox per page when a token is asked for, to test paging.
		if r.URL.Query().Get("limit") == "1" {
			i := 0
			if tok := r.URL.Query().Get("nextToken"); tok != "" {
				fmt.Sscan(tok, &i)
			}
			if i+1 < len(out) {
				w.Header().Set("X-Next-Token", fmt.Sprint(i+1))
			}
			out = out[i : i+1]
		}
		if out == nil {
			out = []SandboxInfo{}
		}
		writeJSON(w, 200, out)
	case strings.HasPrefix(path, "/sandboxes/") || strings.HasPrefix(path, "/v2/sandboxes/"):
		rest := strings.TrimPrefix(strings.TrimPrefix(path, "/v2"), "/sandboxes/")
		id, action, _ := strings.Cut(rest, "/")
		sb, ok := f.sandboxes[id]
		if !ok {
			apiError(w, 404, fmt.Sprintf("sandbox %q not found", id))
			return
		}
		switch {
		case r.Method == "GET" && action == "":
			writeJSON(w, 200, sb)
		case r.Method == "DELETE" && action == "":
			delete(f.sandboxes, id)
			w.WriteHeader(204)
		case r.Method == "POST" && action == "timeout":
			w.WriteHeader(204)
		case r.Method == "POST" && action == "connect":
			writeJSON(w, 200, wire(sb))
		case r.Method == "POST" && action == "live-view":
			writeJSON(w, 201, LiveView{URL: "http://6090-" + id + ".example.test/vnc.html", TakeoverURL: "http://6091-" + id + ".example.test/vnc.html",
				ExpiresAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)})
		case r.Method == "POST" && action == "recordings":
			writeJSON(w, 201, map[string]string{"recordingId": "rec-0123456789abcdef", "path": "/home/user/recordings/rec-0123456789abcdef.mp4"})
		case r.Method == "GET" && action == "recordings":
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"inProgress":[{"recordingId":"rec-0123456789abcdef","path":"/home/user/recordings/rec-0123456789abcdef.mp4","awaitingDisplay":true}],`+
				`"files":[{"path":"/home/user/recordings/rec-fedcba9876543210.webm","sizeBytes":52311}]}`)
		case r.Method == "POST" && action == "recordings/rec-0123456789abcdef/stop":
			writeJSON(w, 200, map[string]any{"recordingId": "rec-0123456789abcdef", "path": "/home/user/recordings/rec-0123456789abcdef.mp4", "sizeBytes": 1234})
		default:
			apiError(w, 404, "no route")
		}
	default:
		apiError(w, 404, "no route")
	}
}

// routedEnvd is a real envd behind the header routing the server does: a
// request without E2b-Sandbox-Id and E2b-Sandbox-Port: 49983 is refused.
type routedEnvd struct {
	t  *testing.T
	id string

	mu      sync.Mutex
	handler http.Handler  // a test may wrap it, under mu
	headers []http.Header // of every request
}

func (e *routedEnvd) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	e.headers = append(e.headers, r.Header.Clone())
	handler := e.handler
	e.mu.Unlock()
	if got := r.Header.Get("E2b-Sandbox-Id"); got != e.id {
		e.t.Errorf("%s %s: E2b-Sandbox-Id = %q, want %q", r.Method, r.URL.Path, got, e.id)
		apiError(w, 502, "no such sandbox")
		return
	}
	if got := r.Header.Get("E2b-Sandbox-Port"); got != "49983" {
		e.t.Errorf("%s %s: E2b-Sandbox-Port = %q, want 49983", r.Method, r.URL.Path, got)
		apiError(w, 502, "bad port")
		return
	}
	handler.ServeHTTP(w, r)
}

// requestHeaders returns the headers of every request so far.
func (e *routedEnvd) requestHeaders() []http.Header {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.headers)
}

type harness struct {
	api    *fakeAPI
	envd   *routedEnvd
	client *Client
	user   string // the user the test runs as, envd's default user
}

// newHarness starts the fake API and a real envd for sandbox "sb1" (the
// first one created), and returns a Client using header routing.
func newHarness(t *testing.T) *harness {
	t.Helper()
	srv, me := envdtest.New(t, testToken)
	e := &routedEnvd{t: t, id: "sb1", handler: srv}
	envdTS := httptest.NewServer(e)
	api := newFakeAPI()
	apiTS := httptest.NewServer(api)
	t.Cleanup(func() {
		envdTS.Close()
		apiTS.Close()
	})
	c, err := New(Config{APIURL: apiTS.URL, SandboxURL: envdTS.URL, APIKey: testKey})
	if err != nil {
		t.Fatal(err)
	}
	return &harness{api: api, envd: e, client: c, user: me}
}

func (h *harness) sandbox(t *testing.T) *Sandbox {
	t.Helper()
	sb, err := h.client.CreateSandbox(t.Context(), CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sb.ID != "sb1" {
		t.Fatalf("created sandbox %q, want sb1", sb.ID)
	}
	return sb
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
