package api

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
)

func TestCreate(t *testing.T) {
	created := func(want sandbox.CreateRequest) func(*testing.T, *fakeSandboxes) {
		return func(t *testing.T, f *fakeSandboxes) {
			t.Helper()
			if len(f.created) != 1 {
				t.Fatalf("%d creates, want 1", len(f.created))
			}
			if d := cmp.Diff(want, f.created[0]); d != "" {
				t.Errorf("create request (-want +got):\n%s", d)
			}
		}
	}
	yes := true
	runCases(t, fakeWith(), []apiCase{
		{name: "v2 defaults", method: "POST", target: "/v2/sandboxes", body: `{"templateID":"base"}`,
			status: 201,
			wantJSON: `{"sandboxID":"isb1","templateID":"tplbase","alias":"base","clientID":"6532622b",
				"envdVersion":"0.6.4","envdAccessToken":"tok","trafficAccessToken":null,"domain":"example.test"}`,
			check: created(sandbox.CreateRequest{Template: "base", Timeout: 300 * time.Second, Secure: true})},
		{name: "v2 secure false is ignored", method: "POST", target: "/v2/sandboxes",
			body: `{"templateID":"base","secure":false}`, status: 201,
			check: created(sandbox.CreateRequest{Template: "base", Timeout: 300 * time.Second, Secure: true})},
		{name: "v1 defaults", method: "POST", target: "/sandboxes", body: `{"templateID":"base"}`,
			status: 201,
			wantJSON: `{"sandboxID":"isb1","templateID":"tplbase","alias":"base","clientID":"6532622b",
				"envdVersion":"0.6.4","envdAccessToken":"tok","trafficAccessToken":null,"domain":"example.test"}`,
			check: created(sandbox.CreateRequest{Template: "base", Timeout: 15 * time.Second})},
		{name: "v1 as 2.45 and Python send it", method: "POST", target: "/sandboxes",
			body: `{"templateID":"base","timeout":300,"secure":true,"allow_internet_access":true,
				"metadata":{"a":"b"},"envVars":{"E":"1"},"autoPause":true,"network":{"allowOut":["1.1.1.1"]}}`,
			status: 201,
			check: created(sandbox.CreateRequest{Template: "base", Timeout: 300 * time.Second, Secure: true,
				AllowInternetAccess: &yes, Metadata: map[string]string{"a": "b"}, EnvVars: map[string]string{"E": "1"},
				AutoPause: true, Network: []byte(`{"allowOut":["1.1.1.1"]}`)})},
		{name: "lifecycle as 2.51 sends it", method: "POST", target: "/v2/sandboxes",
			body: `{"templateID":"base","autoPause":true,"autoPauseMemory":false,"autoResume":{"enabled":false}}`, status: 201,
			check: created(sandbox.CreateRequest{Template: "base", Timeout: 300 * time.Second, Secure: true, AutoPause: true, AutoPauseFiles: true})},
		{name: "auto-resume", method: "POST", target: "/v2/sandboxes",
			body: `{"templateID":"base","autoPause":true,"autoResume":{"enabled":true}}`, status: 201,
			check: created(sandbox.CreateRequest{Template: "base", Timeout: 300 * time.Second, Secure: true, AutoPause: true, AutoResume: true})},
		{name: "volume mounts", method: "POST", target: "/v2/sandboxes",
			body: `{"templateID":"base","volumeMounts":[{"name":"v","path":"/data"}]}`, status: 201,
			check: created(sandbox.CreateRequest{Template: "base", Timeout: 300 * time.Second, Secure: true,
				VolumeMounts: []store.VolumeMount{{Name: "v", Path: "/data"}}})},
		{name: "network null", method: "POST", target: "/v2/sandboxes", body: `{"templateID":"base","network":null}`,
			status: 201, check: created(sandbox.CreateRequest{Template: "base", Timeout: 300 * time.Second, Secure: true})},
		{name: "network not an object", method: "POST", target: "/v2/sandboxes", body: `{"templateID":"base","network":[]}`,
			status: 400},
		{name: "missing templateID", method: "POST", target: "/v2/sandboxes", body: `{}`,
			status: 400, wantJSON: `{"code":400,"message":"templateID is required"}`},
		{name: "timeout 0", method: "POST", target: "/v2/sandboxes", body: `{"templateID":"base","timeout":0}`,
			status: 400, wantJSON: `{"code":400,"message":"timeout must be at least 1 second, got 0"}`},
		{name: "timeout fraction", method: "POST", target: "/sandboxes", body: `{"templateID":"base","timeout":1.5}`,
			status: 400},
		{name: "unknown template", method: "POST", target: "/v2/sandboxes", body: `{"templateID":"missing"}`,
			status: 400, wantJSON: `{"code":400,"message":"template \"missing\" not found: invalid request"}`},
	})
}

