package files

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/envd/identity"
	"github.com/agent-sandbox/agent-sandbox/internal/envd/state"
)

// The tests in this package do not run in parallel: one of them changes the
// process umask.

const testToken = "0tQG31xiMp0IOQfaz9dcwi72L1CPo8e0"

// testNow is the clock of handlers made by newHandler.
var testNow = time.Unix(1_700_000_000, 0)

// newHandler returns a handler whose default user is the user running the
// test and whose access token is token ("" for none).
func newHandler(t *testing.T, token string) *Handler {
	t.Helper()
	st := state.New(state.Defaults{User: currentUser(t)})
	st.Apply(state.Update{AccessToken: token})
	h := NewHandler(st, slog.New(slog.DiscardHandler))
	h.now = func() time.Time { return testNow }
	return h
}

func currentUser(t *testing.T) string {
	t.Helper()
	u, err := user.Current()
	if err != nil {
		t.Fatalf("current user: %v", err)
	}
	return u.Username
}

// query encodes key/value pairs as a query string.
func query(kv ...string) string {
	q := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	return q.Encode()
}

func serve(h http.Handler, method, rawQuery string, hdr http.Header, body io.Reader) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, "/files?"+rawQuery, body)
	for k, vs := range hdr {
		r.Header[k] = vs
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

type errorBody struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// checkError fails t unless w is the envd JSON error {status, msg}.
func checkError(t *testing.T, w *httptest.ResponseRecorder, status int, msg string) {
	t.Helper()
	if w.Code != status {
		t.Fatalf("status = %d, want %d; body %s", w.Code, status, w.Body)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/json; charset=utf-8" {
		t.Errorf("Content-Type = %q, want JSON", ct)
	}
	var got errorBody
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
		t.Fatalf("decoding error body %q: %v", w.Body, err)
	}
	if got != (errorBody{status, msg}) {
		t.Errorf("error body = %+v, want {%d %q}", got, status, msg)
	}
}

func writeTestFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestSignVector(t *testing.T) {
	// The vector from the E2B SDK tests.
	const want = "v1_gUtH/s9YCJWgCizjfUxuWfhFE4QSydOWEIIvfLwDr6E"
	if got := Sign("hello.txt", OpRead, "user", testToken, nil); got != want {
		t.Errorf("Sign = %q, want %q", got, want)
	}
	exp := int64(1)
	if Sign("hello.txt", OpRead, "user", testToken, &exp) == want {
		t.Error("Sign with an expiration equals the one without")
	}
}

