package client

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestRunCode runs a cell against a stand-in for the code interpreter
// behind header routing: the request goes to port 49999 with the envd
// token, and the NDJSON lines become an Execution.
func TestRunCode(t *testing.T) {
	var got struct {
		Code     string `json:"code"`
		Language string `json:"language"`
	}
	interp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/execute" || r.Header.Get("E2b-Sandbox-Port") != "49999" || r.Header.Get("E2b-Sandbox-Id") != "sb1" ||
			r.Header.Get("X-Access-Token") != testToken {
			t.Errorf("request %s %s with headers %v", r.Method, r.URL.Path, r.Header)
		}
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &got); err != nil {
			t.Errorf("request body %q: %v", b, err)
		}
		io.WriteString(w, `{"type":"keepalive"}
{"type":"stdout","text":"42\n","timestamp":"2026-01-01T00:00:00Z"}
{"type":"stderr","text":"warn\n","timestamp":"2026-01-01T00:00:00Z"}
{"type":"result","is_main_result":true,"text":"7","png":"iVBORw0K"}
{"type":"number_of_executions","execution_count":3}
{"type":"error","name":"ValueError","value":"bad","traceback":"tb"}
{"type":"end_of_execution"}
`)
	}))
	defer interp.Close()
	sb := sandboxBehind(t, interp.URL)
	ex, err := sb.RunCode(t.Context(), "print(6*7)", CodeOptions{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	want := &Execution{
		Stdout:  []string{"42\n"},
		Stderr:  []string{"warn\n"},
		Results: []CodeResult{{IsMain: true, Text: "7", PNG: "iVBORw0K"}},
		Error:   &CodeError{Name: "ValueError", Value: "bad", Traceback: "tb"},
		Count:   3,
	}
	if diff := cmp.Diff(want, ex); diff != "" {
		t.Errorf("Execution (-want +got):\n%s", diff)
	}
	if got.Code != "print(6*7)" || got.Language != "python" {
		t.Errorf("request = %+v", got)
	}
	if _, err := sb.RunCode(t.Context(), "1", CodeOptions{Language: "python", ContextID: "c1"}); err == nil {
		t.Error("RunCode with a language and a context: no error")
	}
}

func TestRunCodeStreamCutShort(t *testing.T) {
	interp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"type":"stdout","text":"partial"}`+"\n")
	}))
	defer interp.Close()
	sb := sandboxBehind(t, interp.URL)
	if _, err := sb.RunCode(t.Context(), "x", CodeOptions{}); err == nil {
		t.Error("a stream without end_of_execution: no error")
	}
}

// sandboxBehind creates a sandbox on the fake API whose ports are all
// served, by header routing, at sandboxURL.
func sandboxBehind(t *testing.T, sandboxURL string) *Sandbox {
	t.Helper()
	api := httptest.NewServer(newFakeAPI())
	t.Cleanup(api.Close)
	c, err := New(Config{APIURL: api.URL, SandboxURL: sandboxURL, APIKey: testKey})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := c.CreateSandbox(t.Context(), CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return sb
}
