package envd

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"

	processpb "github.com/agent-sandbox/agent-sandbox/gen/process"
	"github.com/agent-sandbox/agent-sandbox/gen/process/processconnect"
	"github.com/agent-sandbox/agent-sandbox/internal/envd/state"
)

func newTestServer(t *testing.T) (*httptest.Server, *state.State) {
	t.Helper()
	st := state.New(state.Defaults{User: "root"})
	srv := NewServer(st, slog.New(slog.DiscardHandler))
	ts := httptest.NewServer(srv)
	t.Cleanup(func() {
		ts.Close()
		srv.Close()
	})
	return ts, st
}

type response struct {
	status int
	header http.Header
	body   string
}

func do(t *testing.T, ts *httptest.Server, method, path string, header map[string]string, body string) response {
	t.Helper()
	req, err := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return response{res.StatusCode, res.Header, string(b)}
}

const unauthorizedBody = `{"code":401,"message":"unauthorized access, please provide a valid access token or method signing if supported"}` + "\n"

func TestPlainEndpoints(t *testing.T) {
	ts, st := newTestServer(t)
	st.Apply(state.Update{EnvVars: map[string]string{"A": "1"}, AccessToken: "tok"})
	auth := map[string]string{"X-Access-Token": "tok"}

	tests := []struct {
		name       string
		method     string
		path       string
		header     map[string]string
		wantStatus int
		wantBody   string // exact, when set
	}{
		{name: "health needs no token", method: "GET", path: "/health", wantStatus: 204, wantBody: ""},
		{name: "envs without token", method: "GET", path: "/envs", wantStatus: 401, wantBody: unauthorizedBody},
		{name: "envs with wrong token", method: "GET", path: "/envs", header: map[string]string{"X-Access-Token": "nope"}, wantStatus: 401, wantBody: unauthorizedBody},
		{name: "envs with token", method: "GET", path: "/envs", header: auth, wantStatus: 200, wantBody: `{"A":"1"}` + "\n"},
		{name: "metrics without token", method: "GET", path: "/metrics", wantStatus: 401, wantBody: unauthorizedBody},
		{name: "metrics with token", method: "GET", path: "/metrics", header: auth, wantStatus: 200},
		{name: "unknown path", method: "GET", path: "/nope", header: auth, wantStatus: 404, wantBody: `{"code":404,"message":"no route for GET /nope"}` + "\n"},
		{name: "rpc without token", method: "POST", path: "/process.Process/List", header: map[string]string{"Content-Type": "application/json"}, wantStatus: 401, wantBody: unauthorizedBody},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := do(t, ts, tt.method, tt.path, tt.header, "")
			if res.status != tt.wantStatus {
				t.Fatalf("status = %d, want %d (body %q)", res.status, tt.wantStatus, res.body)
			}
			if tt.wantBody != "" || tt.wantStatus == 204 {
				if diff := cmp.Diff(tt.wantBody, res.body); diff != "" {
					t.Errorf("body (-want +got):\n%s", diff)
				}
			}
			if tt.wantStatus >= 400 && res.header.Get("Content-Type") != "application/json; charset=utf-8" {
				t.Errorf("Content-Type = %q, want JSON", res.header.Get("Content-Type"))
			}
		})
	}
	if got := do(t, ts, "GET", "/health", nil, "").header.Get("Cache-Control"); got != "no-store" {
		t.Errorf("health Cache-Control = %q, want no-store", got)
	}
}

func TestMetricsFields(t *testing.T) {
	ts, _ := newTestServer(t)
	res := do(t, ts, "GET", "/metrics", nil, "")
	var m map[string]any
	if err := json.Unmarshal([]byte(res.body), &m); err != nil {
		t.Fatalf("decoding %q: %v", res.body, err)
	}
	for _, k := range []string{"ts", "cpu_count", "cpu_used_pct", "mem_total", "mem_used", "mem_cache", "mem_total_mib", "mem_used_mib", "disk_used", "disk_total"} {
		if _, ok := m[k]; !ok {
			t.Errorf("metrics lack %q: %s", k, res.body)
		}
	}
	if m["cpu_count"].(float64) < 1 || m["mem_total"].(float64) <= 0 || m["disk_total"].(float64) <= 0 {
		t.Errorf("implausible metrics: %s", res.body)
	}
}

