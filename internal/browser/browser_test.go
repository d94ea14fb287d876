package browser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/accessibility"
	"github.com/coder/websocket"
	"github.com/google/go-cmp/cmp"
)

// fakeChromium serves the DevTools HTTP listing of one page and a CDP
// WebSocket for it that answers commands from answers (method → result)
// and records what it was sent.
type fakeChromium struct {
	t       *testing.T
	srv     *httptest.Server
	answers map[string]func(params json.RawMessage) (result any, events []string)

	mu    sync.Mutex // guards calls and conns
	calls []call
	conns []*websocket.Conn
}

type call struct {
	Method string
	Params json.RawMessage
}

func newFakeChromium(t *testing.T) *fakeChromium {
	f := &fakeChromium{t: t, answers: map[string]func(json.RawMessage) (any, []string){}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /json/list", func(w http.ResponseWriter, r *http.Request) {
		if r.Host != "127.0.0.1:9222" {
			http.Error(w, "Host header is specified and is not an IP address or localhost.", http.StatusInternalServerError)
			return
		}
		json.NewEncoder(w).Encode([]map[string]string{{"id": "SW", "type": "service_worker"}, {"id": "P1", "type": "page"}})
	})
	mux.HandleFunc("/devtools/page/P1", f.serveCDP)
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeChromium) serveCDP(w http.ResponseWriter, r *http.Request) {
	ws, err := websocket.Accept(w, r, nil)
	if err != nil {
		f.t.Errorf("accepting the CDP WebSocket: %v", err)
		return
	}
	f.mu.Lock()
	f.conns = append(f.conns, ws)
	f.mu.Unlock()
	ctx := context.Background()
	for {
		_, data, err := ws.Read(ctx)
		if err != nil {
			return
		}
		var req struct {
			ID     int64           `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		}
		if err := json.Unmarshal(data, &req); err != nil {
			f.t.Errorf("fake Chromium got %s: %v", data, err)
			return
		}
		f.mu.Lock()
		f.calls = append(f.calls, call{req.Method, req.Params})
		answer, ok := f.answers[req.Method]
		f.mu.Unlock()
		var reply any = map[string]any{"id": req.ID, "result": map[string]any{}}
		var events []string
		if ok {
			var result any
			result, events = answer(req.Params)
			reply = map[string]any{"id": req.ID, "result": result}
			if e, isErr := result.(error); isErr {
				reply = map[string]any{"id": req.ID, "error": map[string]any{"code": -32000, "message": e.Error()}}
			}
		}
		out, _ := json.Marshal(reply)
		ws.Write(ctx, websocket.MessageText, out)
		for _, ev := range events {
			if !strings.HasPrefix(ev, "{") { // a method without parameters
				ev = `{"method":"` + ev + `","params":{}}`
			}
			ws.Write(ctx, websocket.MessageText, []byte(ev))
		}
	}
}

// answer sets what the fake answers method with.
func (f *fakeChromium) answer(method string, fn func(json.RawMessage) (any, []string)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.answers[method] = fn
}

// sent returns the calls of method the fake got.
func (f *fakeChromium) sent(method string) []json.RawMessage {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []json.RawMessage
	for _, c := range f.calls {
		if c.Method == method {
			out = append(out, c.Params)
		}
	}
	return out
}

// dialer dials the fake whatever sandbox and port are asked for, and
// records them.
type dialer struct {
	addr string
	err  error

	mu    sync.Mutex
	dials []string
}

func (d *dialer) Dial(ctx context.Context, id string, port int) (net.Conn, error) {
	d.mu.Lock()
	d.dials = append(d.dials, id)
	d.mu.Unlock()
	if d.err != nil {
		return nil, d.err
	}
	var nd net.Dialer
	return nd.DialContext(ctx, "tcp", d.addr)
}

var errPortClosed = errors.New("port closed")

func newTestSessions(f *fakeChromium) (*Sessions, *dialer) {
	d := &dialer{addr: strings.TrimPrefix(f.srv.URL, "http://")}
	return NewSessions(d, 9222, func(err error) bool { return errors.Is(err, errPortClosed) }), d
}

func session(t *testing.T, f *fakeChromium) *Session {
	t.Helper()
	s, _ := newTestSessions(f)
	t.Cleanup(s.Close)
	sess, err := s.Get(context.Background(), "sbx1")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	return sess
}

func decode(t *testing.T, body string) Action {
	t.Helper()
	a, err := DecodeAction([]byte(body))
	if err != nil {
		t.Fatalf("DecodeAction(%s): %v", body, err)
	}
	return a
}

func TestDecodeActionRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, body, field string
	}{
		{"not an object", `[1]`, "body"},
		{"unknown field", `{"action":"click","selector":"a","button":"left"}`, "body"},
		{"unknown action", `{"action":"hover"}`, "action"},
		{"field of another action", `{"action":"screenshot","format":"jpeg"}`, "format"},
		{"click without target", `{"action":"click"}`, "selector"},
		{"click with two targets", `{"action":"click","selector":"a","ref":"e4"}`, "selector"},
		{"click with x only", `{"action":"click","x":3}`, "y"},
		{"fill at a point", `{"action":"fill","x":3,"y":4,"value":"v"}`, "x"},
		{"fill without value", `{"action":"fill","selector":"input"}`, "value"},
		{"bad ref", `{"action":"click","ref":"node-4"}`, "ref"},
		{"zero ref", `{"action":"click","ref":"e0"}`, "ref"},
		{"navigate to a file", `{"action":"navigate","url":"file:///etc/passwd"}`, "url"},
		{"unknown key", `{"action":"press","key":"Hyper"}`, "key"},
		{"scroll nowhere", `{"action":"scroll"}`, "deltaY"},
		{"scroll both", `{"action":"scroll","selector":"a","deltaY":3}`, "deltaY"},
		{"wait for nothing", `{"action":"wait"}`, "for"},
		{"wait for selector without one", `{"action":"wait","for":"selector"}`, "selector"},
		{"wait for navigation with a selector", `{"action":"wait","for":"navigation","selector":"a"}`, "selector"},
		{"timeout too long", `{"action":"wait","for":"networkIdle","timeoutMs":600000}`, "timeoutMs"},
		{"extract of nothing", `{"action":"extract"}`, "format"},
		{"links of an element", `{"action":"extract","format":"links","selector":"a"}`, "selector"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeAction([]byte(tc.body))
			var input *InputError
			if !errors.As(err, &input) || input.Field != tc.field {
				t.Fatalf("DecodeAction(%s) = %v, want an InputError about %s", tc.body, err, tc.field)
			}
		})
	}
}

func TestNavigateWaitsForLoad(t *testing.T) {
	f := newFakeChromium(t)
	f.answer("Page.navigate", func(json.RawMessage) (any, []string) {
		return map[string]any{"frameId": "F", "loaderId": "L"}, []string{"Page.loadEventFired"}
	})
	f.answer("Runtime.evaluate", func(json.RawMessage) (any, []string) {
		return map[string]any{"result": map[string]any{"type": "object", "value": map[string]string{"URL": "http://x/", "Title": "X"}}}, nil
	})
	sess := session(t, f)
	res, err := sess.Do(context.Background(), decode(t, `{"action":"navigate","url":"http://x/"}`))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Result{URL: "http://x/", Title: "X"}, res); diff != "" {
		t.Errorf("navigate (-want +got):\n%s", diff)
	}
	if got := f.sent("Page.navigate"); len(got) != 1 || !strings.Contains(string(got[0]), `"url":"http://x/"`) {
		t.Errorf("Page.navigate sent %s", got)
	}
	for _, enabled := range []string{"Page.enable", "Network.enable"} {
		if len(f.sent(enabled)) != 1 {
			t.Errorf("%s sent %d times, want once", enabled, len(f.sent(enabled)))
		}
	}
	// The load counts as the navigation the next action may wait for.
	if _, err := sess.Do(context.Background(), decode(t, `{"action":"wait","for":"navigation","timeoutMs":2000}`)); err != nil {
		t.Errorf("wait for navigation after navigate: %v", err)
	}
}

func TestNavigateFailureIsPageError(t *testing.T) {
	f := newFakeChromium(t)
	f.answer("Page.navigate", func(json.RawMessage) (any, []string) {
		return map[string]any{"frameId": "F", "errorText": "net::ERR_NAME_NOT_RESOLVED"}, nil
	})
	_, err := session(t, f).Do(context.Background(), decode(t, `{"action":"navigate","url":"http://example.com/"}`))
	var pe *PageError
	if !errors.As(err, &pe) || !strings.Contains(pe.Msg, "ERR_NAME_NOT_RESOLVED") {
		t.Fatalf("navigate = %v, want a PageError with Chromium's errorText", err)
	}
}

func TestClickByRef(t *testing.T) {
	f := newFakeChromium(t)
	f.answer("DOM.resolveNode", func(p json.RawMessage) (any, []string) {
		if !strings.Contains(string(p), `"backendNodeId":42`) {
			return errors.New("No node with given id found"), nil
		}
		return map[string]any{"object": map[string]any{"type": "object", "objectId": "obj-42"}}, nil
	})
	f.answer("Runtime.callFunctionOn", func(json.RawMessage) (any, []string) {
		return map[string]any{"result": map[string]any{"type": "object", "value": []float64{10, 20, 300}}}, nil
	})
	sess := session(t, f)
	if _, err := sess.Do(context.Background(), decode(t, `{"action":"click","ref":"e42"}`)); err != nil {
		t.Fatal(err)
	}
	calls := f.sent("Runtime.callFunctionOn")
	if len(calls) != 1 || !strings.Contains(string(calls[0]), `"objectId":"obj-42"`) {
		t.Errorf("Runtime.callFunctionOn sent %s, want it on obj-42", calls)
	}
	var types []string
	for _, p := range f.sent("Input.dispatchMouseEvent") {
		var ev struct {
			Type string
			X, Y float64
		}
		json.Unmarshal(p, &ev)
		if ev.X != 10 || ev.Y != 20 {
			t.Errorf("mouse event %s, want at (10, 20)", p)
		}
		types = append(types, ev.Type)
	}
	if diff := cmp.Diff([]string{"mouseMoved", "mousePressed", "mouseReleased"}, types); diff != "" {
		t.Errorf("mouse events (-want +got):\n%s", diff)
	}

	_, err := sess.Do(context.Background(), decode(t, `{"action":"click","ref":"e7"}`))
	var pe *PageError
	if !errors.As(err, &pe) || !strings.Contains(pe.Msg, "ref e7") {
		t.Errorf("click on a stale ref = %v, want a PageError naming it", err)
	}
}

func TestSelectorMatchingNothing(t *testing.T) {
	f := newFakeChromium(t)
	f.answer("Runtime.evaluate", func(json.RawMessage) (any, []string) {
		return map[string]any{"result": map[string]any{"type": "object", "subtype": "null", "value": nil}}, nil
	})
	_, err := session(t, f).Do(context.Background(), decode(t, `{"action":"fill","selector":"#nope","value":"x"}`))
	var pe *PageError
	if !errors.As(err, &pe) || !strings.Contains(pe.Msg, `"#nope"`) {
		t.Fatalf("fill = %v, want a PageError naming the selector", err)
	}
}

func TestScreenshot(t *testing.T) {
	f := newFakeChromium(t)
	f.answer("Page.captureScreenshot", func(p json.RawMessage) (any, []string) {
		if !strings.Contains(string(p), `"format":"png"`) {
			return errors.New("want png"), nil
		}
		return map[string]any{"data": "iVBORw0KGgo="}, nil
	})
	res, err := session(t, f).Do(context.Background(), decode(t, `{"action":"screenshot"}`))
	if err != nil {
		t.Fatal(err)
	}
	if res.MimeType != "image/png" || string(res.Data) != "\x89PNG\r\n\x1a\n" {
		t.Errorf("screenshot = %q %q", res.MimeType, res.Data)
	}
}

func TestBrowserErrorPropagates(t *testing.T) {
	f := newFakeChromium(t)
	f.answer("Page.printToPDF", func(json.RawMessage) (any, []string) { return errors.New("Printing failed"), nil })
	_, err := session(t, f).Do(context.Background(), decode(t, `{"action":"pdf"}`))
	if err == nil || !strings.Contains(err.Error(), "Page.printToPDF: Printing failed") {
		t.Fatalf("pdf = %v, want the browser's error naming the command", err)
	}
}

func TestSessionsShareAndReopen(t *testing.T) {
	f := newFakeChromium(t)
	s, d := newTestSessions(f)
	defer s.Close()
	ctx := context.Background()
	a, err := s.Get(ctx, "sbx1")
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := s.Get(ctx, "sbx1"); b != a {
		t.Error("a second Get opened a second session")
	}
	// Chromium goes away: the session is dropped and the next Get attaches anew.
	f.mu.Lock()
	f.conns[0].CloseNow()
	f.mu.Unlock()
	<-a.conn.done
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := s.Get(ctx, "sbx1")
		if err != nil {
			t.Fatal(err)
		}
		if c != a {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the closed session was never dropped")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if d.dials[0] != "sbx1" {
		t.Errorf("dialed %q, want sbx1", d.dials)
	}
}

func TestNoBrowser(t *testing.T) {
	f := newFakeChromium(t)
	s, d := newTestSessions(f)
	d.err = errPortClosed
	_, err := s.Get(context.Background(), "sbx1")
	if !errors.Is(err, ErrNoBrowser) {
		t.Fatalf("Get with the port closed = %v, want ErrNoBrowser", err)
	}
}

func TestBuildTree(t *testing.T) {
	str := func(s string) *accessibility.Value {
		raw, _ := json.Marshal(s)
		return &accessibility.Value{Type: "string", Value: raw}
	}
	nodes := []*accessibility.Node{
		{NodeID: "1", Role: str("RootWebArea"), Name: str("Form"), ChildIDs: []accessibility.NodeID{"2"}, BackendDOMNodeID: 1},
		{NodeID: "2", Role: str("generic"), ChildIDs: []accessibility.NodeID{"3", "4", "5"}, BackendDOMNodeID: 2},
		{NodeID: "3", Role: str("textbox"), Value: str("hi"), BackendDOMNodeID: 7, ChildIDs: []accessibility.NodeID{"6"}},
		{NodeID: "4", Ignored: true, Role: str("none"), ChildIDs: []accessibility.NodeID{"5b"}},
		{NodeID: "5b", Role: str("button"), Name: str("Send"), BackendDOMNodeID: 9},
		{NodeID: "5", Role: str("StaticText"), Name: str("none"), BackendDOMNodeID: 11},
		{NodeID: "6", Role: str("InlineTextBox"), Name: str("hi")},
	}
	want := &Node{Ref: "e1", Role: "RootWebArea", Name: "Form", Children: []*Node{
		{Ref: "e7", Role: "textbox", Value: "hi"},
		{Ref: "e9", Role: "button", Name: "Send"},
		{Ref: "e11", Role: "StaticText", Name: "none"},
	}}
	if diff := cmp.Diff(want, buildTree(nodes)); diff != "" {
		t.Errorf("buildTree (-want +got):\n%s", diff)
	}
	if id, err := parseRef("e9"); err != nil || id != 9 {
		t.Errorf("parseRef(e9) = %d, %v; want the backend node 9", id, err)
	}
}

func TestWaitTimesOutAndTheSessionLives(t *testing.T) {
	f := newFakeChromium(t)
	f.answer("Runtime.evaluate", func(json.RawMessage) (any, []string) {
		return map[string]any{"result": map[string]any{"type": "boolean", "value": false}}, nil
	})
	sess := session(t, f)
	_, err := sess.Do(context.Background(), decode(t, `{"action":"wait","for":"selector","selector":"#late","timeoutMs":200}`))
	var pe *PageError
	if !errors.As(err, &pe) || !strings.Contains(pe.Msg, "not within 200ms") {
		t.Fatalf("wait = %v, want a PageError saying it timed out", err)
	}
	// The deadline ended the action, not the connection.
	f.answer("Page.captureScreenshot", func(json.RawMessage) (any, []string) { return map[string]any{"data": "AA=="}, nil })
	if _, err := sess.Do(context.Background(), decode(t, `{"action":"screenshot"}`)); err != nil {
		t.Errorf("screenshot after a timed-out wait: %v", err)
	}
}

// A page's requests end right after they start: each is counted out after
// it was counted in, or network idle would never come.
func TestNetworkIdleAfterABurstOfRequests(t *testing.T) {
	f := newFakeChromium(t)
	f.answer("Page.captureScreenshot", func(json.RawMessage) (any, []string) {
		var events []string
		for i := range 500 {
			for _, m := range []string{"Network.requestWillBeSent", "Network.loadingFinished"} {
				events = append(events, fmt.Sprintf(`{"method":%q,"params":{"requestId":"r%d"}}`, m, i))
			}
		}
		return map[string]any{"data": "AA=="}, events
	})
	sess := session(t, f)
	if _, err := sess.Do(context.Background(), decode(t, `{"action":"screenshot"}`)); err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if _, err := sess.Do(context.Background(), decode(t, `{"action":"wait","for":"networkIdle","timeoutMs":3000}`)); err != nil {
		t.Fatalf("wait for networkIdle after every request ended: %v", err)
	}
}

func TestExtractLinks(t *testing.T) {
	f := newFakeChromium(t)
	f.answer("Runtime.evaluate", func(p json.RawMessage) (any, []string) {
		var params struct{ Expression string }
		json.Unmarshal(p, &params)
		if !strings.HasPrefix(params.Expression, "(() => [...document.links]") || !strings.HasSuffix(params.Expression, ")(null)") {
			return errors.New("unexpected expression " + params.Expression), nil
		}
		return map[string]any{"result": map[string]any{"type": "object", "value": []map[string]string{{"text": "Home", "href": "http://x/"}}}}, nil
	})
	res, err := session(t, f).Do(context.Background(), decode(t, `{"action":"extract","format":"links"}`))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Link{{Text: "Home", Href: "http://x/"}}, res.Links); diff != "" {
		t.Errorf("links (-want +got):\n%s", diff)
	}
}
