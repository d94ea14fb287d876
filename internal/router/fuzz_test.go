package router

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/envd/envdtest"
	"github.com/agent-sandbox/agent-sandbox/internal/envd/files"
)

// FuzzResolve checks how a request is matched to a sandbox port, by
// Host: <port>-<id>.<domain> or by the E2b-Sandbox-Id/-Port headers: no
// panic; a malformed sandbox request is a *routeError (400); an accepted
// one names a port in 1..65535 and a valid ID, and re-formed into the
// canonical host (or headers) it routes to the same target.
func FuzzResolve(f *testing.F) {
	for _, s := range []struct {
		host, id, port string
		domainPort     bool
		n              int64
	}{
		{"49983-isb1.example.test", "", "", false, 49983},
		{"8000-isb1.example.test:443", "", "", false, 8000},
		{"8000-isb1-6532622b.example.test", "", "", false, 1},
		{"8000-ISB1.EXAMPLE.test", "", "", false, 65535},
		{"8000-isb1.example.test:8443", "", "", true, 65536},
		{"008000-isb1.example.test", "", "", false, 0},
		{"65536-isb1.example.test", "", "", false, -1},
		{"0-isb1.example.test", "", "", false, 99999},
		{"+80-isb1.example.test", "", "", false, 1 << 40},
		{"8000-.example.test", "", "", false, 80},
		{"a.8000-isb1.example.test", "", "", false, 80},
		{"api.example.test", "isb1", "49983", false, 80},
		{"localhost:3000", "isb1", "49983", false, 80},
		{"[::1]:3000", "isb1", "8000", false, 80},
		{"[::1]", "isb1", "08000", false, 80},
		{"127.0.0.1", "ISB1", "80", false, 80},
		{"sandbox.e2b.app", "isb1", "-1", false, 80},
		{"SANDBOX.example.test", "isb1", "65536", false, 80},
		{"localhost", "", "49983", false, 80},
		{"localhost", "isb1\n", " 80", false, 80},
		{"", "", "", false, 80},
		{"[", "isb1", "80", false, 80},
		{"8000-isb1.example.test.", "", "", false, 80},
		{"\xff-isb1.example.test", "", "", false, 80},
	} {
		f.Add(s.host, s.id, s.port, s.domainPort, s.n)
	}

	plain, err := New(Config{Dialer: newDialer(), Domain: "example.test"})
	if err != nil {
		f.Fatal(err)
	}
	withPort, err := New(Config{Dialer: newDialer(), Domain: "example.test:8443"})
	if err != nil {
		f.Fatal(err)
	}

	f.Fuzz(func(t *testing.T, host, idHdr, portHdr string, domainPort bool, n int64) {
		rt := plain
		if domainPort {
			rt = withPort
		}
		r := &http.Request{Host: host, Header: http.Header{}, URL: &url.URL{Path: "/"}}
		if idHdr != "" {
			r.Header[headerSandboxID] = []string{idHdr}
		}
		if portHdr != "" {
			r.Header[headerSandboxPort] = []string{portHdr}
		}
		tgt, ok, err := rt.resolve(r)
		checkTarget(t, rt, r, tgt, ok, err)
		if ok && err == nil {
			if headerRoutable(stripPort(strings.ToLower(host))) && (idHdr != "" || portHdr != "") {
				// Routed by the headers: they name exactly this target.
				if idHdr != tgt.id || strings.TrimLeft(portHdr, "0") != strconv.Itoa(tgt.port) {
					t.Fatalf("headers %q/%q routed to %+v", idHdr, portHdr, tgt)
				}
			} else {
				// Routed by the host: its first label is <port>-<id>[-...].
				label := strings.ToLower(host)
				label = strings.TrimSuffix(label, "."+rt.routes.domain)
				label, _, _ = strings.Cut(label, ".")
				label = strings.TrimLeft(label, "0")
				canon := strconv.Itoa(tgt.port) + "-" + tgt.id
				if label != canon && !strings.HasPrefix(label, canon+"-") {
					t.Fatalf("host %q routed to %+v", host, tgt)
				}
			}
			// The canonical host routes to the same target.
			re := &http.Request{Host: fmt.Sprintf("%d-%s.%s", tgt.port, tgt.id, rt.routes.domain), Header: http.Header{}, URL: &url.URL{Path: "/"}}
			again, ok, err := rt.resolve(re)
			if !ok || err != nil || again != tgt {
				t.Fatalf("host %q routed to %+v, but its canonical host %q to %+v, %v, %v", host, tgt, re.Host, again, ok, err)
			}
		}

		// Ports: n routes iff it is 1..65535, by host and by header.
		inRange := n >= 1 && n <= 65535
		byHost := &http.Request{Host: fmt.Sprintf("%d-isb1.%s", n, rt.routes.domain), Header: http.Header{}, URL: &url.URL{Path: "/"}}
		tgt, ok, err = rt.resolve(byHost)
		checkTarget(t, rt, byHost, tgt, ok, err)
		if !ok || (err == nil) != inRange || (inRange && tgt.port != int(n)) {
			t.Fatalf("host %q: %+v, %v, %v", byHost.Host, tgt, ok, err)
		}
		byHeader := &http.Request{Host: "localhost", Header: http.Header{
			headerSandboxID: {"isb1"}, headerSandboxPort: {strconv.FormatInt(n, 10)},
		}, URL: &url.URL{Path: "/"}}
		tgt, ok, err = rt.resolve(byHeader)
		checkTarget(t, rt, byHeader, tgt, ok, err)
		if !ok || (err == nil) != inRange || (inRange && tgt.port != int(n)) {
			t.Fatalf("port header %d: %+v, %v, %v", n, tgt, ok, err)
		}
	})
}

