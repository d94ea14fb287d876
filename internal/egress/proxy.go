package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// Bounds of the proxy.
const (
	defaultHandshakeTimeout = 10 * time.Second
	defaultDialTimeout      = 10 * time.Second
	defaultProxyConns       = 256
	maxHeadSize             = 64 << 10 // request head or ClientHello, with whatever came along
	minDialAttempt          = 2 * time.Second
	// denyLinger is how long a refused HTTP client may take to read our
	// answer: closing with its request body unread would reset the
	// connection and lose the answer.
	denyLinger     = time.Second
	maxLingerBytes = 256 << 10
	maxAuditName   = 255
)

// RuleProxyBusy is the rule of a connection closed because the proxy was
// serving MaxConns already.
const RuleProxyBusy = "proxy:too many connections"

// ProxyConfig configures a Proxy. Config (Policy, Upstream, Audit, Timeout,
// Logger, Now) is shared with the DNS Server and Resolver; its MaxInflight
// and MaxConns are the DNS server's and are not used here.
type ProxyConfig struct {
	Config
	// Dial opens upstream connections (default: a net.Dialer). Each call
	// is bounded by a context deadline within DialTimeout.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// OriginalDst returns where the sandbox meant to connect before the
	// redirect (default: OriginalDst, SO_ORIGINAL_DST). Tests substitute it.
	OriginalDst func(net.Conn) (netip.AddrPort, error)
	// HandshakeTimeout bounds reading the HTTP request head or TLS
	// ClientHello (default 10s).
	HandshakeTimeout time.Duration
	// DialTimeout bounds connecting upstream, over all the addresses of a
	// name (default 10s).
	DialTimeout time.Duration
	// MaxConns bounds the connections served at once (default 256);
	// connections beyond it are closed at once.
	MaxConns int
	// CA signs the certificates the proxy presents to the sandbox where it
	// terminates TLS to apply header rules (network.rules); nil: such a
	// connection is refused, never passed on without its headers.
	CA *CA
	// UpstreamRoots verify the servers of the connections it terminates;
	// nil: the host's roots.
	UpstreamRoots *x509.CertPool
}

// Proxy is the transparent egress proxy of one sandbox: the host redirects
// the sandbox's TCP connections to ports 80 and 443 to it, and it lets
// through those its policy allows, judged by the name in the HTTP Host or
// TLS SNI and connected only to addresses it resolved itself (see the
// package doc). One Proxy may serve any number of listeners; each Serve
// call owns the goroutines it starts and returns only after they have
// ended.
type Proxy struct {
	cfg   ProxyConfig
	conns chan struct{} // connection slots
}

// NewProxy returns a Proxy; cfg.Upstream must be set.
func NewProxy(cfg ProxyConfig) *Proxy {
	cfg.Config = cfg.Config.withDefaults()
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = defaultHandshakeTimeout
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = defaultDialTimeout
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = defaultProxyConns
	}
	if cfg.Dial == nil {
		d := &net.Dialer{Timeout: cfg.DialTimeout}
		cfg.Dial = d.DialContext
	}
	if cfg.OriginalDst == nil {
		cfg.OriginalDst = OriginalDst
	}
	return &Proxy{cfg: cfg, conns: make(chan struct{}, cfg.MaxConns)}
}

// Serve proxies connections accepted from ln until ctx is done, then closes
// ln and returns nil. It returns an error if accepting fails otherwise.
// Either way it closes the connections it is serving and returns only once
// their goroutines have ended.
func (p *Proxy) Serve(ctx context.Context, ln net.Listener) error {
	return serveConns(ctx, ln, "proxy", p.cfg.Logger, p.conns, p.serveConn, p.refuseBusy)
}

// refuseBusy closes c at once, leaving a trace in the audit trail so that
// the sandbox's user can tell why the connection was closed.
func (p *Proxy) refuseBusy(c net.Conn) {
	defer c.Close()
	e := Event{Kind: EventProxy, Allowed: false, Rule: RuleProxyBusy}
	if orig, err := p.cfg.OriginalDst(c); err == nil {
		e.Addrs, e.Port = []netip.Addr{orig.Addr()}, orig.Port()
	}
	p.cfg.Logger.Warn("proxy: too many connections, closing one", "from", c.RemoteAddr().String())
	p.cfg.record(e)
}

// serveConn decides one connection and, if it is allowed, splices it to
// its upstream. It records exactly one EventProxy.
func (p *Proxy) serveConn(ctx context.Context, c net.Conn) {
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()

	orig, err := p.cfg.OriginalDst(c)
	if err != nil {
		p.cfg.Logger.Warn("proxy: reading original destination", "from", c.RemoteAddr().String(), "err", err)
		return
	}
	h := p.sniff(c)
	up, o := p.connect(ctx, h.name, orig)
	pattern, noCA := p.interception(h, up != nil)
	switch {
	case noCA:
		up.Close()
		up = nil
		o.event.Allowed, o.event.Rule = false, "rules:"+pattern+" (no CA to terminate TLS with)"
	case pattern != "":
		o.event.Rule += " + rules:" + pattern
	}
	p.cfg.record(o.event)
	if up == nil {
		if o.event.Allowed {
			p.cfg.Logger.Warn("proxy: "+o.failure, "name", o.event.Name, "orig", orig.String(), "err", o.err)
		}
		if h.http {
			p.refuseHTTP(c, o)
		}
		return
	}
	defer up.Close()
	stopUp := context.AfterFunc(ctx, func() { up.Close() })
	defer stopUp()
	if pattern != "" {
		p.intercept(ctx, c, h, orig, up)
		return
	}
	if _, err := up.Write(h.head); err != nil {
		return
	}
	splice(c, up)
}

