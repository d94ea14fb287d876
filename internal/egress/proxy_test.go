package egress

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/net/dns/dnsmessage"
)

// proxyZone is the fake upstream's view of the internet: names to
// addresses that this package treats as public (benchmark 198.18.0.0/15,
// TEST-NET-3) or private. No address in it is ever connected to: the
// test Dial maps a few to loopback servers and refuses the rest.
var proxyZone = map[string][]string{
	"web.test.":    {"198.18.0.10"},
	"example.com.": {"198.18.0.11"}, // the name in httptest's certificate
	"denied.test.": {"198.18.0.12"},
	"rebind.test.": {"10.0.0.5"},
	"multi.test.":  {"198.18.0.20", "198.18.0.10"},
	"down.test.":   {"198.18.0.30"},
}

// proxyUpstream answers A queries from proxyZone, in process.
var proxyUpstream = upstreamFunc(func(_ context.Context, q dnsmessage.Message) (dnsmessage.Message, error) {
	question := q.Questions[0]
	m := dnsmessage.Message{Header: dnsmessage.Header{ID: q.Header.ID, Response: true}, Questions: q.Questions}
	addrs, ok := proxyZone[strings.ToLower(question.Name.String())]
	if !ok {
		m.Header.RCode = dnsmessage.RCodeNameError
	}
	for _, s := range addrs {
		if question.Type == dnsmessage.TypeA {
			hdr := dnsmessage.ResourceHeader{Name: question.Name, Class: dnsmessage.ClassINET, TTL: 60}
			m.Answers = append(m.Answers, dnsmessage.Resource{Header: hdr, Body: &dnsmessage.AResource{A: netip.MustParseAddr(s).As4()}})
		}
	}
	return m, nil
})

// proxyCeiling allows the names of proxyZone but denied.test.
func proxyCeiling() Ceiling {
	c := DefaultCeiling()
	c.AllowDomains = append(c.AllowDomains, "web.test", "example.com", "rebind.test", "multi.test", "down.test", "nx.test")
	return c
}

// rawUpstream is a TCP server on 127.0.0.1 that records everything a
// connection sends until it half-closes, then answers rawResponse.
type rawUpstream struct {
	addr string
	got  chan []byte
}

const rawResponse = "HTTP/1.1 200 OK\r\nContent-Length: 8\r\nConnection: close\r\n\r\nupstream"

func startRawUpstream(t *testing.T) *rawUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &rawUpstream{addr: ln.Addr().String(), got: make(chan []byte, 10)}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				b, err := io.ReadAll(c)
				if err != nil {
					return
				}
				u.got <- b
				io.WriteString(c, rawResponse)
			})
		}
	})
	return u
}

// proxyEnv is a Proxy on 127.0.0.1 whose connections all claim to have been
// headed for orig, and whose Dial reaches loopback servers only.
type proxyEnv struct {
	addr   string
	ring   *Ring
	mu     sync.Mutex
	dialed []string // guarded by mu
	cancel context.CancelFunc
	done   chan error
}

// startProxy serves a Proxy for pol; routes maps dialed addresses
// ("198.18.0.10:80") to loopback ones, and every other address is refused.
func startProxy(t *testing.T, pol Policy, orig netip.AddrPort, routes map[string]string, mod func(*ProxyConfig)) *proxyEnv {
	t.Helper()
	env := &proxyEnv{ring: NewRing(100), done: make(chan error, 1)}
	cfg := ProxyConfig{
		Config: Config{Policy: func() Policy { return pol }, Upstream: proxyUpstream, Audit: env.ring, Timeout: 2 * time.Second},
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			env.mu.Lock()
			env.dialed = append(env.dialed, addr)
			env.mu.Unlock()
			to, ok := routes[addr]
			if !ok {
				return nil, fmt.Errorf("dial %s %s: connection refused (test)", network, addr)
			}
			var d net.Dialer
			return d.DialContext(ctx, network, to)
		},
		OriginalDst:      func(net.Conn) (netip.AddrPort, error) { return orig, nil },
		HandshakeTimeout: 2 * time.Second,
		DialTimeout:      2 * time.Second,
	}
	if mod != nil {
		mod(&cfg)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	env.addr = ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	env.cancel = cancel
	p := NewProxy(cfg)
	go func() { env.done <- p.Serve(ctx, ln) }()
	t.Cleanup(func() { env.stop(t) })
	return env
}

