package api

import (
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agent-sandbox/agent-sandbox/internal/store"
)

// dashboardRequest is a request to the dashboard as a browser sends it
// from one of its own pages (Sec-Fetch-Site: same-origin), with the
// session cookie key when it is not empty and no X-API-Key header.
func dashboardRequest(method, target, body, key string) *http.Request {
	r := httptest.NewRequest(method, target, strings.NewReader(body))
	r.Header.Set("Sec-Fetch-Site", "same-origin")
	if body != "" {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if key != "" {
		r.AddCookie(&http.Cookie{Name: sessionCookie, Value: key})
	}
	return r
}

// Every dashboard route but the sign-in form refuses a request without a
// valid session: pages redirect to the sign-in form, the API routes the
// pages call answer 401. An API key in the X-API-Key header is no session.
func TestDashboardNeedsSession(t *testing.T) {
	h := newHandler(t, newFake(store.Sandbox{ID: "isb1", State: store.StateRunning}))
	pages := []string{"/dashboard/", "/dashboard/inspect/sandbox/isb1", "/dashboard/host", "/dashboard/keys", "/dashboard/static/app.js", "/dashboard/static/vendor/xterm.js"}
	calls := []struct{ method, target string }{
		{"GET", "/dashboard/api/v2/sandboxes"},
		{"GET", "/dashboard/api/sandboxes/isb1"},
		{"DELETE", "/dashboard/api/sandboxes/isb1"},
		{"POST", "/dashboard/api/sandboxes/isb1/pause"},
		{"POST", "/dashboard/api/sandboxes/isb1/connect"},
		{"POST", "/dashboard/api/sandboxes/isb1/timeout"},
		{"GET", "/dashboard/api/sandboxes/isb1/metrics"},
		{"GET", "/dashboard/api/sandboxes/isb1/terminal?cols=80&rows=24"},
		{"GET", "/dashboard/api/sandboxes/isb1/files?path=~"},
		{"GET", "/dashboard/api/sandboxes/isb1/files/content?path=a.txt"},
		{"POST", "/dashboard/api/sandboxes/isb1/files/content?path=a.txt"},
		{"GET", "/dashboard/api/sandboxes/isb1/network/audit"},
		{"GET", "/dashboard/api/host"},
		{"GET", "/dashboard/api/keys"},
		{"POST", "/dashboard/api/keys"},
		{"DELETE", "/dashboard/api/keys/k1"},
	}
	for _, session := range []struct{ name, key string }{{"no cookie", ""}, {"wrong key", "e2b_not_a_key"}} {
		t.Run(session.name, func(t *testing.T) {
			for _, p := range pages {
				r := dashboardRequest("GET", p, "", session.key)
				r.Header.Set("X-API-Key", testKey)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/dashboard/sign-in" {
					t.Errorf("GET %s: %d to %q, want 303 to the sign-in form", p, w.Code, w.Header().Get("Location"))
				}
			}
			for _, c := range calls {
				r := dashboardRequest(c.method, c.target, "", session.key)
				r.Header.Set("X-API-Key", testKey)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if w.Code != http.StatusUnauthorized {
					t.Errorf("%s %s: %d %s, want 401", c.method, c.target, w.Code, w.Body)
				}
			}
		})
	}
	// The positive control: the same routes with a session.
	for _, p := range pages {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, dashboardRequest("GET", p, "", testKey))
		if w.Code != http.StatusOK {
			t.Errorf("GET %s signed in: %d, want 200", p, w.Code)
		}
	}
	// The static files are scripts, styles and vendored code: no listings,
	// no page templates.
	for _, p := range []string{"/dashboard/static/", "/dashboard/static/vendor/", "/dashboard/static/layout.html"} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, dashboardRequest("GET", p, "", testKey))
		if w.Code != http.StatusNotFound {
			t.Errorf("GET %s signed in: %d, want 404", p, w.Code)
		}
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, dashboardRequest("GET", "/dashboard/api/sandboxes/isb1", "", testKey))
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"sandboxID":"isb1"`) {
		t.Errorf("GET /dashboard/api/sandboxes/isb1 signed in: %d %s", w.Code, w.Body)
	}
}

// Signing in checks the key as the API does and keeps it in a cookie
// scripts cannot read, sent same-site only, and over TLS only when the
// server has it; signing out deletes it.
func TestDashboardSignIn(t *testing.T) {
	h := newHandler(t, newFake())
	for _, c := range []struct {
		name   string
		body   string
		tls    bool
		status int
		says   string
	}{
		{name: "no key", body: "", status: 400, says: "field key"},
		{name: "wrong key", body: "key=e2b_not_a_key", status: 401, says: "not valid"},
		{name: "valid", body: "key=" + url.QueryEscape(testKey), status: 303},
		{name: "valid over TLS", body: "key=" + url.QueryEscape(testKey), tls: true, status: 303},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := dashboardRequest("POST", "/dashboard/sign-in", c.body, "")
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			if c.tls {
				r.TLS = &tls.ConnectionState{}
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != c.status || !strings.Contains(w.Body.String(), c.says) {
				t.Fatalf("status %d, want %d saying %q: %s", w.Code, c.status, c.says, w.Body)
			}
			cookies := w.Result().Cookies()
			if c.status != 303 {
				if len(cookies) != 0 {
					t.Errorf("a failed sign-in set cookies %v", cookies)
				}
				return
			}
			if len(cookies) != 1 {
				t.Fatalf("cookies %v, want the session", cookies)
			}
			s := cookies[0]
			if s.Name != sessionCookie || s.Value != testKey || !s.HttpOnly || s.SameSite != http.SameSiteStrictMode || s.Secure != c.tls || s.Path != "/dashboard" || s.MaxAge <= 0 {
				t.Errorf("session cookie %+v", s)
			}
			if loc := w.Header().Get("Location"); loc != "/dashboard/" {
				t.Errorf("redirected to %q", loc)
			}
		})
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, dashboardRequest("POST", "/dashboard/sign-out", "", testKey))
	if c := w.Result().Cookies(); w.Code != 303 || len(c) != 1 || c[0].Name != sessionCookie || c[0].MaxAge >= 0 {
		t.Errorf("sign out: %d, cookies %v", w.Code, c)
	}
}

// A POST, DELETE or sign-in from another site is refused even with the
// session cookie (which SameSite=Strict already keeps from a compliant
// browser): by Sec-Fetch-Site, else by Origin against Host.
func TestDashboardRefusesCrossSite(t *testing.T) {
	f := newFake(store.Sandbox{ID: "isb1", State: store.StateRunning})
	h := newHandler(t, f)
	for _, c := range []struct {
		name, method, target, body string
		header                     map[string]string
	}{
		{"kill, cross-site", "DELETE", "/dashboard/api/sandboxes/isb1", "", map[string]string{"Sec-Fetch-Site": "cross-site"}},
		{"kill, foreign origin", "DELETE", "/dashboard/api/sandboxes/isb1", "", map[string]string{"Sec-Fetch-Site": "", "Origin": "https://evil.test"}},
		{"pause, same-site other origin", "POST", "/dashboard/api/sandboxes/isb1/pause", "", map[string]string{"Sec-Fetch-Site": "same-site"}},
		{"sign-in, cross-site", "POST", "/dashboard/sign-in", "key=" + url.QueryEscape(testKey), map[string]string{"Sec-Fetch-Site": "cross-site"}},
		{"sign-out, cross-site", "POST", "/dashboard/sign-out", "", map[string]string{"Sec-Fetch-Site": "cross-site"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := dashboardRequest(c.method, c.target, c.body, testKey)
			setHeaders(r.Header, c.header)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != http.StatusForbidden || len(w.Result().Cookies()) != 0 {
				t.Errorf("status %d, cookies %v, want 403 and none", w.Code, w.Result().Cookies())
			}
		})
	}
	if _, err := f.Get(t.Context(), "isb1"); err != nil {
		t.Errorf("a cross-site kill reached the sandbox: %v", err)
	}
	// The positive control: the same kill from the dashboard's own page.
	w := httptest.NewRecorder()
	h.ServeHTTP(w, dashboardRequest("DELETE", "/dashboard/api/sandboxes/isb1", "", testKey))
	if w.Code != http.StatusNoContent {
		t.Errorf("same-origin kill: %d %s", w.Code, w.Body)
	}
}

// The terminal's size is checked before any shell starts: a 400 names the
// parameter.
func TestDashboardTerminalSize(t *testing.T) {
	h := newHandler(t, newFake(store.Sandbox{ID: "isb1", State: store.StateRunning}))
	for target, says := range map[string]string{
		"?rows=24":           "cols must be",
		"?cols=80&rows=0":    "rows must be",
		"?cols=99999&rows=2": "cols must be",
	} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, dashboardRequest("GET", "/dashboard/api/sandboxes/isb1/terminal"+target, "", testKey))
		if w.Code != 400 || !strings.Contains(w.Body.String(), says) {
			t.Errorf("%s: %d %s, want 400 saying %q", target, w.Code, w.Body, says)
		}
	}
}

// The file browser's calls: an upload is listed and downloaded back; a
// call without its path is a 400 naming it; a missing file is a 404.
func TestDashboardFiles(t *testing.T) {
	h := newHandler(t, newFake(store.Sandbox{ID: "isb1", State: store.StateRunning}))
	do := func(method, target, body string) *httptest.ResponseRecorder {
		t.Helper()
		r := dashboardRequest(method, target, "", testKey)
		r.Body = io.NopCloser(strings.NewReader(body))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	if w := do("POST", "/dashboard/api/sandboxes/isb1/files/content?path=/home/user/up.txt", "hello"); w.Code != http.StatusNoContent {
		t.Fatalf("upload: %d %s", w.Code, w.Body)
	}
	w := do("GET", "/dashboard/api/sandboxes/isb1/files?path=~", "")
	var dir directoryView
	if err := json.Unmarshal(w.Body.Bytes(), &dir); w.Code != http.StatusOK || err != nil {
		t.Fatalf("list: %d %s (%v)", w.Code, w.Body, err)
	}
	want := directoryView{Path: "/home/user", Entries: []fileEntryView{{Name: "up.txt", Path: "/home/user/up.txt", Type: "file", Size: 5, Modified: time.Unix(0, 0).UTC()}}}
	if diff := cmp.Diff(want, dir); diff != "" {
		t.Errorf("list (-want +got):\n%s", diff)
	}
	w = do("GET", "/dashboard/api/sandboxes/isb1/files/content?path=/home/user/up.txt", "")
	if w.Code != http.StatusOK || w.Body.String() != "hello" || !strings.HasPrefix(w.Header().Get("Content-Disposition"), "attachment") {
		t.Errorf("download: %d %q %v", w.Code, w.Body, w.Header())
	}
	for _, c := range []struct {
		name, method, target, body string
		status                     int
		want                       string
	}{
		{"list without path", "GET", "/dashboard/api/sandboxes/isb1/files", "", 400, "path is required"},
		{"download without path", "GET", "/dashboard/api/sandboxes/isb1/files/content", "", 400, "path is required"},
		{"upload without path", "POST", "/dashboard/api/sandboxes/isb1/files/content", "x", 400, "path is required"},
		{"missing file", "GET", "/dashboard/api/sandboxes/isb1/files/content?path=/nope", "", 404, "no such file or directory: /nope"},
		{"missing directory", "GET", "/dashboard/api/sandboxes/isb1/files?path=/nope", "", 404, "no such file or directory: /nope"},
		{"unknown sandbox", "GET", "/dashboard/api/sandboxes/isb2/files?path=~", "", 404, "isb2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := do(c.method, c.target, c.body)
			if w.Code != c.status || !strings.Contains(w.Body.String(), c.want) {
				t.Errorf("%d %s, want %d with %q", w.Code, w.Body, c.status, c.want)
			}
		})
	}
}

// The pages frame nothing but live views, which are under the sandbox
// domain, and are framed by nobody.
func TestDashboardFramesOnlyLiveViews(t *testing.T) {
	h := newHandler(t, newFake())
	w := httptest.NewRecorder()
	h.ServeHTTP(w, dashboardRequest("GET", "/dashboard/sign-in", "", ""))
	csp := w.Header().Get("Content-Security-Policy")
	for _, want := range []string{"frame-src *.example.test;", "frame-ancestors 'none'", "default-src 'self'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("Content-Security-Policy %q lacks %q", csp, want)
		}
	}
}
