package api

import (
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/store"
)

func TestBrowserActions(t *testing.T) {
	setup := func() *fakeSandboxes {
		paused := running("isb2")
		paused.State = store.StatePaused
		return newFake(running("isb1"), paused)
	}
	const target = "/sandboxes/isb1/browser/actions"
	runCases(t, setup, []apiCase{
		{name: "bad action names the field", method: "POST", target: target, body: `{"action":"hover"}`,
			status: 400, wantJSON: `{"code":400,"message":"action: \"hover\" is not one of click, extract, fill, navigate, pdf, press, screenshot, scroll, select, wait"}`},
		{name: "a field the action does not take", method: "POST", target: target, body: `{"action":"screenshot","url":"http://x/"}`,
			status: 400, wantJSON: `{"code":400,"message":"url: screenshot does not take it"}`},
		{name: "no body", method: "POST", target: target, status: 400},
		// The fake's sandboxes listen on no port: no Chromium.
		{name: "no browser", method: "POST", target: target, body: `{"action":"screenshot"}`,
			status: 409, wantJSON: `{"code":409,"message":"sandbox isb1 has no browser: template base runs no Chromium with DevTools on port 9222 (the browser template does, and the desktop template once its display is up)"}`},
		{name: "paused", method: "POST", target: "/sandboxes/isb2/browser/actions", body: `{"action":"screenshot"}`,
			status: 409, wantJSON: `{"code":409,"message":"sandbox isb2 is paused: connect to resume it first"}`},
		{name: "unknown sandbox", method: "POST", target: "/sandboxes/nope/browser/actions", body: `{"action":"screenshot"}`,
			status: 404, wantJSON: notFoundBody},
	})
}
