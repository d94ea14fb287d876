package router

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/liveview"
)

// TestLiveView: the x11vnc ports are never routed; a WebSocket to a noVNC
// port passes only with a token for that sandbox and port, while the
// noVNC page itself passes without one. Each refused row has a passing
// twin that differs only in the token, so a refusal is the check's doing.
func TestLiveView(t *testing.T) {
	signer, err := liveview.NewSigner(bytes.Repeat([]byte{1}, 32))
	if err != nil {
		t.Fatal(err)
	}
	d := newDialer()
	for _, port := range []int{liveview.ViewPort, liveview.TakeoverPort, 5910, 5911} {
		d.serve(t, "isb1", port, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("served")) }))
	}
	rt, err := New(Config{Dialer: d, Domain: "example.test", LiveView: signer})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(rt.Front(apiMarker))
	t.Cleanup(func() { srv.Close(); rt.Close() })

	later := time.Now().Add(time.Minute)
	view := signer.Sign("isb1", false, later)
	takeover := signer.Sign("isb1", true, later)
	expired := signer.Sign("isb1", true, time.Now().Add(-time.Second))
	upgrade := map[string]string{"Connection": "Upgrade", "Upgrade": "websocket"}
	for _, tc := range []struct {
		name string
		port int
		path string
		hdr  map[string]string
		want int
	}{
		{"view page without a token", liveview.ViewPort, "/vnc.html", nil, http.StatusOK},
		{"view socket with the view token", liveview.ViewPort, "/websockify?token=" + view, upgrade, http.StatusOK},
		{"view socket with the takeover token", liveview.ViewPort, "/websockify?token=" + takeover, upgrade, http.StatusOK},
		{"view socket without a token", liveview.ViewPort, "/websockify", upgrade, http.StatusForbidden},
		{"view socket with an expired token", liveview.ViewPort, "/websockify?token=" + expired, upgrade, http.StatusForbidden},
		{"view socket with another sandbox's token", liveview.ViewPort, "/websockify?token=" + signer.Sign("isb2", true, later), upgrade, http.StatusForbidden},
		{"takeover socket with the takeover token", liveview.TakeoverPort, "/websockify?token=" + takeover, upgrade, http.StatusOK},
		{"takeover socket with the view token", liveview.TakeoverPort, "/websockify?token=" + view, upgrade, http.StatusForbidden},
		{"view x11vnc", 5910, "/?token=" + takeover, upgrade, http.StatusForbidden},
		{"takeover x11vnc, plain", 5911, "/?token=" + takeover, nil, http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The fake serves plain HTTP: a passing upgrade is its 200.
			res := get(t, srv, http.MethodGet, strconv.Itoa(tc.port)+"-isb1.example.test", tc.path, tc.hdr)
			body := readAll(t, res.Body)
			if res.StatusCode != tc.want {
				t.Errorf("status %d (%s), want %d", res.StatusCode, body, tc.want)
			}
		})
	}
}

// fakeBrowserView answers for the server's live view of a browser and
// records what it served; err is what it cannot reach for a WebSocket.
type fakeBrowserView struct {
	mu     sync.Mutex
	served []string
	err    error
}

func (f *fakeBrowserView) ServeLiveView(w http.ResponseWriter, r *http.Request, id string, takeover bool) error {
	if f.err != nil && isUpgrade(r) {
		return f.err
	}
	f.mu.Lock()
	f.served = append(f.served, fmt.Sprintf("%s %s takeover=%v", id, r.URL.Path, takeover))
	f.mu.Unlock()
	io.WriteString(w, "browser view")
	return nil
}

