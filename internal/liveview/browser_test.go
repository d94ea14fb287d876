package liveview

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/go-cmp/cmp"

	"github.com/agent-sandbox/agent-sandbox/internal/browser"
)

// fakeScreen hands out the frames sent on frames (a closed channel is the
// session's end) and records what was dispatched.
type fakeScreen struct {
	frames chan browser.Frame

	mu         sync.Mutex
	dispatched []browser.InputEvent
	closed     bool
}

func (s *fakeScreen) Next(ctx context.Context) (browser.Frame, error) {
	select {
	case f, ok := <-s.frames:
		if !ok {
			return browser.Frame{}, browser.ErrSessionEnded
		}
		return f, nil
	case <-ctx.Done():
		return browser.Frame{}, ctx.Err()
	}
}

func (s *fakeScreen) Dispatch(_ context.Context, ev browser.InputEvent) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dispatched = append(s.dispatched, ev)
	return nil
}

func (s *fakeScreen) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
}

func (s *fakeScreen) got() ([]browser.InputEvent, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dispatched, s.closed
}

// serveView serves v for sandbox isb1 as the router would: the takeover
// port when the request's host says 6091.
func serveView(t *testing.T, v *BrowserView) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := v.ServeLiveView(w, r, "isb1", r.URL.Query().Get("port") == "6091"); err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func viewOf(screen *fakeScreen, watched *[]string) *BrowserView {
	return &BrowserView{watch: func(_ context.Context, id string) (Screen, error) {
		*watched = append(*watched, id)
		return screen, nil
	}}
}

// dial opens the live view's WebSocket and reads its first message, the
// mode.
func dial(t *testing.T, srv *httptest.Server, port string) (*websocket.Conn, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, srv.URL+BrowserPath+"websocket?port="+port, &websocket.DialOptions{
		HTTPHeader: http.Header{"Origin": {srv.URL}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.CloseNow() })
	return ws, readStatus(t, ws).Mode
}

func read(t *testing.T, ws *websocket.Conn) (websocket.MessageType, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	typ, msg, err := ws.Read(ctx)
	if err != nil {
		t.Fatalf("reading the live view's WebSocket: %v", err)
	}
	return typ, msg
}

func readStatus(t *testing.T, ws *websocket.Conn) status {
	t.Helper()
	typ, msg := read(t, ws)
	var s status
	if typ != websocket.MessageText || json.Unmarshal(msg, &s) != nil {
		t.Fatalf("got %v %q, want a status message", typ, msg)
	}
	return s
}

func write(t *testing.T, ws *websocket.Conn, msg string) {
	t.Helper()
	if err := ws.Write(context.Background(), websocket.MessageText, []byte(msg)); err != nil {
		t.Fatal(err)
	}
}