// outcome is what became of a connection.
type outcome struct {
	event   Event
	target  string // the name, or address, that was decided on
	failure string // why an allowed connection was not made, for the client
	err     error  // the same, for the log
}

// connect decides a connection to orig that named name ("" if none) and,
// if it is allowed, connects upstream. A name decides even when orig would
// be allowed: orig is only where the sandbox's resolver (or the sandbox
// itself) pointed the connection, while the name is what the client will
// talk to.
func (p *Proxy) connect(ctx context.Context, name string, orig netip.AddrPort) (net.Conn, outcome) {
	o := outcome{event: Event{Kind: EventProxy, Name: auditName(name), Port: orig.Port()}}
	var addrs []netip.Addr
	if _, err := netip.ParseAddr(name); name == "" || err == nil {
		// The packets' destination is dialed, not a literal in Host or
		// SNI: that would let a client pick any address while claiming
		// an allowed one.
		d := p.cfg.policy().AllowAddr(orig.Addr(), orig.Port())
		addrs = []netip.Addr{orig.Addr()}
		o.target = orig.Addr().String()
		o.event.Addrs, o.event.Allowed, o.event.Rule = addrs, d.Allowed, d.Rule
		if !d.Allowed {
			return nil, o
		}
	} else {
		o.target = o.event.Name
		var d Decision
		var removed []netip.Addr
		var err error
		addrs, d, removed, err = p.resolve(ctx, name, orig.Port())
		o.event.Allowed, o.event.Rule = d.Allowed, d.Rule
		if !d.Allowed {
			o.event.Addrs = removed
			return nil, o
		}
		if err != nil {
			o.event.Rule += " (lookup failed)"
			o.failure, o.err = "cannot resolve "+o.target, err
			return nil, o
		}
	}
	up, a, err := p.dial(ctx, addrs, orig.Port())
	if err != nil {
		o.event.Addrs = addrs
		o.event.Rule += " (dial failed)"
		o.failure = "cannot connect to " + net.JoinHostPort(o.target, fmt.Sprint(orig.Port()))
		o.err = err
		return nil, o
	}
	o.event.Addrs = []netip.Addr{a}
	return up, o
}

// resolve decides name and looks up its addresses as a Resolver does, but
// without the Resolver's audit events: the connection's EventProxy is its
// record. It also returns the addresses the policy removed, for that event.
func (p *Proxy) resolve(ctx context.Context, name string, port uint16) ([]netip.Addr, Decision, []netip.Addr, error) {
	var removed []netip.Addr
	r := Resolver{cfg: p.cfg.Config}
	r.cfg.Audit = auditFunc(func(e Event) {
		if e.Kind == EventDNSAnswer {
			removed = append(removed, e.Addrs...)
		}
	})
	addrs, d, err := r.Resolve(ctx, name, port)
	return addrs, d, removed, err
}

// dial connects to the first of addrs that answers on port and returns it
// with the address it reached. Like net.Dialer it shares DialTimeout among
// the addresses, so that one that does not answer leaves time for the rest.
func (p *Proxy) dial(ctx context.Context, addrs []netip.Addr, port uint16) (net.Conn, netip.Addr, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.DialTimeout)
	defer cancel()
	var errs []error
	for i, a := range addrs {
		deadline, _ := ctx.Deadline()
		remaining := time.Until(deadline)
		attempt := remaining / time.Duration(len(addrs)-i)
		if attempt < minDialAttempt {
			attempt = min(minDialAttempt, remaining)
		}
		actx, acancel := context.WithTimeout(ctx, attempt)
		c, err := p.cfg.Dial(actx, "tcp", netip.AddrPortFrom(a, port).String())
		acancel()
		if err == nil {
			return c, a, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	if len(errs) == 0 {
		return nil, netip.Addr{}, errors.New("dialing: no addresses")
	}
	return nil, netip.Addr{}, fmt.Errorf("dialing: %w", errors.Join(errs...))
}

// refuseHTTP answers an HTTP client that its connection was refused (403)
// or could not be made (502).
func (p *Proxy) refuseHTTP(c net.Conn, o outcome) {
	code, body := http.StatusForbidden, fmt.Sprintf("agent-sandbox: egress to %s denied (rule %s)\n", o.target, o.event.Rule)
	if o.event.Allowed {
		code, body = http.StatusBadGateway, "agent-sandbox: "+o.failure+"\n"
	}
	c.SetDeadline(time.Now().Add(denyLinger))
	_, err := fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		code, http.StatusText(code), len(body), body)
	if err != nil {
		return
	}
	// Wait for the client to close, draining what it still sends, rather
	// than close with unread data, which would reset the connection and
	// could discard our answer before the client read it.
	closeWrite(c)
	io.Copy(io.Discard, io.LimitReader(c, maxLingerBytes))
}

