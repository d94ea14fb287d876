package router

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"golang.org/x/net/websocket"

	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
)

// The manager is what the server wires in.
var _ Waker = (*sandbox.Manager)(nil)

// waker is a fake Waker over a fakeDialer: a paused sandbox in asleep
// is resumed by Wake, or Wake fails with err.
type waker struct {
	d      *fakeDialer
	asleep map[string]bool
	err    error
	wakes  int
}

func (w *waker) Asleep(id string) bool { return w.asleep[id] }

func (w *waker) Wake(_ context.Context, id string) error {
	w.wakes++
	if w.err != nil {
		return w.err
	}
	w.d.mu.Lock()
	defer w.d.mu.Unlock()
	delete(w.d.paused, id)
	delete(w.asleep, id)
	return nil
}

func TestWake(t *testing.T) {
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") })
	for _, tc := range []struct {
		name   string
		port   int
		hdr    map[string]string
		err    error
		asleep bool
		status int
		wakes  int
		body   string
	}{
		{name: "a user port wakes it", port: 8000, asleep: true, status: 200, wakes: 1, body: "hello"},
		{name: "envd with the token", port: EnvdPort, hdr: map[string]string{"X-Access-Token": "tok"}, asleep: true, status: 200, wakes: 1},
		{name: "envd without the token", port: EnvdPort, asleep: true, status: 403,
			body: `{"sandboxId":"isleepy","message":"` + wakeDenied + `","code":403}`},
		{name: "envd with a wrong token", port: EnvdPort, hdr: map[string]string{"X-Access-Token": "nope"}, asleep: true, status: 403},
		{name: "not asleep: 502 paused", port: 8000, status: 502,
			body: `{"sandboxId":"isleepy","message":"The sandbox is paused","code":502}`},
		{name: "transitioning", port: 8000, asleep: true, err: fmt.Errorf("x: %w", sandbox.ErrConflict), status: 409, wakes: 1},
		{name: "no room", port: 8000, asleep: true, err: fmt.Errorf("x: %w", sandbox.ErrLimit), status: 429, wakes: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDialer()
			d.serve(t, "isleepy", tc.port, hello)
			d.pause("isleepy")
			wk := &waker{d: d, asleep: map[string]bool{"isleepy": tc.asleep}, err: tc.err}
			rt, err := New(Config{Dialer: d, Ingress: ingress{"isleepy": {AccessToken: "tok"}}, Waker: wk, Domain: "example.test"})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(rt.Front(apiMarker))
			t.Cleanup(func() { srv.Close(); rt.Close() })
			res := get(t, srv, "GET", fmt.Sprintf("%d-isleepy.example.test", tc.port), "/", tc.hdr)
			body, _ := io.ReadAll(res.Body)
			if res.StatusCode != tc.status || wk.wakes != tc.wakes {
				t.Fatalf("status %d (%s), wakes %d; want %d, %d", res.StatusCode, body, wk.wakes, tc.status, tc.wakes)
			}
			if tc.body == "" {
				return
			}
			if json.Valid([]byte(tc.body)) {
				var got, want any
				json.Unmarshal(body, &got)
				json.Unmarshal([]byte(tc.body), &want)
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("body %s, want %s", body, tc.body)
				}
			} else if string(body) != tc.body {
				t.Errorf("body %q, want %q", body, tc.body)
			}
		})
	}
}

// TestWakeWebSocket: a WebSocket upgrade to a sandbox asleep wakes it and
// then carries messages.
func TestWakeWebSocket(t *testing.T) {
	d := newDialer()
	d.serve(t, "isleepy", 6080, websocket.Handler(func(ws *websocket.Conn) { io.Copy(ws, ws) }))
	d.pause("isleepy")
	wk := &waker{d: d, asleep: map[string]bool{"isleepy": true}}
	rt, err := New(Config{Dialer: d, Waker: wk, Domain: "example.test"})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(rt.Front(apiMarker))
	t.Cleanup(func() { srv.Close(); rt.Close() })
	ws := dialWebSocket(t, srv, "6080-isleepy.example.test", "/")
	if err := websocket.Message.Send(ws, "hello"); err != nil {
		t.Fatal(err)
	}
	var got string
	ws.SetReadDeadline(time.Now().Add(5 * time.Second))
	if err := websocket.Message.Receive(ws, &got); err != nil || got != "hello" || wk.wakes != 1 {
		t.Errorf("echo %q, %v; wakes %d", got, err, wk.wakes)
	}
}
