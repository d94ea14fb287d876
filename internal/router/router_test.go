package router

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/websocket"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/template"
)

// The manager is what the server wires in.
var _ Dialer = (*sandbox.Manager)(nil)

// fakeDialer reaches "sandbox ports" that are httptest servers on the host.
type fakeDialer struct {
	mu     sync.Mutex
	ports  map[string]map[int]string // id → port → address; a known id may have no ports
	paused map[string]bool
	conns  map[string][]net.Conn // open connections by sandbox
	dials  int
}

func newDialer() *fakeDialer {
	return &fakeDialer{ports: map[string]map[int]string{}, paused: map[string]bool{}, conns: map[string][]net.Conn{}}
}

// serve makes port of sandbox id answer with h.
func (d *fakeDialer) serve(t *testing.T, id string, port int, h http.Handler) {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ports[id] == nil {
		d.ports[id] = map[int]string{}
	}
	d.ports[id][port] = srv.Listener.Addr().String()
}

// Dial implements Dialer.
func (d *fakeDialer) Dial(ctx context.Context, id string, port int) (net.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dials++
	ports, ok := d.ports[id]
	switch {
	case !ok:
		return nil, fmt.Errorf("dialing %s: %w", id, sandbox.ErrNotFound)
	case d.paused[id]:
		return nil, fmt.Errorf("dialing %s: %w", id, sandbox.ErrPaused)
	case ports[port] == "":
		return nil, fmt.Errorf("dialing port %d of %s: %w", port, id, isolation.ErrPortClosed)
	}
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", ports[port])
	if err != nil {
		return nil, err
	}
	d.conns[id] = append(d.conns[id], c)
	return c, nil
}

// kill forgets sandbox id and resets its connections, like the manager.
func (d *fakeDialer) kill(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.ports, id)
	for _, c := range d.conns[id] {
		c.Close()
	}
	delete(d.conns, id)
}

func (d *fakeDialer) pause(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.paused[id] = true
	for _, c := range d.conns[id] {
		c.Close()
	}
	delete(d.conns, id)
}

// apiMarker answers every request the router does not take.
var apiMarker = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Handled-By", "api")
	w.WriteHeader(http.StatusTeapot)
})

// startProxy serves router.Front(apiMarker) for domain "example.test".
func startProxy(t *testing.T, d Dialer) (*httptest.Server, *Router) {
	t.Helper()
	rt, err := New(Config{Dialer: d, Domain: "example.test"})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(rt.Front(apiMarker))
	t.Cleanup(func() { srv.Close(); rt.Close() })
	return srv, rt
}

// get sends a request for host (and headers) to the proxy.
func get(t *testing.T, srv *httptest.Server, method, host, path string, hdr map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Body.Close() })
	return res
}

func readAll(t *testing.T, r io.Reader) string {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return string(b)
}