// splice copies both ways until both sides have finished sending, passing
// each end of stream on as a half-close. An error either way ends both.
func splice(client, up net.Conn) {
	var wg sync.WaitGroup
	wg.Go(func() { copyHalf(up, client) })
	copyHalf(client, up)
	wg.Wait()
}

func copyHalf(dst, src net.Conn) {
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		src.Close()
		return
	}
	closeWrite(dst)
}

// closeWrite half-closes c, or closes it if it cannot be half-closed, so
// that its peer sees the end of the stream either way.
func closeWrite(c net.Conn) {
	if hc, ok := c.(interface{ CloseWrite() error }); ok {
		hc.CloseWrite()
		return
	}
	c.Close()
}

// hello is what the proxy learnt from the start of a connection.
type hello struct {
	name string // HTTP Host or TLS SNI without port; "" if none
	http bool   // the connection starts with an HTTP/1 request head
	tls  bool   // the connection starts with a TLS ClientHello with SNI
	head []byte // every byte read, to forward before anything else
}

// sniff reads the start of c, up to maxHeadSize bytes and for at most
// HandshakeTimeout, for the name the client wants. The server-first
// protocols never let it read anything: they are decided by address after
// the timeout.
func (p *Proxy) sniff(c net.Conn) hello {
	c.SetReadDeadline(time.Now().Add(p.cfg.HandshakeTimeout))
	defer c.SetReadDeadline(time.Time{})
	rec := &recorder{r: io.LimitReader(c, maxHeadSize)}
	var first [1]byte
	if _, err := io.ReadFull(rec, first[:]); err != nil {
		return hello{head: rec.buf}
	}
	var h hello
	switch {
	case first[0] == 0x16: // a TLS handshake record
		h.name = sniffSNI(c, rec)
		h.tls = h.name != ""
	case 'A' <= first[0] && first[0] <= 'Z': // an HTTP method, perhaps
		h.name, h.http = sniffHost(rec)
	}
	h.head = rec.buf
	return h
}

// sniffSNI returns the server name of the ClientHello read from rec, or ""
// if there is none or it is not a ClientHello. crypto/tls parses it, as it
// knows every TLS version's quirks better than a parser of our own would;
// the handshake is abandoned as soon as the hello is read.
func sniffSNI(c net.Conn, rec *recorder) string {
	var name string
	conf := &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		name = h.ServerName
		return nil, errHelloRead
	}}
	tls.Server(&helloConn{Conn: c, r: &replayer{rec: rec}}, conf).Handshake()
	return name
}

var errHelloRead = errors.New("ClientHello read")

// helloConn feeds crypto/tls what the client sent and keeps it from
// answering or closing the connection.
type helloConn struct {
	net.Conn
	r io.Reader
}

var errReadOnly = errors.New("sniffing: connection is read-only")

func (h *helloConn) Read(b []byte) (int, error)  { return h.r.Read(b) }
func (h *helloConn) Write(b []byte) (int, error) { return 0, errReadOnly }
func (h *helloConn) Close() error                { return nil }

// sniffHost returns the host (without port) of the HTTP/1 request head
// read from rec, and whether there is one.
func sniffHost(rec *recorder) (string, bool) {
	// The body is left alone: reading or closing it would consume it.
	req, err := http.ReadRequest(bufio.NewReader(&replayer{rec: rec}))
	if err != nil {
		return "", false
	}
	return hostname(req.Host), true
}

// hostname strips the port, and the brackets of an IPv6 literal, from a
// Host value.
func hostname(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]")
}

// auditName is name as the audit trail keeps it: normalised if it is a DNS
// name, else as sent but bounded, since the client chose it.
func auditName(name string) string {
	if n, err := NormalizeName(name); err == nil {
		return n
	}
	if len(name) > maxAuditName {
		return name[:maxAuditName]
	}
	return name
}

// recorder keeps every byte read through it.
type recorder struct {
	r   io.Reader
	buf []byte
}

func (r *recorder) Read(b []byte) (int, error) {
	n, err := r.r.Read(b)
	r.buf = append(r.buf, b[:n]...)
	return n, err
}

// replayer reads what rec has recorded already, then reads on through
// rec, so that each sniffer sees the connection from its first byte.
type replayer struct {
	rec *recorder
	off int
}

func (r *replayer) Read(b []byte) (int, error) {
	if r.off < len(r.rec.buf) {
		n := copy(b, r.rec.buf[r.off:])
		r.off += n
		return n, nil
	}
	n, err := r.rec.Read(b)
	r.off += n
	return n, err
}
