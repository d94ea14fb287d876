package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agent-sandbox/agent-sandbox/internal/browser"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
)

const testKey = "e2b_0123456789abcdef0123456789abcdef01234567"

var testNow = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

// keys is a real store holding testKey, shared by every test (opening one
// per case makes the suite slow).
var keys *store.Store

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "api-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	keys, err = store.Open(context.Background(), filepath.Join(dir, "store.db"))
	if err == nil {
		_, err = keys.AddAPIKey(context.Background(), "test", testKey)
	}
	code := 1
	if err != nil {
		fmt.Fprintln(os.Stderr, "opening the key store:", err)
	} else {
		code = m.Run()
		keys.Close()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// newHandler returns an API over f with domain "example.test".
func newHandler(t testing.TB, f *fakeSandboxes, mod ...func(*Config)) *Handler {
	t.Helper()
	cfg := Config{
		Sandboxes:   f,
		Keys:        keys,
		APIKeys:     keys,
		EnvdVersion: "0.6.4",
		Domain:      "example.test",
		Now:         func() time.Time { return testNow.Add(time.Hour) },
		Browsers:    browser.NewSessions(f, 9222, func(err error) bool { return errors.Is(err, isolation.ErrPortClosed) }),
	}
	for _, m := range mod {
		m(&cfg)
	}
	h, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return h
}

// apiCase is one request and what must come back.
type apiCase struct {
	name   string
	method string
	target string
	body   string
	header map[string]string // "X-API-Key" defaults to testKey; "" removes it
	// want
	status     int
	wantJSON   string            // compared as decoded JSON; "" means no check
	wantEmpty  bool              // body must be empty
	wantHeader map[string]string // "" means absent
	check      func(t *testing.T, f *fakeSandboxes)
}

func serve(h http.Handler, c apiCase) *httptest.ResponseRecorder {
	var body io.Reader
	if c.body != "" {
		body = strings.NewReader(c.body)
	}
	r := httptest.NewRequest(c.method, c.target, body)
	r.Header.Set("X-API-Key", testKey)
	setHeaders(r.Header, c.header)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// setHeaders sets each header of m in hdr; an empty value removes it.
func setHeaders(hdr http.Header, m map[string]string) {
	for k, v := range m {
		if v == "" {
			hdr.Del(k)
		} else {
			hdr.Set(k, v)
		}
	}
}

// runCases runs each case against a fresh fake built by setup.
func runCases(t *testing.T, setup func() *fakeSandboxes, cases []apiCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := setup()
			h := newHandler(t, f)
			w := serve(h, c)
			if w.Code != c.status {
				t.Fatalf("%s %s: status %d, want %d; body %s", c.method, c.target, w.Code, c.status, w.Body)
			}
			if c.status >= 300 || c.wantJSON != "" {
				if ct := w.Header().Get("Content-Type"); ct != "application/json" {
					t.Errorf("Content-Type %q, want application/json", ct)
				}
			}
			if c.status >= 300 {
				var e errorBody
				if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Code != c.status || e.Message == "" {
					t.Errorf("error body %s: want {code: %d, message}", w.Body, c.status)
				}
			}
			if c.wantJSON != "" {
				assertJSON(t, w.Body.Bytes(), c.wantJSON)
			}
			if c.wantEmpty && w.Body.Len() != 0 {
				t.Errorf("body %q, want empty", w.Body)
			}
			for k, v := range c.wantHeader {
				if got := w.Header().Get(k); got != v {
					t.Errorf("header %s = %q, want %q", k, got, v)
				}
			}
			if c.check != nil {
				c.check(t, f)
			}
		})
	}
}

func assertJSON(t *testing.T, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("response %q is not JSON: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad want JSON %q: %v", want, err)
	}
	if d := cmp.Diff(w, g); d != "" {
		t.Errorf("body mismatch (-want +got):\n%s", d)
	}
}