func TestCreateNoDomain(t *testing.T) {
	h := newHandler(t, newFake(), func(c *Config) { c.Domain = "" })
	w := serve(h, apiCase{method: "POST", target: "/v2/sandboxes", body: `{"templateID":"base"}`})
	if w.Code != 201 {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	assertJSON(t, w.Body.Bytes(), `{"sandboxID":"isb1","templateID":"tplbase","alias":"base","clientID":"6532622b",
		"envdVersion":"0.6.4","envdAccessToken":"tok","trafficAccessToken":null,"domain":null}`)
}

// TestCreateHostBounds: the manager's host bounds reach the caller as E2B
// JSON errors with the manager's message.
func TestCreateHostBounds(t *testing.T) {
	for _, c := range []struct {
		err    error
		status int
	}{
		{&testError{"this server runs its maximum of 3 sandboxes; kill one first", sandbox.ErrLimit}, 429},
		{&testError{"not enough free disk for a new sandbox: 1GiB free", sandbox.ErrNoSpace}, 507},
	} {
		f := newFake()
		f.fail = c.err
		w := serve(newHandler(t, f), apiCase{method: "POST", target: "/v2/sandboxes", body: `{"templateID":"base"}`})
		if w.Code != c.status {
			t.Errorf("%v: status %d, want %d", c.err, w.Code, c.status)
		}
		assertJSON(t, w.Body.Bytes(), fmt.Sprintf(`{"code":%d,"message":%q}`, c.status, c.err.Error()))
	}
}

// testError is an error with a message for the caller, wrapping kind.
type testError struct {
	msg  string
	kind error
}

func (e *testError) Error() string { return e.msg }
func (e *testError) Unwrap() error { return e.kind }

// TestCreateUnsupported checks that every create field the server does not
// implement yet is a 400 naming it (what the SDK sends when its option is
// set), and that nothing is created.
func TestCreateUnsupported(t *testing.T) {
	var cases []apiCase
	for _, tc := range []struct{ field, body, msg string }{
		{"mcp", `"mcp":{"exa":{"apiKey":"k"}}`, "mcp (an MCP gateway in the sandbox)"},
		{"iam", `"iam":{"tokens":{"t":{"audience":"a","tokenType":"JWT-SVID"}}}`, "iam (workload identity tokens)"},
	} {
		for _, target := range []string{"/v2/sandboxes", "/sandboxes"} {
			cases = append(cases, apiCase{
				name: tc.field + " " + target, method: "POST", target: target,
				body:     `{"templateID":"base",` + tc.body + `}`,
				status:   400,
				wantJSON: `{"code":400,"message":"` + tc.msg + ` is not supported yet by this server"}`,
				check: func(t *testing.T, f *fakeSandboxes) {
					if len(f.created) != 0 {
						t.Errorf("created %d sandboxes", len(f.created))
					}
				},
			})
		}
	}
	runCases(t, fakeWith(), cases)
}
