package client

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestNewURLs(t *testing.T) {
	tests := []struct {
		name         string
		cfg          Config
		serverDomain string // returned by create/connect
		wantAPI      string
		wantEnvd     string
	}{
		{name: "defaults", wantAPI: "https://api.e2b.app", wantEnvd: "https://sandbox.e2b.app"},
		{name: "own domain with port", cfg: Config{Domain: "example.test:8443"},
			wantAPI: "https://api.example.test:8443", wantEnvd: "https://49983-abc.example.test:8443"},
		{name: "api url wins over domain", cfg: Config{Domain: "example.test", APIURL: "http://localhost:3000/"},
			wantAPI: "http://localhost:3000", wantEnvd: "https://49983-abc.example.test"},
		{name: "sandbox url wins", cfg: Config{Domain: "example.test", SandboxURL: "http://localhost:3002/prefix/"},
			serverDomain: "other.test", wantAPI: "https://api.example.test", wantEnvd: "http://localhost:3002/prefix"},
		{name: "server domain wins over config domain", cfg: Config{Domain: "example.test"}, serverDomain: "other.test",
			wantAPI: "https://api.example.test", wantEnvd: "https://49983-abc.other.test"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if got := c.APIURL(); got != tt.wantAPI {
				t.Errorf("APIURL() = %q, want %q", got, tt.wantAPI)
			}
			sb := c.newSandbox(sandboxWire{SandboxID: "abc", Domain: tt.serverDomain})
			if got := sb.EnvdURL(); got != tt.wantEnvd {
				t.Errorf("EnvdURL() = %q, want %q", got, tt.wantEnvd)
			}
		})
	}
}

func TestNewRejectsBadURLs(t *testing.T) {
	for _, cfg := range []Config{
		{APIURL: "localhost:3000"},
		{APIURL: "ftp://x"},
		{APIURL: "http://"},
		{SandboxURL: "http://x?y=1"},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) succeeded, want an error", cfg)
		}
	}
}

func TestFromEnv(t *testing.T) {
	t.Setenv("E2B_API_URL", "http://a")
	t.Setenv("E2B_SANDBOX_URL", "http://s")
	t.Setenv("E2B_DOMAIN", "d.test")
	t.Setenv("E2B_API_KEY", "k")
	want := Config{APIURL: "http://a", SandboxURL: "http://s", Domain: "d.test", APIKey: "k"}
	if diff := cmp.Diff(want, FromEnv()); diff != "" {
		t.Errorf("FromEnv() (-want +got):\n%s", diff)
	}
}

