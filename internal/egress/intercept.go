package egress

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"sync"
	"time"
)

// Bounds of an intercepted connection.
const (
	// interceptIdle closes a kept-alive connection, to the sandbox or
	// upstream, that carries no request for this long.
	interceptIdle = 90 * time.Second
	// maxUpstreamConns bounds the upstream connections one intercepted
	// connection holds (its requests come one at a time; an upgrade keeps
	// one).
	maxUpstreamConns = 2
	// maxUpstreamHeader bounds a response head from upstream.
	maxUpstreamHeader = 1 << 20
)

// forwardedHeaders are the request headers httputil.ReverseProxy drops
// before Rewrite; the blind path passes them on as the client sent them,
// and so does interception.
var forwardedHeaders = []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"}

// interception says whether serveConn intercepts a connection that named
// name and reached upstream (allowed): only a name with a header rule
// that sets something is, over HTTP/1 or TLS (with a CA to sign for it).
// It returns the rule's domain pattern, and whether a TLS connection must
// be refused for want of a CA.
func (p *Proxy) interception(h hello, allowed bool) (pattern string, refuse bool) {
	if !allowed || h.name == "" || !(h.http || h.tls) {
		return "", false
	}
	if _, err := netip.ParseAddr(h.name); err == nil {
		return "", false // decided by address; rules are for names
	}
	headers, pattern, ok := p.cfg.policy().HeaderRule(h.name)
	if !ok || len(headers) == 0 {
		return "", false
	}
	return pattern, h.tls && p.cfg.CA == nil
}

// intercept serves c, a connection to a name that header rules apply to,
// as an HTTP/1.1 reverse proxy: TLS is terminated with a certificate the
// sandbox's CA signs for the name; each request must be for that name
// (else 421: the rules go with the name the connection was decided on);
// it gets the headers of the rule that matches the name now (a live PUT
// applies from the next request) and is sent upstream over up, the
// connection serveConn made and audited, or over further ones made the
// same way, verifying the server's certificate against UpstreamRoots.
// The header values live only here, on the host. It returns once c is
// closed and every request on it has ended.
func (p *Proxy) intercept(ctx context.Context, c net.Conn, h hello, orig netip.AddrPort, up net.Conn) {
	name, _ := NormalizeName(h.name) // the name serveConn decided on
	first := make(chan net.Conn, 1)
	first <- up
	defer func() {
		select {
		case unused := <-first:
			unused.Close()
		default:
		}
	}()
	var conn net.Conn = &replayConn{Conn: c, r: io.MultiReader(bytes.NewReader(h.head), c)}
	scheme := "http"
	if h.tls {
		scheme = "https"
		tc := tls.Server(conn, &tls.Config{
			MinVersion: tls.VersionTLS12,
			NextProtos: []string{"http/1.1"},
			GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
				return p.cfg.CA.leaf(name, time.Now())
			},
		})
		hctx, cancel := context.WithTimeout(ctx, p.cfg.HandshakeTimeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			p.cfg.Logger.Debug("proxy: TLS handshake with the sandbox", "name", name, "err", err)
			return
		}
		conn = tc
	}
	tr := p.upstreamTransport(name, orig, h.tls, first)
	defer tr.CloseIdleConnections()
	errLog := slog.NewLogLogger(p.cfg.Logger.Handler(), slog.LevelDebug)
	rp := &httputil.ReverseProxy{
		Transport: tr,
		ErrorLog:  errLog,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = scheme, pr.In.Host
			pr.Out.URL.RawQuery = pr.In.URL.RawQuery // as sent, parsable or not
			for _, k := range forwardedHeaders {
				if v, ok := pr.In.Header[k]; ok {
					pr.Out.Header[k] = v
				}
			}
			headers, _, _ := p.cfg.policy().HeaderRule(name)
			for _, hd := range headers {
				pr.Out.Header.Set(hd.Name, hd.Value)
			}
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() == nil {
				p.cfg.Logger.Warn("proxy: forwarding an intercepted request", "name", name, "err", err)
			}
			http.Error(w, fmt.Sprintf("agent-sandbox: cannot reach %s: %v", name, err), http.StatusBadGateway)
		},
	}
	var handlers sync.WaitGroup
	done := make(chan struct{})
	var once sync.Once
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			handlers.Add(1)
			defer handlers.Done()
			if n, err := NormalizeName(hostname(r.Host)); err != nil || n != name {
				http.Error(w, fmt.Sprintf("agent-sandbox: a request for %q on a connection to %s refused: header rules go with the name a connection is made for", r.Host, name),
					http.StatusMisdirectedRequest)
				return
			}
			rp.ServeHTTP(w, r)
		}),
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ReadHeaderTimeout: p.cfg.HandshakeTimeout,
		IdleTimeout:       interceptIdle,
		MaxHeaderBytes:    maxHeadSize,
		ErrorLog:          errLog,
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateClosed || s == http.StateHijacked {
				once.Do(func() { close(done) })
			}
		},
	}
	// Serve returns as soon as it has handed conn to the goroutine that
	// serves it; done and handlers say when that one has finished.
	srv.Serve(&oneConn{conn: conn, addr: conn.LocalAddr()})
	<-done
	handlers.Wait()
}