func TestInit(t *testing.T) {
	ts, st := newTestServer(t)
	now := time.Now().UTC().Format(time.RFC3339Nano) // within the drift: the test must not set the host clock

	res := do(t, ts, "POST", "/init", nil, `{"envVars":{"A":"1"},"accessToken":"t1","defaultUser":"root","defaultWorkdir":"/tmp","timestamp":"`+now+`"}`)
	if res.status != 204 || res.header.Get("X-Envd-Version") != Version {
		t.Fatalf("init: status %d, X-Envd-Version %q; want 204, %q", res.status, res.header.Get("X-Envd-Version"), Version)
	}
	if st.AccessToken() != "t1" || st.DefaultWorkdir() != "/tmp" || st.EnvVars()["A"] != "1" {
		t.Fatalf("init did not apply: token %q workdir %q env %v", st.AccessToken(), st.DefaultWorkdir(), st.EnvVars())
	}

	steps := []struct {
		name       string
		header     map[string]string
		body       string
		wantStatus int
		wantToken  string
	}{
		{name: "a new token without the old one is refused", body: `{"accessToken":"t2"}`, wantStatus: 401, wantToken: "t1"},
		{name: "the same token re-inits", body: `{"accessToken":"t1","envVars":{"B":"2"}}`, wantStatus: 204, wantToken: "t1"},
		{name: "proving the old token rotates it", header: map[string]string{"X-Access-Token": "t1"}, body: `{"accessToken":"t2"}`, wantStatus: 204, wantToken: "t2"},
		{name: "bad json", header: map[string]string{"X-Access-Token": "t2"}, body: `{`, wantStatus: 400, wantToken: "t2"},
		{name: "unknown default user", header: map[string]string{"X-Access-Token": "t2"}, body: `{"accessToken":"t2","defaultUser":"no-such-user-xyz"}`, wantStatus: 400, wantToken: "t2"},
		{name: "absent token clears it", header: map[string]string{"X-Access-Token": "t2"}, body: `{}`, wantStatus: 204, wantToken: ""},
	}
	for _, s := range steps {
		res := do(t, ts, "POST", "/init", s.header, s.body)
		if res.status != s.wantStatus {
			t.Errorf("%s: status %d, want %d (body %q)", s.name, res.status, s.wantStatus, res.body)
		}
		if got := st.AccessToken(); got != s.wantToken {
			t.Errorf("%s: token %q, want %q", s.name, got, s.wantToken)
		}
	}
	// envVars replaces the set when given and leaves it alone when absent.
	if got, want := st.EnvVars(), map[string]string{"B": "2"}; !cmp.Equal(got, want) {
		t.Errorf("env = %v, want %v", got, want)
	}
}

func TestCORSPreflight(t *testing.T) {
	ts, st := newTestServer(t)
	st.Apply(state.Update{AccessToken: "tok"}) // preflights carry no token
	res := do(t, ts, "OPTIONS", "/process.Process/Start", map[string]string{
		"Origin":                         "https://app.example",
		"Access-Control-Request-Method":  "POST",
		"Access-Control-Request-Headers": "content-type,connect-protocol-version,x-access-token",
	}, "")
	if res.status != 204 {
		t.Fatalf("preflight status %d, want 204", res.status)
	}
	for k, want := range map[string]string{
		"Access-Control-Allow-Origin":  "https://app.example",
		"Access-Control-Allow-Headers": "content-type,connect-protocol-version,x-access-token",
	} {
		if got := res.header.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	if !strings.Contains(res.header.Get("Access-Control-Allow-Methods"), "POST") {
		t.Errorf("Allow-Methods %q lacks POST", res.header.Get("Access-Control-Allow-Methods"))
	}
}

// TestConnectOverJSONAndH2 checks the wire basics the SDKs rely on: the
// JSON codec over HTTP/1.1 and over cleartext HTTP/2.
func TestConnectOverJSONAndH2(t *testing.T) {
	st := state.New(state.Defaults{User: "root"})
	srv := NewServer(st, slog.New(slog.DiscardHandler))
	defer srv.Close()
	ts := httptest.NewUnstartedServer(srv)
	ts.EnableHTTP2 = true
	ts.StartTLS()
	defer ts.Close()

	for _, c := range []struct {
		name   string
		client *http.Client
	}{{"http1", &http.Client{Transport: &http.Transport{TLSClientConfig: ts.Client().Transport.(*http.Transport).TLSClientConfig}}}, {"h2", ts.Client()}} {
		t.Run(c.name, func(t *testing.T) {
			pc := processconnect.NewProcessClient(c.client, ts.URL, connect.WithProtoJSON())
			stream, err := pc.Start(context.Background(), connect.NewRequest(&processpb.StartRequest{
				Process: &processpb.ProcessConfig{Cmd: "/bin/echo", Args: []string{"hi"}},
			}))
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			for stream.Receive() {
				if d := stream.Msg().GetEvent().GetData(); d != nil {
					out.Write(d.GetStdout())
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			if out.String() != "hi\n" {
				t.Errorf("stdout = %q, want %q", out.String(), "hi\n")
			}
		})
	}
}

// TestZeroConnectTimeoutMeansNoLimit: "Connect-Timeout-Ms: 0" must not end
// the stream at once; the contract reads 0 as "no limit".
func TestZeroConnectTimeoutMeansNoLimit(t *testing.T) {
	ts, _ := newTestServer(t)
	pc := processconnect.NewProcessClient(ts.Client(), ts.URL, connect.WithProtoJSON())
	req := connect.NewRequest(&processpb.StartRequest{
		Process: &processpb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "sleep 0.3; echo ok"}},
	})
	req.Header().Set("Connect-Timeout-Ms", "0")
	stream, err := pc.Start(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	var exited bool
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		out.Write(ev.GetData().GetStdout())
		if ev.GetEnd() != nil {
			exited = ev.GetEnd().GetExited()
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	if out.String() != "ok\n" || !exited {
		t.Errorf("stdout %q exited %v; want %q and a normal exit", out.String(), exited, "ok\n")
	}
}