// TestBrowserViewRelaysFrames: each frame is one binary message of its
// JPEG, after the status naming the link's mode; the session's end closes
// the socket with the reason.
func TestBrowserViewRelaysFrames(t *testing.T) {
	screen := &fakeScreen{frames: make(chan browser.Frame, 2)}
	var watched []string
	srv := serveView(t, viewOf(screen, &watched))
	screen.frames <- browser.Frame{JPEG: []byte("jpeg-1"), Width: 800, Height: 600}
	screen.frames <- browser.Frame{JPEG: []byte("jpeg-2"), Width: 800, Height: 600}
	ws, mode := dial(t, srv, "6090")
	if mode != "view" {
		t.Errorf("mode %q, want view", mode)
	}
	for _, want := range []string{"jpeg-1", "jpeg-2"} {
		if typ, msg := read(t, ws); typ != websocket.MessageBinary || string(msg) != want {
			t.Errorf("got %v %q, want the binary frame %s", typ, msg, want)
		}
	}
	close(screen.frames)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _, err := ws.Read(ctx)
	if websocket.CloseStatus(err) != websocket.StatusGoingAway || !strings.Contains(err.Error(), "session ended") {
		t.Errorf("after the session ended: %v, want a close saying so", err)
	}
	if diff := cmp.Diff([]string{"isb1"}, watched); diff != "" {
		t.Errorf("watched (-want +got):\n%s", diff)
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, closed := screen.got(); !closed; _, closed = screen.got() {
		if time.Now().After(deadline) {
			t.Fatal("the screen was never closed")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestBrowserViewInputGate: the view port refuses every message, even a
// well-formed event, and dispatches nothing; the takeover port dispatches
// the same event, and refuses a malformed one naming the field. A refusal
// leaves the connection open.
func TestBrowserViewInputGate(t *testing.T) {
	const click = `{"type":"mousePressed","x":0.5,"y":0.5,"button":"left"}`
	t.Run("view", func(t *testing.T) {
		screen := &fakeScreen{frames: make(chan browser.Frame)}
		var watched []string
		ws, mode := dial(t, serveView(t, viewOf(screen, &watched)), "6090")
		if mode != "view" {
			t.Fatalf("mode %q, want view", mode)
		}
		for range 2 {
			write(t, ws, click)
			if s := readStatus(t, ws); !strings.Contains(s.Error, "view-only link") {
				t.Errorf("input on the view link answered %+v, want refused as view-only", s)
			}
		}
		if got, _ := screen.got(); len(got) != 0 {
			t.Errorf("the view link dispatched %+v", got)
		}
	})
	t.Run("takeover", func(t *testing.T) {
		screen := &fakeScreen{frames: make(chan browser.Frame)}
		var watched []string
		ws, mode := dial(t, serveView(t, viewOf(screen, &watched)), "6091")
		if mode != "takeover" {
			t.Fatalf("mode %q, want takeover", mode)
		}
		write(t, ws, `{"type":"mousePressed","x":2,"y":0.5,"button":"left"}`)
		if s := readStatus(t, ws); !strings.HasPrefix(s.Error, "input refused: x: ") {
			t.Errorf("a point off the frame answered %+v, want refused naming x", s)
		}
		write(t, ws, click)
		deadline := time.Now().Add(5 * time.Second)
		for got, _ := screen.got(); len(got) == 0; got, _ = screen.got() {
			if time.Now().After(deadline) {
				t.Fatal("the takeover link's click was never dispatched")
			}
			time.Sleep(5 * time.Millisecond)
		}
		got, _ := screen.got()
		x, y := 0.5, 0.5
		if diff := cmp.Diff([]browser.InputEvent{{Type: "mousePressed", X: &x, Y: &y, Button: "left"}}, got); diff != "" {
			t.Errorf("dispatched (-want +got):\n%s", diff)
		}
	})
}

func TestBrowserViewPage(t *testing.T) {
	screen := &fakeScreen{frames: make(chan browser.Frame)}
	var watched []string
	srv := serveView(t, viewOf(screen, &watched))
	for _, tc := range []struct {
		path, upgrade string
		status        int
		contentType   string
	}{
		{BrowserPath, "", http.StatusOK, "text/html; charset=utf-8"},
		{BrowserPath + "view.js", "", http.StatusOK, "text/javascript; charset=utf-8"},
		{BrowserPath + "nope", "", http.StatusNotFound, ""},
		// Without an upgrade (which the router checks the token of), the
		// WebSocket's path opens no session.
		{BrowserPath + "websocket", "", http.StatusUpgradeRequired, ""},
		{BrowserPath + "websocket", "h2c", http.StatusUpgradeRequired, ""},
	} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+tc.path, nil)
		if tc.upgrade != "" {
			req.Header.Set("Connection", "Upgrade")
			req.Header.Set("Upgrade", tc.upgrade)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != tc.status || tc.contentType != "" && res.Header.Get("Content-Type") != tc.contentType {
			t.Errorf("GET %s (Upgrade %q): %d %s, want %d %s", tc.path, tc.upgrade, res.StatusCode, res.Header.Get("Content-Type"), tc.status, tc.contentType)
		}
		if tc.path == BrowserPath && (res.Header.Get("Referrer-Policy") != "no-referrer" || !strings.Contains(res.Header.Get("Content-Security-Policy"), "default-src 'none'")) {
			t.Errorf("the page's headers %v: want no referrer and a content security policy", res.Header)
		}
	}
	if len(watched) != 0 {
		t.Errorf("requests without a WebSocket watched %q", watched)
	}
}

// TestBrowserViewUnreachable: a browser that cannot be watched is the
// caller's to answer.
func TestBrowserViewUnreachable(t *testing.T) {
	failed := errors.New("no browser")
	v := &BrowserView{watch: func(context.Context, string) (Screen, error) { return nil, failed }}
	r := httptest.NewRequest(http.MethodGet, BrowserPath+"websocket", nil)
	r.Header.Set("Connection", "Upgrade")
	r.Header.Set("Upgrade", "websocket")
	w := httptest.NewRecorder()
	if err := v.ServeLiveView(w, r, "isb1", false); !errors.Is(err, failed) {
		t.Fatalf("ServeLiveView = %v, want the watch's error", err)
	}
	if w.Code != http.StatusOK || w.Body.Len() != 0 || len(w.Header()) != 0 {
		t.Errorf("answered %d %v %q, want nothing written", w.Code, w.Header(), w.Body)
	}
}

func TestBrowserPagePath(t *testing.T) {
	if got := BrowserPagePath("a.b-c_d"); got != "/browser/?token=a.b-c_d" {
		t.Errorf("BrowserPagePath = %q", got)
	}
}
