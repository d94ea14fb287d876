package router

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/net/websocket"

	"github.com/agent-sandbox/agent-sandbox/internal/template"
)

// fakeChromium answers as Chromium's DevTools server does: 500 to a Host
// that is neither an IP nor localhost, listings naming endpoints after the
// Host, and a WebSocket echo on /devtools/.
func fakeChromium() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/json/version", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"Browser":"Chrome/140","webSocketDebuggerUrl":"ws://%s/devtools/browser/b1"}`, r.Host)
	})
	mux.HandleFunc("/json/list", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `[{"id":"p1","url":"http://127.0.0.1:9222/x","webSocketDebuggerUrl":"ws://%[1]s/devtools/page/p1",`+
			`"devtoolsFrontendUrl":"/devtools/inspector.html?ws=%[1]s/devtools/page/p1"}]`, r.Host)
	})
	mux.Handle("/devtools/", websocket.Handler(func(ws *websocket.Conn) { io.Copy(ws, ws) }))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Host != devToolsHost {
			http.Error(w, "Host header is specified and is not an IP address or localhost.", http.StatusInternalServerError)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

func TestDevTools(t *testing.T) {
	d := newDialer()
	d.serve(t, "isb1", template.DevToolsPort, fakeChromium())
	host := "9222-isb1.example.test"
	for _, tc := range []struct {
		name    string
		srv     func(http.Handler) *httptest.Server
		ws      string // the endpoints' base
		wsParam string // the frontend URL's parameter
	}{
		{"http", httptest.NewServer, "ws://" + host, "ws=" + host},
		{"https", httptest.NewTLSServer, "wss://" + host, "wss=" + host},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt, err := New(Config{Dialer: d, Domain: "example.test"})
			if err != nil {
				t.Fatal(err)
			}
			srv := tc.srv(rt.Front(apiMarker))
			t.Cleanup(func() { srv.Close(); rt.Close() })
			client := srv.Client()

			getJSON := func(path string, v any) {
				t.Helper()
				req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
				req.Host = host
				resp, err := client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				body, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("GET %s: %d %s", path, resp.StatusCode, body)
				}
				if err := json.Unmarshal(body, v); err != nil {
					t.Fatalf("GET %s: %v in %s", path, err, body)
				}
			}
			var version map[string]string
			getJSON("/json/version", &version)
			want := map[string]string{"Browser": "Chrome/140", "webSocketDebuggerUrl": tc.ws + "/devtools/browser/b1"}
			if diff := cmp.Diff(want, version); diff != "" {
				t.Errorf("/json/version (-want +got):\n%s", diff)
			}
			var list []map[string]string
			getJSON("/json/list", &list)
			wantList := []map[string]string{{
				"id": "p1", "url": "http://127.0.0.1:9222/x", // the page's own URL is left alone
				"webSocketDebuggerUrl": tc.ws + "/devtools/page/p1",
				"devtoolsFrontendUrl":  "/devtools/inspector.html?" + tc.wsParam + "/devtools/page/p1",
			}}
			if diff := cmp.Diff(wantList, list); diff != "" {
				t.Errorf("/json/list (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("websocket", func(t *testing.T) {
		srv, _ := startProxy(t, d)
		ws := dialWebSocket(t, srv, host, "/devtools/browser/b1")
		if err := websocket.Message.Send(ws, `{"id":1,"method":"Browser.getVersion"}`); err != nil {
			t.Fatal(err)
		}
		var got string
		ws.SetReadDeadline(time.Now().Add(5 * time.Second))
		if err := websocket.Message.Receive(ws, &got); err != nil || got != `{"id":1,"method":"Browser.getVersion"}` {
			t.Fatalf("echo: %q, %v", got, err)
		}
	})
}

func TestPublicDevToolsListingRefusesGarbage(t *testing.T) {
	for _, body := range []string{`not json`, `{"webSocketDebuggerUrl": 7}`, `[1]`} {
		if _, err := publicDevToolsListing([]byte(body), "ws://h"); err == nil {
			t.Errorf("publicDevToolsListing(%s): no error", body)
		}
	}
}
