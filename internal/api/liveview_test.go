package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/coder/websocket"

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

	t.Run("a browser sandbox's links", func(t *testing.T) {
		f := newFake(running("isb1"))
		f.devTools = fakeDevTools(t)
		w := serve(newHandler(t, f, withLiveView), apiCase{method: "POST", target: "/sandboxes/isb1/live-view"})
		if w.Code != 201 {
			t.Fatalf("status %d: %s", w.Code, w.Body)
		}
		var links liveViewLinks
		if err := json.Unmarshal(w.Body.Bytes(), &links); err != nil {
			t.Fatal(err)
		}
		if want := now.Add(DefaultLiveViewTTL).UTC(); !links.ExpiresAt.Equal(want) {
			t.Errorf("expiresAt %v, want %v", links.ExpiresAt, want)
		}
		for _, tc := range []struct {
			url, host string
			port      int
		}{
			{links.URL, "6090-isb1.example.test", liveview.ViewPort},
			{links.TakeoverURL, "6091-isb1.example.test", liveview.TakeoverPort},
		} {
			u, err := url.Parse(tc.url)
			if err != nil {
				t.Fatal(err)
			}
			if u.Scheme != "http" || u.Host != tc.host || u.Path != liveview.BrowserPath {
				t.Errorf("link %s: want http://%s%s", tc.url, tc.host, liveview.BrowserPath)
			}
			if err := signer.Verify(u.Query().Get("token"), "isb1", tc.port, now); err != nil {
				t.Errorf("link %s: token: %v", tc.url, err)
			}
		}
		if err := signer.Verify(mustQuery(t, links.URL).Get("token"), "isb1", liveview.TakeoverPort, now); err == nil {
			t.Error("the view link's token opens the takeover port")
		}
	})

	for _, c := range []apiCase{
		{name: "ttl zero", body: `{"ttl":0}`, status: 400, wantJSON: `{"code":400,"message":"ttl: want 1 to 86400 seconds, got 0"}`},
		{name: "ttl over a day", body: `{"ttl":86401}`, status: 400, wantJSON: `{"code":400,"message":"ttl: want 1 to 86400 seconds, got 86401"}`},
		{name: "unknown field", body: `{"ttll":5}`, status: 400, wantJSON: `{"code":400,"message":"body: json: unknown field \"ttll\""}`},
		{name: "ttl not a number", body: `{"ttl":"5m"}`, status: 400},
		// The fake's sandboxes have no sh, and no Chromium.
		{name: "no display and no browser", status: 409,
			wantJSON: `{"code":409,"message":"sandbox isb1 has nothing to show: no X display (the desktop template has one) and no Chromium with DevTools on port 9222 (the browser template runs one): starting the live view: sh exited 127: sh: command not found"}`},
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

func mustQuery(t *testing.T, link string) url.Values {
	t.Helper()
	u, err := url.Parse(link)
	if err != nil {
		t.Fatal(err)
	}
	return u.Query()
}

// fakeDevTools serves what the server's DevTools session needs of
// Chromium: a listing of one page, and that page's WebSocket answering
// every command with an empty result. It returns its address.
func fakeDevTools(t *testing.T) string {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /json/list", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `[{"id":"P1","type":"page"}]`)
	})
	mux.HandleFunc("/devtools/page/P1", func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer ws.CloseNow()
		for {
			_, msg, err := ws.Read(r.Context())
			if err != nil {
				return
			}
			var call struct{ ID int64 }
			json.Unmarshal(msg, &call)
			ws.Write(r.Context(), websocket.MessageText, fmt.Appendf(nil, `{"id":%d,"result":{}}`, call.ID))
		}
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}
