package egress

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/browser"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox/sandboxtest"
	"github.com/agent-sandbox/agent-sandbox/internal/template"
)

// TestBrowserEgress is the browser issue's egress acceptance: the Chromium
// of a browser sandbox, driven as the browser action API drives it, loads
// a page of the test Internet its sandbox's allowlist names and fails to
// load others, since its traffic leaves through the sandbox's network like
// any other. The allowed page comes first, as the positive control: a
// Chromium that loads nothing would fail both. It runs on the jail: what a
// sandbox reaches is decided on the host the same way for every backend
// (TestEgress), and Chromium in emulated VMs would take minutes more.
func TestBrowserEgress(t *testing.T) {
	tmpl := sandboxtest.Built(t, template.Browser())
	h := newHarness(t, sandboxtest.Jail, tmpl)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	// Only extra.test: the operator's allowlist (ceiling) is denied too.
	sb, err := h.m.Create(ctx, sandbox.CreateRequest{
		Template: template.BrowserName, Timeout: 10 * time.Minute, Secure: true,
		Network: []byte(`{"allowOut":["extra.test"],"denyOut":["0.0.0.0/0"]}`),
	})
	if err != nil {
		t.Fatalf("creating a browser sandbox: %v", err)
	}
	t.Cleanup(func() { _ = h.m.Kill(context.Background(), sb.ID) })
	sessions := browser.NewSessions(h.m, template.DevToolsPort, func(err error) bool { return errors.Is(err, isolation.ErrPortClosed) })
	t.Cleanup(sessions.Close)
	sess, err := sessions.Get(ctx, sb.ID)
	if err != nil {
		t.Fatalf("attaching to the sandbox's Chromium: %v", err)
	}
	do := func(body string) (browser.Result, error) {
		a, err := browser.DecodeAction([]byte(body))
		if err != nil {
			t.Fatalf("action %s: %v", body, err)
		}
		return sess.Do(ctx, a)
	}

	if _, err := do(`{"action":"navigate","url":"http://extra.test/"}`); err != nil {
		t.Fatalf("navigating to the allowed http://extra.test/: %v", err)
	}
	res, err := do(`{"action":"extract","format":"text"}`)
	if err != nil {
		t.Fatalf("extracting the allowed page's text: %v", err)
	}
	if !strings.HasPrefix(res.Text, "site=extra.test ") {
		t.Fatalf("the allowed page http://extra.test/ shows %q, want the site's own answer site=extra.test …", res.Text)
	}
	t.Logf("allowed http://extra.test/: loaded, %q", res.Text)

	for _, denied := range []struct{ url, why string }{
		{"http://allowed.test/", "on the operator's allowlist, denied by the sandbox's denyOut"},
		{"http://other.test/", "on no allowlist"},
	} {
		res, err := do(`{"action":"navigate","url":"` + denied.url + `"}`)
		var pe *browser.PageError
		if !errors.As(err, &pe) {
			text, _ := do(`{"action":"extract","format":"text"}`)
			t.Errorf("denied %s (%s): navigate = %+v, %v; want a page error (the page shows %q)", denied.url, denied.why, res, err, text.Text)
			continue
		}
		t.Logf("denied %s (%s): %v", denied.url, denied.why, err)
	}

	// By address there is no name to refuse: the egress proxy answers
	// instead of the site.
	byAddr := "http://" + otherIP.String() + "/"
	if _, err := do(`{"action":"navigate","url":"` + byAddr + `"}`); err != nil {
		t.Logf("denied %s (an address on no allowlist): %v", byAddr, err)
		return
	}
	if res, err := do(`{"action":"extract","format":"text"}`); err != nil || strings.Contains(res.Text, "site=") {
		t.Errorf("denied %s (an address on no allowlist) shows %q, %v; want the proxy's refusal, not the site", byAddr, res.Text, err)
	} else {
		t.Logf("denied %s (an address on no allowlist): the page shows %q", byAddr, res.Text)
	}
}
