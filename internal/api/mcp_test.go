package api

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// recordingMCP answers 200 and remembers the key it was handed.
type recordingMCP struct{ key string }

func (m *recordingMCP) ServeMCP(w http.ResponseWriter, _ *http.Request, apiKey string) {
	m.key = apiKey
	w.WriteHeader(http.StatusOK)
}

func TestMCPRouteTakesTheKeyAsBearerOrHeader(t *testing.T) {
	tests := []struct {
		name       string
		header     map[string]string
		wantStatus int
	}{
		{name: "bearer", header: map[string]string{"Authorization": "Bearer " + testKey}, wantStatus: 200},
		{name: "bearer, scheme in lower case", header: map[string]string{"Authorization": "bearer " + testKey}, wantStatus: 200},
		{name: "X-API-Key", header: map[string]string{"X-API-Key": testKey}, wantStatus: 200},
		{name: "no key", wantStatus: 401},
		{name: "wrong bearer", header: map[string]string{"Authorization": "Bearer e2b_ffffffffffffffffffffffffffffffffffffffff"}, wantStatus: 401},
		{name: "basic is not a key", header: map[string]string{"Authorization": "Basic " + testKey}, wantStatus: 401},
		{name: "wrong X-API-Key", header: map[string]string{"X-API-Key": "nope"}, wantStatus: 401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := &recordingMCP{}
			h := newHandler(t, newFake(), func(c *Config) { c.MCP = m })
			r := httptest.NewRequest(http.MethodPost, "/mcp", nil)
			for k, v := range tt.header {
				r.Header.Set(k, v)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tt.wantStatus {
				t.Fatalf("status %d, want %d: %s", w.Code, tt.wantStatus, w.Body)
			}
			switch {
			case tt.wantStatus == 200 && m.key != testKey:
				t.Errorf("the MCP server was handed key %q, want the caller's", m.key)
			case tt.wantStatus != 200 && m.key != "":
				t.Errorf("the MCP server was reached without a valid key")
			}
			if tt.name == "no key" && w.Header().Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
		})
	}
}

func TestMCPRouteAbsentWithoutAServer(t *testing.T) {
	r := httptest.NewRequest(http.MethodPost, "/mcp", nil)
	r.Header.Set("X-API-Key", testKey)
	w := httptest.NewRecorder()
	newHandler(t, newFake()).ServeHTTP(w, r)
	if w.Code != http.StatusNotFound {
		t.Errorf("status %d, want 404", w.Code)
	}
}