func TestAuthorization(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "hello.txt")
	writeTestFile(t, path, "hello")
	me := currentUser(t)
	past, future := testNow.Unix()-1, testNow.Unix()+60
	sig := func(op Op, user string, exp *int64) string { return Sign(path, op, user, testToken, exp) }
	ts := func(n int64) string { return strconv.FormatInt(n, 10) }

	tests := []struct {
		name    string
		token   string // envd's access token
		method  string
		query   string
		header  string // X-Access-Token
		status  int
		message string // for errors
	}{
		{name: "no token configured", method: "GET", query: query("path", path), status: 200},
		{name: "no token configured, junk signature", method: "GET", query: query("path", path, "signature", "junk"), status: 200},
		{name: "header matches", token: testToken, method: "GET", query: query("path", path), header: testToken, status: 200},
		{name: "header does not match", token: testToken, method: "GET", query: query("path", path), header: "wrong",
			status: 401, message: "access token present in header but does not match"},
		{name: "wrong header beats a valid signature", token: testToken, method: "GET", header: "wrong",
			query:  query("path", path, "signature", sig(OpRead, "", nil)),
			status: 401, message: "access token present in header but does not match"},
		{name: "neither header nor signature", token: testToken, method: "GET", query: query("path", path),
			status: 401, message: "missing signature query parameter"},
		{name: "valid signature", token: testToken, method: "GET", query: query("path", path, "signature", sig(OpRead, "", nil)), status: 200},
		{name: "valid signature with username", token: testToken, method: "GET",
			query: query("path", path, "username", me, "signature", sig(OpRead, me, nil)), status: 200},
		{name: "signature without the username sent", token: testToken, method: "GET",
			query:  query("path", path, "username", me, "signature", sig(OpRead, "", nil)),
			status: 401, message: "invalid signature"},
		{name: "signature over the resolved default user", token: testToken, method: "GET",
			query:  query("path", path, "signature", sig(OpRead, me, nil)),
			status: 401, message: "invalid signature"},
		{name: "garbage signature", token: testToken, method: "GET", query: query("path", path, "signature", "v1_nope"),
			status: 401, message: "invalid signature"},
		{name: "write signature used to read", token: testToken, method: "GET", query: query("path", path, "signature", sig(OpWrite, "", nil)),
			status: 401, message: "invalid signature"},
		{name: "read signature used to write", token: testToken, method: "POST", query: query("path", path, "signature", sig(OpRead, "", nil)),
			status: 401, message: "invalid signature"},
		{name: "write signature", token: testToken, method: "POST", query: query("path", path, "signature", sig(OpWrite, "", nil)), status: 200},
		{name: "unexpired signature", token: testToken, method: "GET",
			query: query("path", path, "signature", sig(OpRead, "", &future), "signature_expiration", ts(future)), status: 200},
		{name: "expired signature", token: testToken, method: "GET",
			query:  query("path", path, "signature", sig(OpRead, "", &past), "signature_expiration", ts(past)),
			status: 401, message: "signature is already expired"},
		{name: "expired and invalid is invalid", token: testToken, method: "GET",
			query:  query("path", path, "signature", sig(OpRead, "", nil), "signature_expiration", ts(past)),
			status: 401, message: "invalid signature"},
		{name: "expiration not signed", token: testToken, method: "GET",
			query:  query("path", path, "signature", sig(OpRead, "", nil), "signature_expiration", ts(future)),
			status: 401, message: "invalid signature"},
		{name: "malformed expiration", token: testToken, method: "GET",
			query:  query("path", path, "signature", sig(OpRead, "", nil), "signature_expiration", "soon"),
			status: 401, message: "invalid signature"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hdr := http.Header{}
			if tt.header != "" {
				hdr.Set("X-Access-Token", tt.header)
			}
			var body io.Reader
			if tt.method == "POST" {
				hdr.Set("Content-Type", "application/octet-stream")
				body = bytes.NewReader([]byte("hello"))
			}
			w := serve(newHandler(t, tt.token), tt.method, tt.query, hdr, body)
			if tt.status != 200 {
				checkError(t, w, tt.status, tt.message)
				return
			}
			if w.Code != 200 {
				t.Errorf("status = %d, want 200; body %s", w.Code, w.Body)
			}
		})
	}
}

func TestExpiredSignatureBody(t *testing.T) {
	// An SDK test asserts this exact body.
	exp := testNow.Unix() - 1
	q := query("path", "hello.txt", "username", "user",
		"signature", Sign("hello.txt", OpRead, "user", testToken, &exp),
		"signature_expiration", strconv.FormatInt(exp, 10))
	w := serve(newHandler(t, testToken), "GET", q, nil, nil)
	if w.Code != 401 {
		t.Fatalf("status = %d, want 401", w.Code)
	}
	if got, want := w.Body.String(), `{"code":401,"message":"signature is already expired"}`+"\n"; got != want {
		t.Errorf("body = %q, want %q", got, want)
	}
}

func TestUserAndPath(t *testing.T) {
	const nobodyUser = "no-such-user-e2b"
	_, lookupErr := identity.Lookup(nobodyUser)
	if lookupErr == nil {
		t.Fatalf("user %s exists", nobodyUser)
	}
	tests := []struct {
		name    string
		method  string
		query   string
		status  int
		message string
	}{
		{name: "unknown user, GET", method: "GET", query: query("path", "/etc/hostname", "username", nobodyUser),
			status: 401, message: "error looking up user '" + nobodyUser + "': " + lookupErr.Error()},
		{name: "unknown user, POST", method: "POST", query: query("path", "/tmp/x", "username", nobodyUser),
			status: 401, message: "error looking up user '" + nobodyUser + "': " + lookupErr.Error()},
		{name: "another user's home", method: "GET", query: query("path", "~root/x"),
			status: 400, message: `resolving path '~root/x': invalid path: "~root/x": paths relative to another user's home are not supported`},
		{name: "PUT", method: "PUT", query: query("path", "/tmp/x"), status: 405, message: "method PUT not allowed on /files"},
		{name: "DELETE", method: "DELETE", query: query("path", "/tmp/x"), status: 405, message: "method DELETE not allowed on /files"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hdr := http.Header{"Content-Type": {"application/octet-stream"}}
			w := serve(newHandler(t, ""), tt.method, tt.query, hdr, bytes.NewReader(nil))
			checkError(t, w, tt.status, tt.message)
			if tt.status == 405 && w.Header().Get("Allow") != "GET, POST" {
				t.Errorf("Allow = %q, want GET, POST", w.Header().Get("Allow"))
			}
		})
	}
}
