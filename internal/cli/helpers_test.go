package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/user"
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

// result is what one CLI invocation did.
type result struct {
	stdout, stderr string
	err            error
}

// runCLI runs the CLI with args and stdin.
func runCLI(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), args, streams{stdin: strings.NewReader(stdin), stdout: &stdout, stderr: &stderr})
	return result{stdout.String(), stderr.String(), err}
}

// clearEnv unsets the E2B variables so a test sees only what it sets.
func clearEnv(t *testing.T) {
	for _, k := range []string{"E2B_API_URL", "E2B_SANDBOX_URL", "E2B_DOMAIN", "E2B_API_KEY"} {
		t.Setenv(k, "")
	}
}

// fakeServer imitates agent-sandbox serve on one address: the control plane,
// and header-routed envd traffic for the sandboxes it lists (all served by
// one real, in-process envd).
type fakeServer struct {
	t    *testing.T
	envd http.Handler

	mu        sync.Mutex
	sandboxes []map[string]any // wire objects, newest first
	queries   []string         // raw queries of list calls
	// networkBodies are the bodies of PUT /sandboxes/{id}/network.
	networkBodies []string
}

func newFakeServer(t *testing.T) (*fakeServer, *httptest.Server) {
	t.Helper()
	e, _ := envdtest.New(t, testToken)
	f := &fakeServer{t: t, envd: e}
	ts := httptest.NewServer(f)
	t.Cleanup(ts.Close)
	return f, ts
}

func (f *fakeServer) add(id, template, state string, started time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sandboxes = append(f.sandboxes, map[string]any{
		"sandboxID": id, "templateID": template, "clientID": "6532622b", "state": state,
		"startedAt": started, "endAt": started.Add(5 * time.Minute), "cpuCount": 2, "memoryMB": 512,
		"envdVersion": "0.6.4", "metadata": map[string]string{"owner": id},
	})
}

func (f *fakeServer) lastQuery() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.queries[len(f.queries)-1]
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func (f *fakeServer) find(id string) int {
	for i, sb := range f.sandboxes {
		if sb["sandboxID"] == id {
			return i
		}
	}
	return -1
}

func (f *fakeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if id := r.Header.Get("E2b-Sandbox-Id"); id != "" {
		f.mu.Lock()
		known := f.find(id) >= 0
		f.mu.Unlock()
		if !known || r.Header.Get("E2b-Sandbox-Port") != "49983" {
			writeJSON(w, 502, map[string]any{"code": 502, "message": "sandbox not found"})
			return
		}
		f.envd.ServeHTTP(w, r)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Header.Get("X-Api-Key") != testKey {
		writeJSON(w, 401, map[string]any{"code": 401, "message": "Invalid API key"})
		return
	}
	notFound := func(id string) {
		writeJSON(w, 404, map[string]any{"code": 404, "message": fmt.Sprintf("sandbox %q not found", id)})
	}
	switch {
	case r.Method == "GET" && r.URL.Path == "/v2/sandboxes":
		f.queries = append(f.queries, r.URL.RawQuery)
		// Pages of one, to exercise the CLI's paging.
		i := 0
		fmt.Sscan(r.URL.Query().Get("nextToken"), &i)
		if i >= len(f.sandboxes) {
			writeJSON(w, 200, []any{})
			return
		}
		if i+1 < len(f.sandboxes) {
			w.Header().Set("X-Next-Token", fmt.Sprint(i+1))
		}
		writeJSON(w, 200, f.sandboxes[i:i+1])
	case r.Method == "DELETE" && strings.HasPrefix(r.URL.Path, "/sandboxes/"):
		id := strings.TrimPrefix(r.URL.Path, "/sandboxes/")
		i := f.find(id)
		if i < 0 {
			notFound(id)
			return
		}
		f.sandboxes = append(f.sandboxes[:i], f.sandboxes[i+1:]...)
		w.WriteHeader(204)
	case r.Method == "POST" && strings.HasPrefix(r.URL.Path, "/v2/sandboxes/") && strings.HasSuffix(r.URL.Path, "/connect"):
		id := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/v2/sandboxes/"), "/connect")
		i := f.find(id)
		if i < 0 {
			notFound(id)
			return
		}
		sb := f.sandboxes[i]
		writeJSON(w, 200, map[string]any{"sandboxID": id, "templateID": sb["templateID"], "clientID": "6532622b",
			"envdVersion": "0.6.4", "envdAccessToken": testToken, "domain": "localhost:3000"})
	case r.Method == "PUT" && strings.HasPrefix(r.URL.Path, "/sandboxes/") && strings.HasSuffix(r.URL.Path, "/network"):
		id := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/sandboxes/"), "/network")
		if f.find(id) < 0 {
			notFound(id)
			return
		}
		body, _ := io.ReadAll(r.Body)
		f.networkBodies = append(f.networkBodies, string(body))
		w.WriteHeader(204)
	case r.Method == "GET" && strings.HasPrefix(r.URL.Path, "/sandboxes/") && strings.HasSuffix(r.URL.Path, "/network/audit"):
		id := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/sandboxes/"), "/network/audit")
		if f.find(id) < 0 {
			notFound(id)
			return
		}
		// Two decisions, served one per page to exercise the CLI's paging.
		at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		events := []map[string]any{
			{"seq": 1, "time": at, "kind": "dns", "name": "pypi.org", "type": "A", "addrs": []string{"198.18.0.10"},
				"allowed": true, "rule": "ceiling:pypi.org"},
			{"seq": 2, "time": at.Add(time.Second), "kind": "firewall", "proto": "udp", "addrs": []string{"198.18.0.20"},
				"port": 9999, "allowed": false, "rule": "firewall:default"},
		}
		after := 0
		fmt.Sscan(r.URL.Query().Get("after"), &after)
		page := []map[string]any{}
		if after < len(events) {
			page = events[after : after+1]
			after++
		}
		writeJSON(w, 200, map[string]any{"events": page, "next": after})
	default:
		writeJSON(w, 404, map[string]any{"code": 404, "message": "no route " + r.URL.Path})
	}
}

func currentUser(t *testing.T) string {
	t.Helper()
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	return u.Username
}

// slowReader yields its data and then blocks until ctx is done, like a
// terminal nobody types into.
type slowReader struct {
	ctx  context.Context
	data io.Reader
}

func (r *slowReader) Read(p []byte) (int, error) {
	n, err := r.data.Read(p)
	if err == io.EOF {
		<-r.ctx.Done()
		return 0, io.EOF
	}
	return n, err
}
