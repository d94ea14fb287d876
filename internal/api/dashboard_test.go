package api

import (
	"strings"
	"testing"
)

// The link the E2B CLI prints for a sandbox is a page, never a 404, even
// without an API key (a browser sends none) and before the server is
// ready; it tells nothing about the sandbox without one, and escapes what
// the path holds.
func TestInspectPage(t *testing.T) {
	h := newHandler(t, newFake(), func(c *Config) { c.Ready = func() bool { return false } })
	w := serve(h, apiCase{method: "GET", target: "/dashboard/inspect/sandbox/iabc%3Cb%3E", header: map[string]string{"X-API-Key": ""}})
	body := w.Body.String()
	if w.Code != 200 || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/html") {
		t.Fatalf("status %d, content type %q", w.Code, w.Header().Get("Content-Type"))
	}
	for _, want := range []string{"Sandbox <code>iabc&lt;b&gt;</code>", "e2b sandbox info iabc&lt;b&gt;", `fetch('/sandboxes/' + encodeURIComponent("iabc\u003cb\u003e")`} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q:\n%s", want, body)
		}
	}
	if strings.Contains(body, "<b>") {
		t.Error("the path's markup reached the page unescaped")
	}
}
