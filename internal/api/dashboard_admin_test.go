package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agent-sandbox/agent-sandbox/internal/store"
)

// dashboardCall serves one signed-in dashboard API call with a JSON body.
func dashboardCall(t *testing.T, h http.Handler, method, target, body, key string) *httptest.ResponseRecorder {
	t.Helper()
	r := dashboardRequest(method, target, "", key)
	r.Body = http.NoBody
	if body != "" {
		r = dashboardRequest(method, target, body, key)
		r.Header.Set("Content-Type", "application/json")
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// The keys page creates a key (answered once), lists keys without their
// secret, and revokes them; revoking the session's own key signs it out.
func TestDashboardKeys(t *testing.T) {
	st, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "store.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.AddAPIKey(context.Background(), "operator", testKey); err != nil {
		t.Fatal(err)
	}
	h := newHandler(t, newFake(), func(c *Config) { c.Keys, c.APIKeys = st, st })

	w := dashboardCall(t, h, "POST", "/dashboard/api/keys", `{"name":"ci","maxTimeout":3600}`, testKey)
	var created createdKeyView
	if err := json.Unmarshal(w.Body.Bytes(), &created); w.Code != http.StatusCreated || err != nil {
		t.Fatalf("create: %d %s (%v)", w.Code, w.Body, err)
	}
	if !store.ValidAPIKey(created.Key) || created.Name != "ci" || created.MaxTimeout != 3600 || created.Current {
		t.Errorf("created %+v", created)
	}
	if _, err := st.VerifyAPIKey(context.Background(), created.Key); err != nil {
		t.Errorf("the created key does not verify: %v", err)
	}

	w = dashboardCall(t, h, "GET", "/dashboard/api/keys", "", testKey)
	var listed []apiKeyView
	if err := json.Unmarshal(w.Body.Bytes(), &listed); w.Code != http.StatusOK || err != nil {
		t.Fatalf("list: %d %s (%v)", w.Code, w.Body, err)
	}
	var names []string
	for _, k := range listed {
		names = append(names, k.Name)
		if k.Current != (k.Name == "operator") {
			t.Errorf("key %s: current %v", k.Name, k.Current)
		}
	}
	if diff := cmp.Diff([]string{"operator", "ci"}, names); diff != "" {
		t.Errorf("listed (-want +got):\n%s", diff)
	}
	if strings.Contains(w.Body.String(), created.Key) {
		t.Errorf("the list shows a key: %s", w.Body)
	}

	for _, c := range []struct {
		name, method, target, body string
		status                     int
		want                       string
	}{
		{"no name", "POST", "/dashboard/api/keys", `{"name":""}`, 400, "name is required"},
		{"no body", "POST", "/dashboard/api/keys", "", 400, "body is required"},
		{"unknown field", "POST", "/dashboard/api/keys", `{"name":"x","team":"y"}`, 400, `unknown field \"team\"`},
		{"bad maxTimeout", "POST", "/dashboard/api/keys", `{"name":"x","maxTimeout":0}`, 400, "maxTimeout must be at least 1 second"},
		{"unknown key", "DELETE", "/dashboard/api/keys/nope", "", 404, `keyID: no API key \"nope\"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := dashboardCall(t, h, c.method, c.target, c.body, testKey)
			if w.Code != c.status || !strings.Contains(w.Body.String(), c.want) {
				t.Errorf("%d %s, want %d with %q", w.Code, w.Body, c.status, c.want)
			}
		})
	}

	// Revoking another key keeps the session; revoking its own ends it.
	w = dashboardCall(t, h, "DELETE", "/dashboard/api/keys/"+created.ID, "", testKey)
	if w.Code != http.StatusOK || strings.TrimSpace(w.Body.String()) != `{"signedOut":false}` || w.Header().Get("Set-Cookie") != "" {
		t.Errorf("revoking another key: %d %s %v", w.Code, w.Body, w.Header())
	}
	if _, err := st.VerifyAPIKey(context.Background(), created.Key); err == nil {
		t.Error("the revoked key still verifies")
	}
	var own string
	for _, k := range listed {
		if k.Current {
			own = k.ID
		}
	}
	w = dashboardCall(t, h, "DELETE", "/dashboard/api/keys/"+own, "", testKey)
	if w.Code != http.StatusOK || strings.TrimSpace(w.Body.String()) != `{"signedOut":true}` || !strings.Contains(w.Header().Get("Set-Cookie"), sessionCookie+"=;") {
		t.Errorf("revoking the session's key: %d %s %v", w.Code, w.Body, w.Header())
	}
	if w := dashboardCall(t, h, "GET", "/dashboard/api/keys", "", testKey); w.Code != http.StatusUnauthorized {
		t.Errorf("the revoked session: %d %s, want 401", w.Code, w.Body)
	}
}

// The host page counts sandboxes by state and the capacity they use.
func TestDashboardHost(t *testing.T) {
	h := newHandler(t, newFake(
		store.Sandbox{ID: "isb1", State: store.StateRunning},
		store.Sandbox{ID: "isb2", State: store.StateRunning},
		store.Sandbox{ID: "isb3", State: store.StatePaused},
	))
	w := dashboardCall(t, h, "GET", "/dashboard/api/host", "", testKey)
	var got hostView
	if err := json.Unmarshal(w.Body.Bytes(), &got); w.Code != http.StatusOK || err != nil {
		t.Fatalf("host: %d %s (%v)", w.Code, w.Body, err)
	}
	want := hostView{
		States: map[string]int{"running": 2, "paused": 1}, MaxSandboxes: 10, CPUs: 4, HostCPUs: 4,
		DefaultBackend: "fake", Backends: []string{"fake"}, SandboxesByBackend: map[string]int{"fake": 3},
		Pools: map[string]poolView{"base": {Ready: 1, Filling: 1, Target: 2}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("host (-want +got):\n%s", diff)
	}
}

// The templates page lists every build, a failed one with its reason, and
// reads a build's log from the build status route, under the session.
func TestDashboardTemplateBuilds(t *testing.T) {
	h := newTemplateAPI(t, &fakeBuilder{fail: errors.New("no space left on device")})
	var req templateView
	call(t, h, "POST", "/v3/templates", `{"name":"broken"}`, nil, &req)
	body := `{"fromTemplate":"base","steps":[{"type":"RUN","args":["true"]}]}`
	if code := call(t, h, "POST", "/v2/templates/broken/builds/"+req.BuildID, body, nil, nil); code != 202 {
		t.Fatalf("trigger: %d", code)
	}
	waitBuild(t, h, "broken", req.BuildID)

	if w := dashboardCall(t, h, "GET", "/dashboard/api/template-builds", "", ""); w.Code != http.StatusUnauthorized {
		t.Errorf("without a session: %d, want 401", w.Code)
	}
	w := dashboardCall(t, h, "GET", "/dashboard/api/template-builds", "", testKey)
	var builds []templateBuildView
	if err := json.Unmarshal(w.Body.Bytes(), &builds); w.Code != http.StatusOK || err != nil {
		t.Fatalf("builds: %d %s (%v)", w.Code, w.Body, err)
	}
	if len(builds) != 1 || builds[0].BuildID != req.BuildID || builds[0].Status != "error" || !strings.Contains(builds[0].Reason, "no space left") || builds[0].FinishedAt == nil {
		t.Errorf("builds %+v", builds)
	}
	w = dashboardCall(t, h, "GET", "/dashboard/api/templates/broken/builds/"+req.BuildID+"/status?logsOffset=1", "", testKey)
	var st buildStatusView
	if err := json.Unmarshal(w.Body.Bytes(), &st); w.Code != http.StatusOK || err != nil || len(st.LogEntries) == 0 || st.LogEntries[0].Message != "output of step 1" {
		t.Errorf("log from offset 1: %d %s (%v)", w.Code, w.Body, err)
	}
	if w := dashboardCall(t, h, "GET", "/dashboard/api/templates/broken/builds/"+req.BuildID+"/status?logsOffset=x", "", testKey); w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "logsOffset") {
		t.Errorf("bad logsOffset: %d %s", w.Code, w.Body)
	}
}