// stop ends Serve and waits for it; it may be called more than once.
func (env *proxyEnv) stop(t *testing.T) {
	t.Helper()
	if env.cancel == nil {
		return
	}
	env.cancel()
	env.cancel = nil
	select {
	case err := <-env.done:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
}

func (env *proxyEnv) dials() []string {
	env.mu.Lock()
	defer env.mu.Unlock()
	return append([]string(nil), env.dialed...)
}

// proxyExchange sends req to the proxy, half-closes, and returns all it gets
// back: the client side of one proxied connection.
func proxyExchange(t *testing.T, addr, req string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	// A refused connection may be closed before the request is written:
	// whatever was read back is the answer, a reset included.
	io.WriteString(c, req)
	c.(*net.TCPConn).CloseWrite()
	b, _ := io.ReadAll(c)
	return string(b)
}

// tlsGet fetches https://serverName/ through the proxy with the client of
// the httptest server srv, and returns the body or the error.
func tlsGet(t *testing.T, addr string, srv *httptest.Server, serverName string) string {
	t.Helper()
	tr := srv.Client().Transport.(*http.Transport).Clone()
	tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
	tr.DisableKeepAlives = true
	if serverName == "" {
		// No SNI: Go sends none when ServerName is empty and the URL host
		// is an IP literal.
		tr.TLSClientConfig.InsecureSkipVerify = true
		serverName = "198.18.0.11"
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	resp, err := client.Get("https://" + serverName + "/")
	if err != nil {
		return "error"
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "error"
	}
	return string(b)
}

func httpResponse(code int, body string) string {
	return fmt.Sprintf("HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		code, http.StatusText(code), len(body), body)
}

func TestProxy(t *testing.T) {
	raw := startRawUpstream(t)
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "tls:%s", r.Host)
	}))
	t.Cleanup(tlsSrv.Close)
	tlsAddr := strings.TrimPrefix(tlsSrv.URL, "https://")
	routes := map[string]string{
		"198.18.0.10:80":  raw.addr,
		"198.18.0.10:443": raw.addr,
		"198.18.0.11:443": tlsAddr,
	}
	post := "POST /upload HTTP/1.1\r\nHost: web.test\r\nContent-Length: 11\r\n\r\nhello\x00world"
	allowNet := func(c Ceiling) Ceiling { c.AllowCIDRs = []string{"198.18.0.0/24"}; return c }
	mayWiden := func(c Ceiling) Ceiling { c.SandboxMayWiden = true; return c }
	tests := []struct {
		name        string
		ceiling     Ceiling
		network     string
		internetOff bool
		orig        string
		// send is what the client sends; with tlsName set it is an HTTPS
		// GET with that SNI ("-" for none) instead.
		send    string
		tlsName string
		want    string // what the client gets back
		// wantUpstream is what the raw upstream must receive; "" if it
		// must not be reached, "=" for exactly send.
		wantUpstream string
		wantDials    []string
		wantEvent    eventKey
		wantPort     uint16
	}{
		{
			name: "allowed name over HTTP, to an address it does not have",
			orig: "203.0.113.66:80", send: post, want: rawResponse, wantUpstream: "=",
			wantDials: []string{"198.18.0.10:80"},
			wantEvent: eventKey{EventProxy, "web.test", "", "198.18.0.10", true, "ceiling:web.test"},
		},
		{
			name: "Host with a port and in upper case dials the original port",
			orig: "198.18.0.10:80", send: "GET / HTTP/1.1\r\nHost: WEB.test:8080\r\n\r\n", want: rawResponse, wantUpstream: "=",
			wantDials: []string{"198.18.0.10:80"},
			wantEvent: eventKey{EventProxy, "web.test", "", "198.18.0.10", true, "ceiling:web.test"},
		},
		{
			name: "absolute-form request target names the host",
			orig: "198.18.0.99:80", send: "GET http://web.test/x HTTP/1.1\r\nHost: denied.test\r\n\r\n", want: rawResponse, wantUpstream: "=",
			wantDials: []string{"198.18.0.10:80"},
			wantEvent: eventKey{EventProxy, "web.test", "", "198.18.0.10", true, "ceiling:web.test"},
		},
		{
			name: "allowed SNI completes the TLS handshake upstream",
			orig: "203.0.113.66:443", tlsName: "example.com", want: "tls:example.com",
			wantDials: []string{"198.18.0.11:443"},
			wantEvent: eventKey{EventProxy, "example.com", "", "198.18.0.11", true, "ceiling:example.com"},
		},
		{
			name: "denied name over HTTP gets 403 with the rule",
			orig: "198.18.0.12:80", send: "GET / HTTP/1.1\r\nHost: denied.test\r\n\r\n",
			want:      httpResponse(403, "agent-sandbox: egress to denied.test denied (rule ceiling:allowlist)\n"),
			wantEvent: eventKey{EventProxy, "denied.test", "", "", false, RuleAllowlist},
		},
		{
			name:    "sandbox denyOut name gets 403",
			network: `{"denyOut":["web.test"]}`,
			orig:    "198.18.0.10:80", send: post,
			want:      httpResponse(403, "agent-sandbox: egress to web.test denied (rule denyOut:web.test)\n"),
			wantEvent: eventKey{EventProxy, "web.test", "", "", false, "denyOut:web.test"},
		},
		{
			name: "denied SNI is closed",
			orig: "198.18.0.12:443", tlsName: "denied.test", want: "error",
			wantEvent: eventKey{EventProxy, "denied.test", "", "", false, RuleAllowlist},
		},
		{
			name:    "a name decides even when the address is allowed",
			ceiling: allowNet(proxyCeiling()),
			orig:    "198.18.0.10:80", send: "GET / HTTP/1.1\r\nHost: denied.test\r\n\r\n",
			want:      httpResponse(403, "agent-sandbox: egress to denied.test denied (rule ceiling:allowlist)\n"),
			wantEvent: eventKey{EventProxy, "denied.test", "", "", false, RuleAllowlist},
		},
		{
			name: "IP literal Host is decided by the original address: denied by default",
			orig: "198.18.0.10:80", send: "GET / HTTP/1.1\r\nHost: 198.18.0.10\r\n\r\n",
			want:      httpResponse(403, "agent-sandbox: egress to 198.18.0.10 denied (rule ceiling:allowlist)\n"),
			wantEvent: eventKey{EventProxy, "198.18.0.10", "", "198.18.0.10", false, RuleAllowlist},
		},
		{
			name:    "IP literal Host allowed by a ceiling CIDR dials the original address",
			ceiling: allowNet(proxyCeiling()),
			orig:    "198.18.0.10:80", send: "GET / HTTP/1.1\r\nHost: 203.0.113.5\r\n\r\n", want: rawResponse, wantUpstream: "=",
			wantDials: []string{"198.18.0.10:80"},
			wantEvent: eventKey{EventProxy, "203.0.113.5", "", "198.18.0.10", true, "ceiling:198.18.0.0/24"},
		},
		{
			name:    "IP literal Host allowed by a sandbox CIDR the ceiling lets widen",
			ceiling: mayWiden(proxyCeiling()), network: `{"allowOut":["198.18.0.10"]}`,
			orig: "198.18.0.10:80", send: "GET / HTTP/1.1\r\nHost: [2001:db8::1]:80\r\n\r\n", want: rawResponse, wantUpstream: "=",
			wantDials: []string{"198.18.0.10:80"},
			wantEvent: eventKey{EventProxy, "2001:db8::1", "", "198.18.0.10", true, "allowOut:198.18.0.10"},
		},
		{
			name: "HTTP/1.0 without Host is decided by address",
			orig: "198.18.0.10:80", send: "GET / HTTP/1.0\r\n\r\n",
			want:      httpResponse(403, "agent-sandbox: egress to 198.18.0.10 denied (rule ceiling:allowlist)\n"),
			wantEvent: eventKey{EventProxy, "", "", "198.18.0.10", false, RuleAllowlist},
		},
		{
			name: "another protocol is decided by address: denied and closed",
			orig: "198.18.0.10:443", send: "\x00\x01binary",
			wantEvent: eventKey{EventProxy, "", "", "198.18.0.10", false, RuleAllowlist},
		},
		{
			name:    "another protocol is decided by address: allowed, bytes exact",
			ceiling: allowNet(proxyCeiling()),
			orig:    "198.18.0.10:443", send: "\x00\x01binary\xff" + strings.Repeat("x", 100000), want: rawResponse, wantUpstream: "=",
			wantDials: []string{"198.18.0.10:443"},
			wantEvent: eventKey{EventProxy, "", "", "198.18.0.10", true, "ceiling:198.18.0.0/24"},
		},
		{
			name:    "garbage that looks like a method is decided by address",
			ceiling: allowNet(proxyCeiling()),
			orig:    "198.18.0.10:80", send: "HELLO\r\nthere\r\n", want: rawResponse, wantUpstream: "=",
			wantDials: []string{"198.18.0.10:80"},
			wantEvent: eventKey{EventProxy, "", "", "198.18.0.10", true, "ceiling:198.18.0.0/24"},
		},
		{
			name:    "a request head over the size limit is decided by address",
			ceiling: allowNet(proxyCeiling()),
			orig:    "198.18.0.10:80", send: "GET / HTTP/1.1\r\nHost: web.test\r\nX-Big: " + strings.Repeat("x", maxHeadSize) + "\r\n\r\n",
			want: rawResponse, wantUpstream: "=",
			wantDials: []string{"198.18.0.10:80"},
			wantEvent: eventKey{EventProxy, "", "", "198.18.0.10", true, "ceiling:198.18.0.0/24"},
		},
		{
			name:    "TLS without SNI is decided by address",
			ceiling: allowNet(proxyCeiling()),
			orig:    "198.18.0.11:443", tlsName: "-", want: "tls:198.18.0.11",
			wantDials: []string{"198.18.0.11:443"},
			wantEvent: eventKey{EventProxy, "", "", "198.18.0.11", true, "ceiling:198.18.0.0/24"},
		},
		{
			name:    "DNS rebinding: an allowed name with only a private address is denied",
			ceiling: allowNet(proxyCeiling()),
			orig:    "198.18.0.10:80", send: "GET / HTTP/1.1\r\nHost: rebind.test\r\n\r\n",
			want:      httpResponse(403, "agent-sandbox: egress to rebind.test denied (rule private:private 10.0.0.0/8)\n"),
			wantEvent: eventKey{EventProxy, "rebind.test", "", "10.0.0.5", false, "private:private 10.0.0.0/8"},
		},
		{
			name: "addresses are dialed in order until one connects",
			orig: "198.18.0.99:80", send: "GET / HTTP/1.1\r\nHost: multi.test\r\n\r\n", want: rawResponse, wantUpstream: "=",
			wantDials: []string{"198.18.0.20:80", "198.18.0.10:80"},
			wantEvent: eventKey{EventProxy, "multi.test", "", "198.18.0.10", true, "ceiling:multi.test"},
		},
		{
			name: "dial failure gets 502",
			orig: "198.18.0.30:80", send: "GET / HTTP/1.1\r\nHost: down.test\r\n\r\n",
			want:      httpResponse(502, "agent-sandbox: cannot connect to down.test:80\n"),
			wantDials: []string{"198.18.0.30:80"},
			wantEvent: eventKey{EventProxy, "down.test", "", "198.18.0.30", true, "ceiling:down.test (dial failed)"},
		},
		{
			name: "lookup failure gets 502",
			orig: "198.18.0.30:80", send: "GET / HTTP/1.1\r\nHost: nx.test\r\n\r\n",
			want:      httpResponse(502, "agent-sandbox: cannot resolve nx.test\n"),
			wantEvent: eventKey{EventProxy, "nx.test", "", "", true, "ceiling:nx.test (lookup failed)"},
		},
		{
			name:    "E2B's only-this-host idiom: the allowOut name is reached",
			ceiling: mayWiden(proxyCeiling()), network: `{"allowOut":["web.test"],"denyOut":["0.0.0.0/0"]}`,
			orig: "198.18.0.10:80", send: post, want: rawResponse, wantUpstream: "=",
			wantDials: []string{"198.18.0.10:80"},
			wantEvent: eventKey{EventProxy, "web.test", "", "198.18.0.10", true, "allowOut:web.test"},
		},
		{
			name:    "E2B's only-this-host idiom: a name the ceiling allows is not",
			ceiling: mayWiden(proxyCeiling()), network: `{"allowOut":["web.test"],"denyOut":["0.0.0.0/0"]}`,
			orig: "198.18.0.10:80", send: "GET / HTTP/1.1\r\nHost: multi.test\r\n\r\n",
			want:      httpResponse(403, "agent-sandbox: egress to multi.test denied (rule denyOut:0.0.0.0/0)\n"),
			wantEvent: eventKey{EventProxy, "multi.test", "", "198.18.0.20,198.18.0.10", false, "denyOut:0.0.0.0/0"},
		},
		{
			name:        "internet off denies even names the ceiling allows",
			internetOff: true,
			orig:        "198.18.0.10:80", send: post,
			want:      httpResponse(403, "agent-sandbox: egress to web.test denied (rule allow_internet_access:false)\n"),
			wantEvent: eventKey{EventProxy, "web.test", "", "", false, RuleInternetOff},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.ceiling
			if c.AllowDomains == nil {
				c = proxyCeiling()
			}
			var internet *bool
			if tt.internetOff {
				internet = ptr(false)
			}
			pol := mustPolicy(t, c, tt.network, internet)
			orig := netip.MustParseAddrPort(tt.orig)
			env := startProxy(t, pol, orig, routes, nil)
			var got string
			switch tt.tlsName {
			case "":
				got = proxyExchange(t, env.addr, tt.send)
			case "-":
				got = tlsGet(t, env.addr, tlsSrv, "")
			default:
				got = tlsGet(t, env.addr, tlsSrv, tt.tlsName)
			}
			if got != tt.want {
				t.Errorf("client got %q, want %q", got, tt.want)
			}
			wantUp := tt.wantUpstream
			if wantUp == "=" {
				wantUp = tt.send
			}
			select {
			case b := <-raw.got:
				if wantUp == "" {
					t.Errorf("upstream reached, got %q", b)
				} else if !bytes.Equal(b, []byte(wantUp)) {
					t.Errorf("upstream got %q, want %q", b, wantUp)
				}
			default:
				if wantUp != "" {
					t.Error("upstream not reached")
				}
			}
			env.stop(t)
			if diff := cmp.Diff(tt.wantDials, env.dials()); diff != "" {
				t.Errorf("dials (-want +got):\n%s", diff)
			}
			events, _ := env.ring.Since(0, 0)
			if diff := cmp.Diff([]eventKey{tt.wantEvent}, keys(events)); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			if len(events) == 1 && events[0].Port != orig.Port() {
				t.Errorf("event port = %d, want %d", events[0].Port, orig.Port())
			}
		})
	}
}