func TestResolve(t *testing.T) {
	hdr := func(id, port string) http.Header {
		h := http.Header{}
		if id != "" {
			h.Set("E2b-Sandbox-Id", id)
		}
		if port != "" {
			h.Set("E2b-Sandbox-Port", port)
		}
		return h
	}
	for _, tc := range []struct {
		name, domain, host string
		header             http.Header
		want               target
		match              bool
		bad                bool // matched but 400
	}{
		{name: "host", domain: "example.test", host: "49983-isb1.example.test", want: target{id: "isb1", port: 49983}, match: true},
		{name: "host with port", domain: "example.test", host: "8000-isb1.example.test:443", want: target{id: "isb1", port: 8000}, match: true},
		{name: "legacy id suffix", domain: "example.test", host: "8000-isb1-6532622b.example.test", want: target{id: "isb1", port: 8000}, match: true},
		{name: "upper case", domain: "Example.TEST", host: "8000-ISB1.EXAMPLE.test", want: target{id: "isb1", port: 8000}, match: true},
		{name: "trailing dot domain", domain: "example.test.", host: "8000-isb1.example.test", want: target{id: "isb1", port: 8000}, match: true},
		{name: "domain port", domain: "example.test:8443", host: "8000-isb1.example.test:8443", want: target{id: "isb1", port: 8000}, match: true},
		{name: "domain port, host without", domain: "example.test:8443", host: "8000-isb1.example.test"},
		{name: "domain port, other port", domain: "example.test:8443", host: "8000-isb1.example.test:9999"},
		{name: "api host", domain: "example.test", host: "api.example.test"},
		{name: "api host with headers", domain: "example.test", host: "api.example.test", header: hdr("isb1", "49983")},
		{name: "bare domain", domain: "example.test", host: "example.test"},
		{name: "other domain", domain: "example.test", host: "8000-isb1.other.test"},
		{name: "suffix but not subdomain", domain: "example.test", host: "8000-isb1example.test"},
		{name: "no domain configured", host: "8000-isb1.example.test"},
		{name: "no dash", domain: "example.test", host: "www.example.test", match: true, bad: true},
		{name: "underscore", domain: "example.test", host: "8000_isb1.example.test", match: true, bad: true},
		{name: "port 0", domain: "example.test", host: "0-isb1.example.test", match: true, bad: true},
		{name: "port too big", domain: "example.test", host: "65536-isb1.example.test", match: true, bad: true},
		{name: "port sign", domain: "example.test", host: "+80-isb1.example.test", match: true, bad: true},
		{name: "empty id", domain: "example.test", host: "8000-.example.test", match: true, bad: true},
		{name: "bad id", domain: "example.test", host: "8000-isb%31.example.test", match: true, bad: true},
		{name: "deeper first label", domain: "example.test", host: "a.8000-isb1.example.test", match: true, bad: true},
		{name: "localhost headers", host: "localhost:3000", header: hdr("isb1", "49983"), want: target{id: "isb1", port: 49983}, match: true},
		{name: "ipv4 headers", domain: "example.test", host: "127.0.0.1:3000", header: hdr("isb1", "49999"), want: target{id: "isb1", port: 49999}, match: true},
		{name: "ipv6 headers", host: "[::1]:3000", header: hdr("isb1", "8000"), want: target{id: "isb1", port: 8000}, match: true},
		{name: "ipv6 no port", host: "[::1]", header: hdr("isb1", "8000"), want: target{id: "isb1", port: 8000}, match: true},
		{name: "sandbox. headers", host: "sandbox.e2b.app", header: hdr("isb1", "49983"), want: target{id: "isb1", port: 49983}, match: true},
		{name: "SANDBOX. headers", host: "SANDBOX.example.test", domain: "example.test", header: hdr("isb1", "49983"), want: target{id: "isb1", port: 49983}, match: true},
		{name: "localhost without headers", host: "localhost:3000"},
		{name: "only id header", host: "localhost", header: hdr("isb1", ""), match: true, bad: true},
		{name: "only port header", host: "localhost", header: hdr("", "49983"), match: true, bad: true},
		{name: "port header not int", host: "localhost", header: hdr("isb1", "http"), match: true, bad: true},
		{name: "port header 0", host: "localhost", header: hdr("isb1", "0"), match: true, bad: true},
		{name: "id header upper case", host: "localhost", header: hdr("ISB1", "80"), match: true, bad: true},
		{name: "host wins over headers", domain: "example.test", host: "8000-isb1.example.test", header: hdr("other", "1"),
			want: target{id: "isb1", port: 8000}, match: true},
		{name: "headers on other hosts ignored", domain: "example.test", host: "www.other.test", header: hdr("isb1", "1")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt, err := New(Config{Dialer: newDialer(), Domain: tc.domain})
			if err != nil {
				t.Fatal(err)
			}
			r := httptest.NewRequest("GET", "/", nil)
			r.Host = tc.host
			if tc.header != nil {
				r.Header = tc.header
			}
			got, ok, err := rt.resolve(r)
			if ok != tc.match || rt.Match(r) != tc.match {
				t.Fatalf("match = %v, want %v", ok, tc.match)
			}
			if (err != nil) != tc.bad {
				t.Fatalf("err = %v, want bad = %v", err, tc.bad)
			}
			if !tc.bad && got != tc.want {
				t.Errorf("target = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestProxy(t *testing.T) {
	d := newDialer()
	var seen http.Header
	var seenHost string
	d.serve(t, "isb1", 8000, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen, seenHost = r.Header.Clone(), r.Host
		w.Header().Set("X-Upstream", "yes")
		fmt.Fprintf(w, "hello %s", r.URL.RequestURI())
	}))
	srv, _ := startProxy(t, d)

	res := get(t, srv, "GET", "8000-isb1.example.test", "/a/b?c=d", map[string]string{
		"E2b-Traffic-Access-Token": "t", "Connection": "X-Hop", "X-Hop": "drop me", "X-Forwarded-For": "6.6.6.6",
	})
	if body := readAll(t, res.Body); res.StatusCode != 200 || body != "hello /a/b?c=d" {
		t.Fatalf("got %d %q", res.StatusCode, body)
	}
	if res.Header.Get("X-Upstream") != "yes" {
		t.Error("upstream header not passed back")
	}
	if seenHost != "8000-isb1.example.test" {
		t.Errorf("upstream Host = %q", seenHost)
	}
	if seen.Get("E2b-Traffic-Access-Token") != "t" {
		t.Error("E2B header not forwarded")
	}
	if seen.Get("X-Hop") != "" {
		t.Error("hop-by-hop header forwarded")
	}
	if got := seen.Get("X-Forwarded-For"); got != "127.0.0.1" {
		t.Errorf("X-Forwarded-For = %q, want the client address only", got)
	}

	// Header routing reaches the same port; the API keeps the rest.
	res = get(t, srv, "GET", srv.Listener.Addr().String(), "/x", map[string]string{"E2b-Sandbox-Id": "isb1", "E2b-Sandbox-Port": "8000"})
	if body := readAll(t, res.Body); body != "hello /x" {
		t.Errorf("header routing: %q", body)
	}
	for _, host := range []string{"api.example.test", srv.Listener.Addr().String(), "localhost"} {
		if res := get(t, srv, "GET", host, "/health", nil); res.Header.Get("X-Handled-By") != "api" {
			t.Errorf("Host %s: not handled by the api", host)
		}
	}
}

func TestProxyErrors(t *testing.T) {
	d := newDialer()
	d.serve(t, "isb1", 49983, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "envd") }))
	d.serve(t, "isp1", 49983, http.NotFoundHandler())
	d.pause("isp1")
	srv, _ := startProxy(t, d)

	for _, tc := range []struct {
		name, host, path string
		hdr              map[string]string
		status           int
		body             string
	}{
		{name: "unknown", host: "49983-nope.example.test", path: "/health", status: 502,
			body: `{"sandboxId":"nope","message":"The sandbox was not found","code":502}`},
		{name: "paused", host: "49983-isp1.example.test", path: "/health", status: 502,
			body: `{"sandboxId":"isp1","message":"The sandbox is paused","code":502}`},
		{name: "port closed", host: "8000-isb1.example.test", path: "/", status: 502,
			body: `{"sandboxId":"isb1","message":"The sandbox is running but port is not open","port":8000,"code":502}`},
		{name: "internal init", host: "49983-isb1.example.test", path: "/init", status: 404,
			body: `{"code":404,"message":"route not found"}`},
		{name: "internal via headers", host: "localhost", path: "/fsfreeze", status: 404,
			hdr:  map[string]string{"E2b-Sandbox-Id": "isb1", "E2b-Sandbox-Port": "49983"},
			body: `{"code":404,"message":"route not found"}`},
		{name: "internal unclean path", host: "49983-isb1.example.test", path: "//freeze/", status: 404,
			body: `{"code":404,"message":"route not found"}`},
		{name: "internal escaped path", host: "49983-isb1.example.test", path: "/%75nfreeze", status: 404,
			body: `{"code":404,"message":"route not found"}`},
		{name: "envd public route", host: "49983-isb1.example.test", path: "/health", status: 200, body: "envd"},
		{name: "bad port header", host: "localhost", path: "/", status: 400,
			hdr:  map[string]string{"E2b-Sandbox-Id": "isb1", "E2b-Sandbox-Port": "x"},
			body: `{"code":400,"message":"invalid port \"x\" in E2b-Sandbox-Port"}`},
		{name: "bad host", host: "www.example.test", path: "/", status: 400,
			body: `{"code":400,"message":"invalid sandbox host: want \u003cport\u003e-\u003csandboxID\u003e, got \"www\""}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := get(t, srv, "GET", tc.host, tc.path, tc.hdr)
			body := strings.TrimSuffix(readAll(t, res.Body), "\n")
			if res.StatusCode != tc.status || body != tc.body {
				t.Errorf("got %d %s\nwant %d %s", res.StatusCode, body, tc.status, tc.body)
			}
			if tc.status >= 400 && res.Header.Get("Content-Type") != "application/json" {
				t.Errorf("Content-Type %q", res.Header.Get("Content-Type"))
			}
		})
	}
}

// TestKilledAfterPooling: a kill cuts the pooled connection; the next
// request still gets the not-found body, not a generic proxy error.
func TestKilledAfterPooling(t *testing.T) {
	d := newDialer()
	d.serve(t, "isb1", 49983, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	srv, _ := startProxy(t, d)
	for range 2 {
		if res := get(t, srv, "POST", "49983-isb1.example.test", "/", nil); readAll(t, res.Body) != "ok" {
			t.Fatal("sandbox not reachable")
		}
	}
	d.kill("isb1")
	res := get(t, srv, "POST", "49983-isb1.example.test", "/", nil)
	body := strings.TrimSpace(readAll(t, res.Body))
	if want := `{"sandboxId":"isb1","message":"The sandbox was not found","code":502}`; res.StatusCode != 502 || body != want {
		t.Errorf("after kill: %d %s", res.StatusCode, body)
	}
}

func TestStreaming(t *testing.T) {
	d := newDialer()
	next := make(chan struct{})
	d.serve(t, "isb1", 49983, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/connect+json")
		for i := range 3 {
			fmt.Fprintf(w, "chunk%d\n", i)
			w.(http.Flusher).Flush()
			select {
			case <-next:
			case <-r.Context().Done():
				return
			}
		}
	}))
	srv, _ := startProxy(t, d)
	res := get(t, srv, "POST", "49983-isb1.example.test", "/process.Process/Start", nil)
	br := bufio.NewReader(res.Body)
	for i := range 3 {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("chunk %d: %v", i, err)
		}
		if want := fmt.Sprintf("chunk%d\n", i); line != want {
			t.Fatalf("got %q, want %q", line, want)
		}
		next <- struct{}{} // the upstream writes the next chunk only now
	}
	if rest := readAll(t, br); rest != "" {
		t.Errorf("trailing %q", rest)
	}
}

// TestRequestBodyStreaming: the request body reaches the sandbox as the
// client writes it, while the response streams back (full duplex).
func TestRequestBodyStreaming(t *testing.T) {
	d := newDialer()
	d.serve(t, "isb1", 8000, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).EnableFullDuplex()
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		br := bufio.NewReader(r.Body)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			io.WriteString(w, "echo "+line)
			w.(http.Flusher).Flush()
		}
	}))
	srv, _ := startProxy(t, d)
	pr, pw := io.Pipe()
	req, _ := http.NewRequest("POST", srv.URL+"/", pr)
	req.Host = "8000-isb1.example.test"
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	br := bufio.NewReader(res.Body)
	for i := range 3 {
		fmt.Fprintf(pw, "line%d\n", i)
		got, err := br.ReadString('\n')
		if err != nil || got != fmt.Sprintf("echo line%d\n", i) {
			t.Fatalf("round %d: %q, %v", i, got, err)
		}
	}
	pw.Close()
}

func TestWebSocket(t *testing.T) {
	d := newDialer()
	d.serve(t, "isb1", 6080, websocket.Handler(func(ws *websocket.Conn) { io.Copy(ws, ws) }))
	srv, _ := startProxy(t, d)
	ws := dialWebSocket(t, srv, "6080-isb1.example.test", "/websockify")
	for _, msg := range []string{"hello", "world"} {
		if err := websocket.Message.Send(ws, msg); err != nil {
			t.Fatal(err)
		}
		var got string
		ws.SetReadDeadline(time.Now().Add(5 * time.Second))
		if err := websocket.Message.Receive(ws, &got); err != nil || got != msg {
			t.Fatalf("echo: %q, %v", got, err)
		}
	}
}

// dialWebSocket opens a WebSocket through srv to host and path; it is
// closed when the test ends.
func dialWebSocket(t *testing.T, srv *httptest.Server, host, path string) *websocket.Conn {
	t.Helper()
	cfg, err := websocket.NewConfig("ws://"+host+path, "http://"+host+"/")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	ws, err := websocket.NewClient(cfg, conn)
	if err != nil {
		t.Fatalf("upgrade through the proxy: %v", err)
	}
	t.Cleanup(func() { ws.Close() })
	return ws
}

// TestUpstreamDies: a sandbox killed mid-response resets the client's
// response instead of ending it cleanly.
func TestUpstreamDies(t *testing.T) {
	d := newDialer()
	started := make(chan struct{})
	d.serve(t, "isb1", 49983, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "first\n")
		w.(http.Flusher).Flush()
		close(started)
		<-r.Context().Done()
	}))
	srv, _ := startProxy(t, d)
	res := get(t, srv, "POST", "49983-isb1.example.test", "/process.Process/Start", nil)
	br := bufio.NewReader(res.Body)
	if line, err := br.ReadString('\n'); err != nil || line != "first\n" {
		t.Fatalf("first chunk: %q, %v", line, err)
	}
	<-started
	d.kill("isb1")
	_, err := io.ReadAll(br)
	if err == nil {
		t.Fatal("response ended cleanly after the sandbox died")
	}
	if !errors.Is(err, io.ErrUnexpectedEOF) && !strings.Contains(err.Error(), "reset") {
		t.Logf("client error: %v", err) // any error will do; say which
	}
}

func TestNewValidates(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Error("New without a Dialer succeeded")
	}
	if _, err := New(Config{Dialer: newDialer(), Domain: "https://x"}); err == nil {
		t.Error("New with a URL as domain succeeded")
	}
}

// TestProxyErrorProbe: a transport error that does not say why (a pooled
// connection cut just before use) is classified by dialing again.
func TestProxyErrorProbe(t *testing.T) {
	d := newDialer()
	d.serve(t, "isb1", 8000, http.NotFoundHandler())
	d.serve(t, "isp1", 8000, http.NotFoundHandler())
	d.pause("isp1")
	rt, err := New(Config{Dialer: d})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		t    target
		want string
	}{
		{target{id: "gone", port: 8000}, `{"sandboxId":"gone","message":"The sandbox was not found","code":502}`},
		{target{id: "isp1", port: 8000}, `{"sandboxId":"isp1","message":"The sandbox is paused","code":502}`},
		{target{id: "isb1", port: 9000}, `{"sandboxId":"isb1","message":"The sandbox is running but port is not open","port":9000,"code":502}`},
		{target{id: "isb1", port: 8000}, `{"sandboxId":"isb1","message":"The sandbox did not answer","code":502}`},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r = r.WithContext(context.WithValue(r.Context(), targetKey{}, tc.t))
		w := httptest.NewRecorder()
		rt.proxyError(w, r, io.ErrUnexpectedEOF)
		if got := strings.TrimSpace(w.Body.String()); w.Code != 502 || got != tc.want {
			t.Errorf("%+v: %d %s, want 502 %s", tc.t, w.Code, got, tc.want)
		}
	}
}

// ingress is a fake IngressPolicies.
type ingress map[string]sandbox.Ingress

func (in ingress) Ingress(id string) (sandbox.Ingress, error) { return in[id], nil }

func TestTrafficAccessToken(t *testing.T) {
	d := newDialer()
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })
	for _, port := range []int{8000, EnvdPort} {
		d.serve(t, "iprivate", port, ok)
		d.serve(t, "ipublic", port, ok)
	}
	d.serve(t, "iprivate", template.DevToolsPort, fakeChromium())
	d.serve(t, "isecure", template.DevToolsPort, fakeChromium())
	rt, err := New(Config{Dialer: d, Ingress: ingress{"iprivate": {TrafficToken: "secret"}, "isecure": {AccessToken: "envd-secret"}}, Domain: "example.test"})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(rt.Front(apiMarker))
	t.Cleanup(func() { srv.Close(); rt.Close() })

	tests := []struct {
		name     string
		host     string
		path     string // default "/"
		token    string
		wantCode int
		wantBody string
	}{
		{name: "private port without token", host: "8000-iprivate.example.test", wantCode: 403,
			wantBody: `{"sandboxId":"iprivate","message":"missing traffic access token: send it in the e2b-traffic-access-token header","code":403}`},
		{name: "private port with a wrong token", host: "8000-iprivate.example.test", token: "nope", wantCode: 403,
			wantBody: `{"sandboxId":"iprivate","message":"invalid traffic access token","code":403}`},
		{name: "private port with the token", host: "8000-iprivate.example.test", token: "secret", wantCode: 200, wantBody: "ok"},
		{name: "envd port needs no traffic token", host: "49983-iprivate.example.test", wantCode: 200, wantBody: "ok"},
		{name: "public sandbox", host: "8000-ipublic.example.test", wantCode: 200, wantBody: "ok"},
		// Chromium's DevTools port is a port like any other (docs/BROWSER.md).
		{name: "DevTools port without token", host: "9222-iprivate.example.test", path: "/json/version", wantCode: 403,
			wantBody: `{"sandboxId":"iprivate","message":"missing traffic access token: send it in the e2b-traffic-access-token header","code":403}`},
		{name: "DevTools port with the token", host: "9222-iprivate.example.test", path: "/json/version", token: "secret", wantCode: 200,
			wantBody: `{"Browser":"Chrome/140","webSocketDebuggerUrl":"ws://9222-iprivate.example.test/devtools/browser/b1"}`},
		{name: "DevTools port of a secure sandbox with public traffic", host: "9222-isecure.example.test", path: "/json/version", wantCode: 200,
			wantBody: `{"Browser":"Chrome/140","webSocketDebuggerUrl":"ws://9222-isecure.example.test/devtools/browser/b1"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hdr := map[string]string{}
			if tt.token != "" {
				hdr[TrafficTokenHeader] = tt.token
			}
			res := get(t, srv, "GET", tt.host, cmp.Or(tt.path, "/"), hdr)
			if body := strings.TrimSpace(readAll(t, res.Body)); res.StatusCode != tt.wantCode || body != tt.wantBody {
				t.Errorf("got %d %s, want %d %s", res.StatusCode, body, tt.wantCode, tt.wantBody)
			}
		})
	}
}

func TestMaskRequestHost(t *testing.T) {
	d := newDialer()
	var seen string
	echoHost := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen = r.Host })
	d.serve(t, "imasked", 8000, echoHost)
	d.serve(t, "imasked", EnvdPort, echoHost)
	rt, err := New(Config{Dialer: d, Ingress: ingress{"imasked": {MaskRequestHost: "app.internal:${PORT}"}}, Domain: "example.test"})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(rt.Front(apiMarker))
	t.Cleanup(func() { srv.Close(); rt.Close() })

	get(t, srv, "GET", "8000-imasked.example.test", "/", nil)
	if seen != "app.internal:8000" {
		t.Errorf("user port: upstream Host = %q, want app.internal:8000", seen)
	}
	get(t, srv, "GET", "49983-imasked.example.test", "/", nil)
	if seen != "49983-imasked.example.test" {
		t.Errorf("envd port: upstream Host = %q, want the client's", seen)
	}
}