// upstreamTransport makes the connections of an intercepted connection to
// name: the first is the one in first, the others are decided and dialed
// as serveConn does (each an EventProxy); over TLS (secure) the server's
// certificate is verified for name. It speaks HTTP/1.1 and changes
// nothing of what passes (no compression of its own, no proxy).
func (p *Proxy) upstreamTransport(name string, orig netip.AddrPort, secure bool, first chan net.Conn) *http.Transport {
	dial := func(ctx context.Context) (net.Conn, error) {
		select {
		case c := <-first:
			return c, nil
		default:
		}
		c, o := p.connect(ctx, name, orig)
		p.cfg.record(o.event)
		switch {
		case c != nil:
			return c, nil
		case !o.event.Allowed:
			return nil, fmt.Errorf("egress to %s denied (rule %s)", name, o.event.Rule)
		}
		return nil, fmt.Errorf("%s: %w", o.failure, o.err)
	}
	tr := &http.Transport{
		DialContext:            func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) },
		MaxConnsPerHost:        maxUpstreamConns,
		MaxIdleConnsPerHost:    maxUpstreamConns,
		IdleConnTimeout:        interceptIdle,
		MaxResponseHeaderBytes: maxUpstreamHeader,
		DisableCompression:     true,
	}
	if secure {
		tr.DialTLSContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			raw, err := dial(ctx)
			if err != nil {
				return nil, err
			}
			tc := tls.Client(raw, &tls.Config{
				ServerName: name,
				RootCAs:    p.cfg.UpstreamRoots,
				MinVersion: tls.VersionTLS12,
				NextProtos: []string{"http/1.1"},
			})
			hctx, cancel := context.WithTimeout(ctx, p.cfg.HandshakeTimeout)
			defer cancel()
			if err := tc.HandshakeContext(hctx); err != nil {
				raw.Close()
				return nil, fmt.Errorf("TLS with %s: %w", name, err)
			}
			return tc, nil
		}
	}
	return tr
}

// replayConn is a connection whose reads start with what sniffing read
// from it already.
type replayConn struct {
	net.Conn
	r io.Reader
}

func (c *replayConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// oneConn is a listener that accepts conn once and is closed after.
type oneConn struct {
	conn net.Conn
	addr net.Addr
}

func (l *oneConn) Accept() (net.Conn, error) {
	if c := l.conn; c != nil {
		l.conn = nil
		return c, nil
	}
	return nil, net.ErrClosed
}

func (l *oneConn) Close() error   { return nil }
func (l *oneConn) Addr() net.Addr { return l.addr }