func TestControlPlane(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()

	sb, err := h.client.CreateSandbox(ctx, CreateOptions{
		Timeout: 1500 * time.Millisecond, Metadata: map[string]string{"a": "b"}, EnvVars: map[string]string{"X": "1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := h.api.last(); got.Method != "POST" || got.Path != "/v2/sandboxes" || got.APIKey != testKey {
		t.Errorf("create request = %+v", got)
	}
	var body map[string]any
	if err := json.Unmarshal([]byte(h.api.last().Body), &body); err != nil {
		t.Fatal(err)
	}
	wantBody := map[string]any{"templateID": "base", "timeout": 2.0, "metadata": map[string]any{"a": "b"}, "envVars": map[string]any{"X": "1"}}
	if diff := cmp.Diff(wantBody, body); diff != "" {
		t.Errorf("create body (-want +got):\n%s", diff)
	}
	if sb.ID != "sb1" || sb.EnvdAccessToken != testToken || sb.EnvdVersion != "0.6.4" {
		t.Errorf("created %+v", sb)
	}

	info, err := h.client.GetSandbox(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if info.ID != sb.ID || info.State != StateRunning || info.Metadata["a"] != "b" {
		t.Errorf("GetSandbox = %+v", info)
	}

	if err := sb.SetTimeout(ctx, 60*time.Second+time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if got := h.api.last(); got.Path != "/sandboxes/sb1/timeout" || got.Body != `{"timeout":61}` {
		t.Errorf("timeout request = %+v", got)
	}

	again, err := h.client.Connect(ctx, sb.ID, ConnectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := h.api.last(); got.Path != "/v2/sandboxes/sb1/connect" || got.Body != `{}` {
		t.Errorf("connect request = %+v", got)
	}
	if again.EnvdAccessToken != testToken {
		t.Errorf("connect token = %q", again.EnvdAccessToken)
	}

	if err := sb.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	err = h.client.KillSandbox(ctx, sb.ID)
	if !errors.Is(err, ErrNotFound) {
		t.Errorf("second kill: %v, want ErrNotFound", err)
	}
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Status != 404 || apiErr.Code != 404 || apiErr.Message != `sandbox "sb1" not found` {
		t.Errorf("second kill: %#v", apiErr)
	}
	if _, err := h.client.GetSandbox(ctx, sb.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("get after kill: %v, want ErrNotFound", err)
	}
	if _, err := h.client.Connect(ctx, sb.ID, ConnectOptions{}); !errors.Is(err, ErrNotFound) {
		t.Errorf("connect after kill: %v, want ErrNotFound", err)
	}
}

func TestAuthErrors(t *testing.T) {
	h := newHarness(t)
	bad, err := New(Config{APIURL: h.client.apiURL, APIKey: "e2b_wrong"})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = bad.ListSandboxes(t.Context(), ListOptions{})
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusUnauthorized || errors.Is(err, ErrNotFound) {
		t.Errorf("wrong key: %v", err)
	}
	none, err := New(Config{APIURL: h.client.apiURL})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := none.ListSandboxes(t.Context(), ListOptions{}); !errors.Is(err, ErrNoAPIKey) {
		t.Errorf("no key: %v, want ErrNoAPIKey", err)
	}
}

func TestListPages(t *testing.T) {
	h := newHarness(t)
	for _, id := range []string{"a", "b", "c"} {
		h.api.add(SandboxInfo{ID: id, State: StateRunning})
	}
	var got []string
	token := ""
	for range 5 {
		page, next, err := h.client.ListSandboxes(t.Context(), ListOptions{Limit: 1, NextToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, sb := range page {
			got = append(got, sb.ID)
		}
		if token = next; token == "" {
			break
		}
	}
	if diff := cmp.Diff([]string{"a", "b", "c"}, got); diff != "" {
		t.Errorf("listed (-want +got):\n%s", diff)
	}
}

func TestListQuery(t *testing.T) {
	tests := []struct {
		name string
		opts ListOptions
		want string
	}{
		{name: "none", want: ""},
		// Captured from the JS SDK 2.51.0 (spec §2.5).
		{name: "captured metadata", opts: ListOptions{Metadata: map[string]string{"sandbox Id": "x&y=z"}},
			want: "metadata=sandbox%252520Id%3Dx%252526y%25253Dz"},
		{name: "two pairs, sorted", opts: ListOptions{Metadata: map[string]string{"b": "2", "a": "1"}},
			want: "metadata=a%3D1%26b%3D2"},
		{name: "states and paging", opts: ListOptions{State: []State{StateRunning, StatePaused}, Limit: 10, NextToken: "t/k="},
			want: "state=running,paused&limit=10&nextToken=t%2Fk%3D"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := listQuery(tt.opts); got != tt.want {
				t.Errorf("listQuery = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestListSendsMetadataOnTheWire(t *testing.T) {
	h := newHarness(t)
	if _, _, err := h.client.ListSandboxes(t.Context(), ListOptions{Metadata: map[string]string{"sandbox Id": "x&y=z"}}); err != nil {
		t.Fatal(err)
	}
	if got, want := h.api.last().RawQuery, "metadata=sandbox%252520Id%3Dx%252526y%25253Dz"; got != want {
		t.Errorf("query = %q, want %q", got, want)
	}
}

func TestEncodeMetadata(t *testing.T) {
	tests := []struct {
		in   map[string]string
		want string
	}{
		{in: map[string]string{"sandbox Id": "x&y=z"}, want: "sandbox%2520Id=x%2526y%253Dz"},
		{in: map[string]string{"k": "a+b"}, want: "k=a%252Bb"},
		// encodeURIComponent keeps !'()*~; URLSearchParams then escapes
		// all but *.
		{in: map[string]string{"k": "!'()*~-_."}, want: "k=%21%27%28%29*%7E-_."},
		{in: map[string]string{"ü": "é"}, want: "%25C3%25BC=%25C3%25A9"},
	}
	for _, tt := range tests {
		if got := EncodeMetadata(tt.in); got != tt.want {
			t.Errorf("EncodeMetadata(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestCreateSandboxEgressLists(t *testing.T) {
	api := newFakeAPI()
	ts := httptest.NewServer(api)
	defer ts.Close()
	c, err := New(Config{APIURL: ts.URL, APIKey: testKey})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateSandbox(t.Context(), CreateOptions{AllowOut: []string{"example.com"}, DenyOut: []string{"10.0.0.0/8"}}); err != nil {
		t.Fatal(err)
	}
	var body struct {
		Network map[string][]string `json:"network"`
	}
	if err := json.Unmarshal([]byte(api.last().Body), &body); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{"allowOut": {"example.com"}, "denyOut": {"10.0.0.0/8"}}
	if diff := cmp.Diff(want, body.Network); diff != "" {
		t.Errorf("network sent (-want +got):\n%s", diff)
	}
	if _, err := c.CreateSandbox(t.Context(), CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(api.last().Body, "network") {
		t.Errorf("a create without egress lists sent %s", api.last().Body)
	}
}