// checkTarget checks what resolve said about r.
func checkTarget(t *testing.T, rt *Router, r *http.Request, tgt target, ok bool, err error) {
	t.Helper()
	if !ok {
		if err != nil || tgt != (target{}) {
			t.Fatalf("%q not sandbox traffic, yet %+v, %v", r.Host, tgt, err)
		}
		return
	}
	if rt.Match(r) != ok {
		t.Fatalf("%q: Match disagrees with resolve", r.Host)
	}
	if err != nil {
		var re *routeError
		if !errors.As(err, &re) || re.msg == "" {
			t.Fatalf("%q: error %v is not a routeError", r.Host, err)
		}
		return
	}
	if tgt.port < 1 || tgt.port > 65535 || !sandboxIDFormat.MatchString(tgt.id) {
		t.Fatalf("%q (headers %q) accepted as %+v", r.Host, r.Header, tgt)
	}
}

// TestEnvdTokenPerSandbox runs two real envds behind the router, sandboxes
// sba and sbb with their own access tokens: sbb's /files, RPCs and /envs
// refuse a missing or wrong token and sba's token (401), whether sent as
// X-Access-Token or used to sign a URL, and take sbb's own.
func TestEnvdTokenPerSandbox(t *testing.T) {
	const tokA, tokB = "token-of-sandbox-a", "token-of-sandbox-b"
	d := newDialer()
	envdA, _ := envdtest.New(t, tokA)
	envdB, user := envdtest.New(t, tokB)
	d.serve(t, "sba", EnvdPort, envdA)
	d.serve(t, "sbb", EnvdPort, envdB)
	srv, _ := startProxy(t, d)
	const hostB = "49983-sbb.example.test"
	dest := filepath.Join(t.TempDir(), "up.txt")

	uploadBody := func() (io.Reader, string) {
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		w, _ := mw.CreateFormFile("file", "up.txt")
		io.WriteString(w, "hello")
		mw.Close()
		return &buf, mw.FormDataContentType()
	}
	do := func(method, target string, hdr map[string]string, withBody bool) (int, string) {
		t.Helper()
		var body io.Reader
		ct := ""
		if withBody {
			body, ct = uploadBody()
		} else if method == "POST" {
			body = strings.NewReader("{}") // an empty RPC request
		}
		req, err := http.NewRequest(method, srv.URL+target, body)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = hostB
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		res, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		return res.StatusCode, readAll(t, res.Body)
	}

	upload := "/files?path=" + url.QueryEscape(dest)
	signed := func(op files.Op, tok string) string {
		return "/files?" + url.Values{"path": {dest}, "signature": {files.Sign(dest, op, "", tok, nil)}}.Encode()
	}
	rpc := map[string]string{"Content-Type": "application/json", "Connect-Protocol-Version": "1"}
	withTok := func(h map[string]string, tok string) map[string]string {
		out := map[string]string{"X-Access-Token": tok}
		for k, v := range h {
			out[k] = v
		}
		return out
	}
	for _, tc := range []struct {
		name, method, target string
		hdr                  map[string]string
		body                 bool
	}{
		{"upload without a token", "POST", upload, nil, true},
		{"upload with a wrong token", "POST", upload, map[string]string{"X-Access-Token": "nope"}, true},
		{"upload with sandbox A's token", "POST", upload, map[string]string{"X-Access-Token": tokA}, true},
		{"upload signed with A's token", "POST", signed(files.OpWrite, tokA), nil, true},
		{"download without a token", "GET", "/files?path=" + url.QueryEscape(dest), nil, false},
		{"download with sandbox A's token", "GET", "/files?path=" + url.QueryEscape(dest), map[string]string{"X-Access-Token": tokA}, false},
		{"download signed with A's token", "GET", signed(files.OpRead, tokA), nil, false},
		{"RPC with sandbox A's token", "POST", "/process.Process/List", withTok(rpc, tokA), false},
		{"RPC without a token", "POST", "/process.Process/List", rpc, false},
		{"envs with sandbox A's token", "GET", "/envs", map[string]string{"X-Access-Token": tokA}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := do(tc.method, tc.target, tc.hdr, tc.body)
			if code != http.StatusUnauthorized || !strings.Contains(body, `"code":401`) {
				t.Errorf("%d %s, want 401 JSON", code, body)
			}
		})
	}
	// Nothing was written by the refused uploads; sbb's own token works.
	if code, body := do("GET", "/files?path="+url.QueryEscape(dest), map[string]string{"X-Access-Token": tokB}, false); code != http.StatusNotFound {
		t.Fatalf("download with B's token before any upload: %d %s, want 404", code, body)
	}
	if code, body := do("POST", upload+"&username="+url.QueryEscape(user), map[string]string{"X-Access-Token": tokB}, true); code != http.StatusOK {
		t.Fatalf("upload with B's token: %d %s", code, body)
	}
	if code, body := do("GET", signed(files.OpRead, tokB), nil, false); code != http.StatusOK || body != "hello" {
		t.Fatalf("download signed with B's token: %d %q", code, body)
	}
	if code, body := do("POST", "/process.Process/List", withTok(rpc, tokB), false); code != http.StatusOK {
		t.Errorf("RPC with B's token: %d %s", code, body)
	}
}