func TestAuthAndRoutes(t *testing.T) {
	runCases(t, func() *fakeSandboxes { return newFake(running("isb1")) }, []apiCase{
		{name: "no key", method: "GET", target: "/v2/sandboxes", header: map[string]string{"X-API-Key": ""},
			status: 401, wantJSON: `{"code":401,"message":"missing API key: set the X-API-Key header"}`},
		{name: "unknown key", method: "GET", target: "/v2/sandboxes",
			header: map[string]string{"X-API-Key": "e2b_ffffffffffffffffffffffffffffffffffffffff"},
			status: 401, wantJSON: `{"code":401,"message":"invalid API key"}`},
		{name: "malformed key", method: "DELETE", target: "/sandboxes/isb1", header: map[string]string{"X-API-Key": "nope"},
			status: 401, wantJSON: `{"code":401,"message":"invalid API key"}`,
			check: func(t *testing.T, f *fakeSandboxes) {
				if _, ok := f.sbs["isb1"]; !ok {
					t.Error("sandbox killed without a valid key")
				}
			}},
		{name: "valid key", method: "GET", target: "/v2/sandboxes", status: 200, wantJSON: `[]`},
		{name: "health is public", method: "GET", target: "/health", header: map[string]string{"X-API-Key": ""},
			status: 204, wantEmpty: true},
		{name: "unknown route", method: "GET", target: "/nope", status: 404,
			wantJSON: `{"code":404,"message":"no route for GET /nope"}`},
		{name: "unknown route without key", method: "GET", target: "/v3/whatever", header: map[string]string{"X-API-Key": ""},
			status: 404},
		{name: "wrong method", method: "GET", target: "/sandboxes/isb1/pause", status: 405,
			wantHeader: map[string]string{"Allow": "POST"}},
		{name: "CORS preflight", method: "OPTIONS", target: "/v2/sandboxes",
			header: map[string]string{"X-API-Key": "", "Origin": "https://app.example",
				"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "x-api-key,content-type"},
			status: 204, wantHeader: map[string]string{
				"Access-Control-Allow-Origin":  "https://app.example",
				"Access-Control-Allow-Headers": "x-api-key,content-type",
			}},
		{name: "CORS on answers", method: "GET", target: "/v2/sandboxes", status: 200,
			wantHeader: map[string]string{"Access-Control-Allow-Origin": "*"}},
	})
}

func TestHealthNotReady(t *testing.T) {
	ready := false
	h := newHandler(t, newFake(), func(c *Config) { c.Ready = func() bool { return ready } })
	if w := serve(h, apiCase{method: "GET", target: "/health"}); w.Code != 503 {
		t.Errorf("not ready: status %d, want 503", w.Code)
	}
	ready = true
	if w := serve(h, apiCase{method: "GET", target: "/health"}); w.Code != 204 {
		t.Errorf("ready: status %d, want 204", w.Code)
	}
}

// TestWire sends raw HTTP/1.1 to a real server: header names in any case,
// chunked bodies.
func TestWire(t *testing.T) {
	f := newFake()
	srv := httptest.NewServer(newHandler(t, f))
	defer srv.Close()

	for _, name := range []string{"X-API-KEY", "x-api-key", "X-Api-Key"} {
		body := `{"templateID":"base"}`
		req := fmt.Sprintf("POST /v2/sandboxes HTTP/1.1\r\nHost: api.example.test\r\n%s: %s\r\n"+
			"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"+
			"%x\r\n%s\r\n0\r\n\r\n", name, testKey, len(body), body)
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(conn, req); err != nil {
			t.Fatal(err)
		}
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		conn.Close()
		if res.StatusCode != 201 {
			t.Errorf("header %s: status %d, want 201; body %s", name, res.StatusCode, b)
		}
	}
}

func TestBodies(t *testing.T) {
	big := `{"templateID":"base","metadata":{"k":"` + strings.Repeat("x", DefaultMaxBodyBytes) + `"}}`
	runCases(t, func() *fakeSandboxes { return newFake() }, []apiCase{
		{name: "oversized", method: "POST", target: "/v2/sandboxes", body: big,
			status: 413, wantJSON: `{"code":413,"message":"request body is larger than 1048576 bytes"}`},
		{name: "malformed", method: "POST", target: "/v2/sandboxes", body: `{"templateID":`,
			status: 400, wantJSON: `{"code":400,"message":"malformed JSON body: unexpected end of input"}`},
		{name: "syntax", method: "POST", target: "/v2/sandboxes", body: `{"templateID" "base"}`,
			status: 400, wantJSON: `{"code":400,"message":"malformed JSON body at offset 15: invalid character '\"' after object key"}`},
		{name: "wrong type", method: "POST", target: "/v2/sandboxes", body: `{"templateID":"base","timeout":"60"}`,
			status: 400, wantJSON: `{"code":400,"message":"malformed JSON body: field timeout: expected an integer, got string"}`},
		{name: "not an object", method: "POST", target: "/v2/sandboxes", body: `[1]`, status: 400},
		{name: "trailing data", method: "POST", target: "/v2/sandboxes", body: `{"templateID":"base"} x`,
			status: 400, wantJSON: `{"code":400,"message":"malformed JSON body: unexpected data after the JSON value"}`},
		{name: "unknown fields ignored", method: "POST", target: "/v2/sandboxes",
			body: `{"templateID":"base","whatever":[1,2]}`, status: 201},
		{name: "no-op values of unsupported fields", method: "POST", target: "/v2/sandboxes",
			body: `{"templateID":"base","mcp":null,"iam":{},"volumeMounts":[],"autoPauseMemory":true,"autoResume":{"enabled":false}}`, status: 201},
		{name: "empty required body", method: "POST", target: "/v2/sandboxes", status: 400,
			wantJSON: `{"code":400,"message":"request body is required"}`},
	})
}

func TestErrorMapping(t *testing.T) {
	for _, tc := range []struct {
		err    error
		status int
		msg    string
	}{
		{errors.New("sqlite: disk I/O error at /var/lib/secret"), 500, internalMessage},
		{fmt.Errorf("wrapped: %w", context.DeadlineExceeded), 500, internalMessage},
	} {
		f := newFake(running("isb1"))
		f.fail = tc.err
		h := newHandler(t, f)
		w := serve(h, apiCase{method: "GET", target: "/sandboxes/isb1"})
		if w.Code != tc.status {
			t.Errorf("%v: status %d, want %d", tc.err, w.Code, tc.status)
		}
		assertJSON(t, w.Body.Bytes(), fmt.Sprintf(`{"code":%d,"message":%q}`, tc.status, tc.msg))
	}
}

func TestCallsBeforeReadyAre503(t *testing.T) {
	ready := false
	h := newHandler(t, newFake(), func(c *Config) { c.Ready = func() bool { return ready } })
	create := apiCase{method: "POST", target: "/v2/sandboxes", body: `{"templateID":"base"}`}
	res := serve(h, create)
	if res.Code != http.StatusServiceUnavailable || !strings.Contains(res.Body.String(), `"code":503`) {
		t.Fatalf("create before ready: %d %s, want 503 JSON", res.Code, res.Body)
	}
	ready = true
	if res := serve(h, create); res.Code != http.StatusCreated {
		t.Errorf("create when ready: %d %s", res.Code, res.Body)
	}
}
