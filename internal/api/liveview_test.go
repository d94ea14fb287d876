package api

import (
	"bytes"
	"encoding/json"
	"net/url"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/liveview"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
)

func TestLiveView(t *testing.T) {
	signer, err := liveview.NewSigner(bytes.Repeat([]byte{3}, 32))
	if err != nil {
		t.Fatal(err)
	}
	withLiveView := func(c *Config) { c.LiveView = signer }
	now := testNow.Add(time.Hour) // newHandler's clock

	t.Run("links", func(t *testing.T) {
		f := newFake(running("isb1"))
		f.execOK = true
		w := serve(newHandler(t, f, withLiveView), apiCase{method: "POST", target: "/sandboxes/isb1/live-view", body: `{"ttl":90}`})
		if w.Code != 201 {
			t.Fatalf("status %d: %s", w.Code, w.Body)
		}
		var links liveViewLinks
		if err := json.Unmarshal(w.Body.Bytes(), &links); err != nil {
			t.Fatal(err)
		}
		if want := now.Add(90 * time.Second).UTC(); !links.ExpiresAt.Equal(want) {
			t.Errorf("expiresAt %v, want %v", links.ExpiresAt, want)
		}
		for _, tc := range []struct {
			url, host, viewOnly string
			port                int
		}{
			{links.URL, "6090-isb1.example.test", "true", liveview.ViewPort},
			{links.TakeoverURL, "6091-isb1.example.test", "false", liveview.TakeoverPort},
		} {
			u, err := url.Parse(tc.url)
			if err != nil {
				t.Fatal(err)
			}
			q := u.Query()
			if u.Scheme != "http" || u.Host != tc.host || u.Path != "/vnc.html" || q.Get("view_only") != tc.viewOnly {
				t.Errorf("link %s: want http://%s/vnc.html with view_only=%s", tc.url, tc.host, tc.viewOnly)
			}
			ws, err := url.Parse(q.Get("path"))
			if err != nil || ws.Path != "websockify" {
				t.Fatalf("link %s: WebSocket path %q", tc.url, q.Get("path"))
			}
			if err := signer.Verify(ws.Query().Get("token"), "isb1", tc.port, now); err != nil {
				t.Errorf("link %s: token: %v", tc.url, err)
			}
		}
		if len(f.execs) != 1 || f.execs[0][0] != "sh" {
			t.Errorf("ran %q; want the live view's start script", f.execs)
		}
	})

	for _, c := range []apiCase{
		{name: "ttl zero", body: `{"ttl":0}`, status: 400, wantJSON: `{"code":400,"message":"ttl: want 1 to 86400 seconds, got 0"}`},
		{name: "ttl over a day", body: `{"ttl":86401}`, status: 400, wantJSON: `{"code":400,"message":"ttl: want 1 to 86400 seconds, got 86401"}`},
		{name: "unknown field", body: `{"ttll":5}`, status: 400, wantJSON: `{"code":400,"message":"body: json: unknown field \"ttll\""}`},
		{name: "ttl not a number", body: `{"ttl":"5m"}`, status: 400},
		// The fake's sandboxes have no sh.
		{name: "no display", status: 409},
		{name: "paused", target: "/sandboxes/isb2/live-view", status: 409,
			wantJSON: `{"code":409,"message":"sandbox isb2 is paused: connect to resume it first"}`},
		{name: "unknown sandbox", target: "/sandboxes/nope/live-view", status: 404, wantJSON: notFoundBody},
	} {
		t.Run(c.name, func(t *testing.T) {
			paused := running("isb2")
			paused.State = store.StatePaused
			c.method = "POST"
			if c.target == "" {
				c.target = "/sandboxes/isb1/live-view"
			}
			w := serve(newHandler(t, newFake(running("isb1"), paused), withLiveView), c)
			if w.Code != c.status {
				t.Fatalf("status %d, want %d; body %s", w.Code, c.status, w.Body)
			}
			if c.wantJSON != "" {
				assertJSON(t, w.Body.Bytes(), c.wantJSON)
			}
		})
	}
}