// TestBrowserLiveView: under liveview.BrowserPath the live view ports are
// the server's, behind the same checks as the noVNC ports (a WebSocket
// needs the token of its port, every request the sandbox's traffic
// token), and a sandbox asleep is woken first; the ports' other paths
// still go to the sandbox.
func TestBrowserLiveView(t *testing.T) {
	signer, err := liveview.NewSigner(bytes.Repeat([]byte{1}, 32))
	if err != nil {
		t.Fatal(err)
	}
	d := newDialer()
	for _, id := range []string{"isb1", "iprivate", "isleepy"} {
		d.serve(t, id, liveview.ViewPort, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "sandbox") }))
	}
	d.pause("isleepy")
	wk := &waker{d: d, asleep: map[string]bool{"isleepy": true}}
	view := &fakeBrowserView{}
	rt, err := New(Config{Dialer: d, Domain: "example.test", LiveView: signer, BrowserView: view, Waker: wk,
		Ingress: ingress{"isb1": {}, "isleepy": {}, "iprivate": {TrafficToken: "secret"}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(rt.Front(apiMarker))
	t.Cleanup(func() { srv.Close(); rt.Close() })

	later := time.Now().Add(time.Minute)
	tokens := map[string]string{}
	for _, id := range []string{"isb1", "iprivate", "isleepy"} {
		tokens[id+" view"] = signer.Sign(id, false, later)
		tokens[id+" takeover"] = signer.Sign(id, true, later)
	}
	expired := signer.Sign("isb1", true, time.Now().Add(-time.Second))
	upgrade := map[string]string{"Connection": "Upgrade", "Upgrade": "websocket"}
	withTraffic := map[string]string{"Connection": "Upgrade", "Upgrade": "websocket", TrafficTokenHeader: "secret"}
	socket := liveview.BrowserPath + "websocket?token="
	for _, tc := range []struct {
		name, id string
		port     int
		path     string
		hdr      map[string]string
		want     int
		body     string // its start
		served   string // what the browser view served, if anything
	}{
		{"page on the view port, no token", "isb1", liveview.ViewPort, liveview.BrowserPath, nil, 200, "browser view", "isb1 /browser/ takeover=false"},
		{"page on the takeover port, no token", "isb1", liveview.TakeoverPort, liveview.BrowserPath + "view.js", nil, 200, "browser view", "isb1 /browser/view.js takeover=true"},
		{"view socket, view token", "isb1", liveview.ViewPort, socket + tokens["isb1 view"], upgrade, 200, "browser view", "isb1 /browser/websocket takeover=false"},
		{"view socket, takeover token", "isb1", liveview.ViewPort, socket + tokens["isb1 takeover"], upgrade, 200, "browser view", "isb1 /browser/websocket takeover=false"},
		{"takeover socket, takeover token", "isb1", liveview.TakeoverPort, socket + tokens["isb1 takeover"], upgrade, 200, "browser view", "isb1 /browser/websocket takeover=true"},
		{"takeover socket, view token", "isb1", liveview.TakeoverPort, socket + tokens["isb1 view"], upgrade, 403, `{"sandboxId":"isb1","message":"taking over the live view needs its takeover token"`, ""},
		{"view socket, no token", "isb1", liveview.ViewPort, liveview.BrowserPath + "websocket", upgrade, 403, `{"sandboxId":"isb1"`, ""},
		{"view socket, expired token", "isb1", liveview.ViewPort, socket + expired, upgrade, 403, `{"sandboxId":"isb1","message":"the live view link has expired`, ""},
		{"view socket, another sandbox's token", "isb1", liveview.ViewPort, socket + tokens["iprivate view"], upgrade, 403, `{"sandboxId":"isb1"`, ""},
		{"the port's other paths are the sandbox's", "isb1", liveview.ViewPort, "/vnc.html", nil, 200, "sandbox", ""},
		{"private traffic, no traffic token", "iprivate", liveview.ViewPort, socket + tokens["iprivate view"], upgrade, 403, `{"sandboxId":"iprivate","message":"missing traffic access token`, ""},
		{"private traffic, page without the traffic token", "iprivate", liveview.ViewPort, liveview.BrowserPath, nil, 403, `{"sandboxId":"iprivate"`, ""},
		{"private traffic, both tokens", "iprivate", liveview.ViewPort, socket + tokens["iprivate view"], withTraffic, 200, "browser view", "iprivate /browser/websocket takeover=false"},
		{"a sandbox asleep is woken", "isleepy", liveview.ViewPort, socket + tokens["isleepy view"], upgrade, 200, "browser view", "isleepy /browser/websocket takeover=false"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			view.mu.Lock()
			view.served = nil
			view.mu.Unlock()
			res := get(t, srv, http.MethodGet, strconv.Itoa(tc.port)+"-"+tc.id+".example.test", tc.path, tc.hdr)
			body := readAll(t, res.Body)
			if res.StatusCode != tc.want || !strings.HasPrefix(body, tc.body) {
				t.Errorf("%d %s, want %d %s…", res.StatusCode, body, tc.want, tc.body)
			}
			view.mu.Lock()
			defer view.mu.Unlock()
			if got := strings.Join(view.served, "; "); got != tc.served {
				t.Errorf("the browser view served %q, want %q", got, tc.served)
			}
		})
	}
	if wk.wakes != 1 {
		t.Errorf("%d wakes, want 1", wk.wakes)
	}

	// A browser that cannot be reached is answered like a port that is
	// not open: Chromium's.
	view.err = fmt.Errorf("no browser: %w", isolation.ErrPortClosed)
	res := get(t, srv, http.MethodGet, "6090-isb1.example.test", socket+tokens["isb1 view"], upgrade)
	if body := readAll(t, res.Body); res.StatusCode != http.StatusBadGateway || !strings.Contains(body, `"port":9222`) {
		t.Errorf("an unreachable browser: %d %s, want 502 naming port 9222", res.StatusCode, body)
	}
}
