package router

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

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