// TestProxyHandshakeTimeout: a client that sends nothing (or a server-first
// protocol) is decided by address once the handshake timeout passes.
func TestProxyHandshakeTimeout(t *testing.T) {
	raw := startRawUpstream(t)
	c := proxyCeiling()
	c.AllowCIDRs = []string{"198.18.0.0/24"}
	orig := netip.MustParseAddrPort("198.18.0.10:25")
	env := startProxy(t, mustPolicy(t, c, "", nil), orig, map[string]string{"198.18.0.10:25": raw.addr},
		func(c *ProxyConfig) { c.HandshakeTimeout = 100 * time.Millisecond })
	conn, err := net.Dial("tcp", env.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	time.Sleep(300 * time.Millisecond) // past the timeout: connected by now
	io.WriteString(conn, "EHLO late\r\n")
	conn.(*net.TCPConn).CloseWrite()
	b, err := io.ReadAll(conn)
	if err != nil || string(b) != rawResponse {
		t.Fatalf("got %q, %v; want the upstream's answer", b, err)
	}
	if got := <-raw.got; string(got) != "EHLO late\r\n" {
		t.Errorf("upstream got %q", got)
	}
	env.stop(t)
	events, _ := env.ring.Since(0, 0)
	want := []eventKey{{EventProxy, "", "", "198.18.0.10", true, "ceiling:198.18.0.0/24"}}
	if diff := cmp.Diff(want, keys(events)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

func TestProxyMaxConns(t *testing.T) {
	orig := netip.MustParseAddrPort("198.18.0.10:80")
	env := startProxy(t, mustPolicy(t, proxyCeiling(), "", nil), orig, nil, func(c *ProxyConfig) { c.MaxConns = 1 })
	first, err := net.Dial("tcp", env.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	// The first connection holds the only slot while the proxy waits for
	// its request; the second, accepted after it, is closed at once.
	second, err := net.Dial("tcp", env.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	second.SetDeadline(time.Now().Add(time.Second)) // well below HandshakeTimeout
	if n, err := second.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("second connection: read %d, %v; want it closed", n, err)
	}
	got := proxyExchange(t, env.addr, "GET / HTTP/1.1\r\nHost: denied.test\r\n\r\n")
	if got != "" {
		t.Errorf("third connection, while the first is open, got %q; want it closed", got)
	}
	// Once the first is done, its slot is free again.
	first.Close()
	deadline := time.Now().Add(5 * time.Second)
	want := httpResponse(403, "agent-sandbox: egress to denied.test denied (rule ceiling:allowlist)\n")
	for {
		if got = proxyExchange(t, env.addr, "GET / HTTP/1.1\r\nHost: denied.test\r\n\r\n"); got == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the first closed, got %q, want %q", got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
	env.stop(t)
	events, _ := env.ring.Since(0, 0)
	var busy, first0, denied int
	for _, k := range keys(events) {
		switch k {
		case eventKey{EventProxy, "", "", "198.18.0.10", false, RuleProxyBusy}:
			busy++
		case eventKey{EventProxy, "", "", "198.18.0.10", false, RuleAllowlist}:
			first0++
		case eventKey{EventProxy, "denied.test", "", "", false, RuleAllowlist}:
			denied++
		default:
			t.Errorf("unexpected event %+v", k)
		}
	}
	if busy < 2 || first0 != 1 || denied != 1 {
		t.Errorf("events: %d busy (want ≥ 2), %d for the first (want 1), %d denied (want 1)", busy, first0, denied)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestProxyServeEnds: cancelling Serve closes the listener and every live
// connection, spliced or still being read, and leaves no goroutine behind.
func TestProxyServeEnds(t *testing.T) {
	raw := startRawUpstream(t)
	orig := netip.MustParseAddrPort("198.18.0.99:80")
	env := startProxy(t, mustPolicy(t, proxyCeiling(), "", nil), orig, map[string]string{"198.18.0.10:80": raw.addr}, nil)

	spliced, err := net.Dial("tcp", env.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer spliced.Close()
	// No half-close: the upstream keeps waiting, so the splice stays up.
	io.WriteString(spliced, "GET / HTTP/1.1\r\nHost: web.test\r\n\r\n")
	waitFor(t, "the connection to be spliced", func() bool {
		events, _ := env.ring.Since(0, 0)
		return len(events) == 1
	})
	sniffing, err := net.Dial("tcp", env.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer sniffing.Close()
	io.WriteString(sniffing, "GET / HTTP/1.1\r\n") // an unfinished head

	env.stop(t)
	for _, c := range []net.Conn{spliced, sniffing} {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadAll(c); isTimeout(err) {
			t.Errorf("%s: still open after Serve returned", c.LocalAddr())
		}
	}
	if _, err := net.Dial("tcp", env.addr); err == nil {
		t.Error("listener still open after Serve returned")
	}
	waitFor(t, "the proxy's goroutines to end", func() bool {
		buf := make([]byte, 1<<20)
		stacks := string(buf[:runtime.Stack(buf, true)])
		return !strings.Contains(stacks, "egress.(*Proxy)") && !strings.Contains(stacks, "egress.splice") &&
			!strings.Contains(stacks, "egress.copyHalf")
	})
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestProxyServeListenerFails(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := NewProxy(ProxyConfig{Config: Config{Upstream: proxyUpstream}})
	done := make(chan error, 1)
	go func() { done <- p.Serve(context.Background(), ln) }()
	ln.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("Serve = %v, want an error wrapping net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after its listener closed")
	}
}

// TestProxyOriginalDstFails: a connection whose destination is unknown is
// closed and logged, not audited: there is nothing to decide on.
func TestProxyOriginalDstFails(t *testing.T) {
	env := startProxy(t, mustPolicy(t, proxyCeiling(), "", nil), netip.AddrPort{}, nil, func(c *ProxyConfig) {
		c.OriginalDst = func(net.Conn) (netip.AddrPort, error) { return netip.AddrPort{}, errors.New("no conntrack entry") }
	})
	if got := proxyExchange(t, env.addr, "GET / HTTP/1.1\r\nHost: web.test\r\n\r\n"); got != "" {
		t.Errorf("got %q, want the connection closed", got)
	}
	env.stop(t)
	if events, _ := env.ring.Since(0, 0); len(events) != 0 {
		t.Errorf("events = %+v, want none", events)
	}
}

// TestOriginalDst checks the cases that need no redirect: a connection that
// is not TCP, and one that was not redirected (no conntrack entry, or one
// whose original destination is where it arrived).
func TestOriginalDst(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if _, err := OriginalDst(a); err == nil {
		t.Error("OriginalDst(pipe): no error")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := OriginalDst(s)
	switch {
	case runtime.GOOS != "linux":
		if !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("OriginalDst = %v, %v; want errors.ErrUnsupported", got, err)
		}
	case err == nil && got.String() != ln.Addr().String():
		t.Errorf("OriginalDst = %v, want %v (or an error)", got, ln.Addr())
	}
}
