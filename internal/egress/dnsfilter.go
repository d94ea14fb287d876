package egress

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// Bounds of the DNS filter.
const (
	maxQuerySize      = 4096  // larger queries are dropped (UDP) or end the connection (TCP)
	maxMessageSize    = 65535 // the largest DNS message over TCP
	upstreamUDPSize   = 1232  // EDNS buffer size we advertise upstream (DNS flag day 2020)
	defaultTimeout    = 5 * time.Second
	defaultInflight   = 64
	defaultConns      = 16
	tcpIdleTimeout    = 10 * time.Second
	edeBlocked        = 15 // RFC 8914 Extended DNS Error "Blocked"
	ednsOptionEDE     = 15 // RFC 8914 option code
	minUDPPayloadSize = 512
)

// Upstream answers the DNS queries the filter lets through. The filter
// sets the query's ID; an Upstream may replace it and must return a
// response to the question asked.
type Upstream interface {
	Exchange(ctx context.Context, q dnsmessage.Message) (dnsmessage.Message, error)
}

// NetUpstream is a recursive resolver at Addr ("host:port"), asked over UDP
// from a fresh socket per query and over TCP when the answer is truncated.
type NetUpstream struct {
	Addr string
}

var _ Upstream = (*NetUpstream)(nil)

// Exchange implements Upstream.
func (u *NetUpstream) Exchange(ctx context.Context, q dnsmessage.Message) (dnsmessage.Message, error) {
	q.Header.ID = uint16(rand.Uint32())
	packed, err := q.Pack()
	if err != nil {
		return dnsmessage.Message{}, fmt.Errorf("packing query: %w", err)
	}
	resp, err := u.exchange(ctx, "udp", packed)
	if err == nil && resp.Header.Truncated {
		resp, err = u.exchange(ctx, "tcp", packed)
	}
	if err != nil {
		return dnsmessage.Message{}, err
	}
	if len(q.Questions) > 0 && !sameQuestion(resp.Questions, q.Questions[0]) {
		return dnsmessage.Message{}, fmt.Errorf("upstream %s answered another question", u.Addr)
	}
	return resp, nil
}

func (u *NetUpstream) exchange(ctx context.Context, network string, query []byte) (dnsmessage.Message, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, u.Addr)
	if err != nil {
		return dnsmessage.Message{}, fmt.Errorf("dialing upstream %s/%s: %w", network, u.Addr, err)
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	defer stop()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	id := binary.BigEndian.Uint16(query)
	if network == "tcp" {
		if _, err := c.Write(binary.BigEndian.AppendUint16(nil, uint16(len(query)))); err != nil {
			return dnsmessage.Message{}, fmt.Errorf("writing to upstream %s: %w", u.Addr, err)
		}
	}
	if _, err := c.Write(query); err != nil {
		return dnsmessage.Message{}, fmt.Errorf("writing to upstream %s: %w", u.Addr, err)
	}
	buf := make([]byte, maxMessageSize)
	for {
		var n int
		if network == "tcp" {
			n, err = readTCPMessage(c, buf)
		} else {
			n, err = c.Read(buf)
		}
		if err != nil {
			return dnsmessage.Message{}, fmt.Errorf("reading from upstream %s/%s: %w", network, u.Addr, err)
		}
		var m dnsmessage.Message
		if err := m.Unpack(buf[:n]); err != nil || !m.Header.Response || m.Header.ID != id {
			if network == "tcp" {
				return dnsmessage.Message{}, fmt.Errorf("bad response from upstream %s", u.Addr)
			}
			continue // a stray datagram: keep waiting for ours until the deadline
		}
		return m, nil
	}
}

// readTCPMessage reads one length-prefixed DNS message into buf.
func readTCPMessage(r io.Reader, buf []byte) (int, error) {
	var l [2]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		return 0, err
	}
	n := int(binary.BigEndian.Uint16(l[:]))
	if n > len(buf) {
		return 0, fmt.Errorf("message of %d bytes exceeds %d", n, len(buf))
	}
	if _, err := io.ReadFull(r, buf[:n]); err != nil {
		return 0, err
	}
	return n, nil
}

func sameQuestion(qs []dnsmessage.Question, q dnsmessage.Question) bool {
	return len(qs) == 1 && qs[0].Type == q.Type && qs[0].Class == q.Class &&
		strings.EqualFold(qs[0].Name.String(), q.Name.String())
}

// Config configures a Server and a Resolver.
type Config struct {
	// Policy returns the sandbox's current policy; it is called once per
	// query, so a policy replaced live applies to the next query. nil, or
	// the zero Policy, denies everything.
	Policy func() Policy
	// Upstream resolves the names the policy allows. Required.
	Upstream Upstream
	// Audit receives every decision; nil records nothing.
	Audit Audit
	// Timeout bounds each query's upstream exchange (default 5s).
	Timeout time.Duration
	// MaxInflight bounds the UDP queries handled at once (default 64);
	// queries beyond it are dropped, and the client retries.
	MaxInflight int
	// MaxConns bounds the TCP connections served at once (default 16);
	// connections beyond it are closed at once.
	MaxConns int
	// Logger receives serving errors; nil discards them.
	Logger *slog.Logger
	// Now is the clock of audit events (default time.Now).
	Now func() time.Time
}

func (c *Config) policy() Policy {
	if c.Policy == nil {
		return Policy{}
	}
	return c.Policy()
}

func (c *Config) record(e Event) {
	if c.Audit == nil {
		return
	}
	if c.Now != nil {
		e.Time = c.Now()
	} else {
		e.Time = time.Now()
	}
	c.Audit.Record(e)
}

func (c *Config) withDefaults() Config {
	d := *c
	if d.Timeout <= 0 {
		d.Timeout = defaultTimeout
	}
	if d.MaxInflight <= 0 {
		d.MaxInflight = defaultInflight
	}
	if d.MaxConns <= 0 {
		d.MaxConns = defaultConns
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	return d
}

// Server is a sandbox's DNS server: it answers only names its policy
// allows, forwarding them upstream and stripping answer addresses the
// policy does not allow (see the package doc). One Server may serve any
// number of sockets; each Serve call owns the goroutines it starts and
// returns only after they have ended.
type Server struct {
	cfg      Config
	inflight chan struct{} // UDP handler slots
	conns    chan struct{} // TCP connection slots
}

// NewServer returns a Server; cfg.Upstream must be set.
func NewServer(cfg Config) *Server {
	c := cfg.withDefaults()
	return &Server{
		cfg:      c,
		inflight: make(chan struct{}, c.MaxInflight),
		conns:    make(chan struct{}, c.MaxConns),
	}
}

// ServeUDP answers queries arriving on pc until ctx is done, then closes pc
// and returns nil once its handlers have finished. It returns an error if
// reading from pc fails otherwise.
func (s *Server) ServeUDP(ctx context.Context, pc net.PacketConn) error {
	stop := context.AfterFunc(ctx, func() { pc.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	buf := make([]byte, maxQuerySize+1)
	for {
		n, addr, err := pc.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("reading DNS queries: %w", err)
		}
		if n > maxQuerySize {
			continue
		}
		select {
		case s.inflight <- struct{}{}:
		default:
			s.cfg.Logger.Warn("dns: too many queries in flight, dropping one", "from", addr.String())
			continue
		}
		query := append([]byte(nil), buf[:n]...)
		wg.Go(func() {
			defer func() { <-s.inflight }()
			qctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
			defer cancel()
			if resp := s.handle(qctx, query, true); resp != nil {
				if _, err := pc.WriteTo(resp, addr); err != nil && ctx.Err() == nil {
					s.cfg.Logger.Warn("dns: writing UDP response", "to", addr.String(), "err", err)
				}
			}
		})
	}
}

// ServeTCP answers queries on connections accepted from ln until ctx is
// done, then closes ln and every connection and returns nil once they have
// finished. Queries on one connection are answered in order.
func (s *Server) ServeTCP(ctx context.Context, ln net.Listener) error {
	return serveConns(ctx, ln, "dns", s.cfg.Logger, s.conns, s.serveConn, func(c net.Conn) { c.Close() })
}

func (s *Server) serveConn(ctx context.Context, c net.Conn) {
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	buf := make([]byte, maxQuerySize)
	for {
		c.SetDeadline(time.Now().Add(tcpIdleTimeout))
		n, err := readTCPMessage(c, buf)
		if err != nil {
			return // EOF, idle, oversized or closed: nothing more to answer
		}
		qctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
		resp := s.handle(qctx, buf[:n], false)
		cancel()
		if resp == nil {
			return
		}
		c.SetDeadline(time.Now().Add(tcpIdleTimeout))
		out := binary.BigEndian.AppendUint16(make([]byte, 0, 2+len(resp)), uint16(len(resp)))
		if _, err := c.Write(append(out, resp...)); err != nil {
			return
		}
	}
}

// handle answers one packed query; nil means send nothing.
func (s *Server) handle(ctx context.Context, query []byte, udp bool) []byte {
	var q dnsmessage.Message
	if err := q.Unpack(query); err != nil {
		if len(query) < 12 || query[2]&0x80 != 0 {
			return nil // not even a query header, or a response
		}
		// Echo the ID so the client stops waiting.
		h := dnsmessage.Header{ID: binary.BigEndian.Uint16(query), Response: true, RCode: dnsmessage.RCodeFormatError}
		return mustPack(dnsmessage.Message{Header: h})
	}
	if q.Header.Response {
		return nil
	}
	ednsSize := 0 // 0: the client sent no OPT record
	for _, r := range q.Additionals {
		if r.Header.Type == dnsmessage.TypeOPT {
			ednsSize = max(int(r.Header.Class), minUDPPayloadSize)
		}
	}
	resp := s.answer(ctx, q, ednsSize > 0)
	packed, err := resp.Pack()
	if err != nil {
		s.cfg.Logger.Warn("dns: packing response", "err", err)
		resp = reply(q, dnsmessage.RCodeServerFailure, ednsSize > 0)
		packed = mustPack(resp)
	}
	limit := maxMessageSize
	if udp {
		limit = max(min(ednsSize, maxQuerySize), minUDPPayloadSize)
	}
	if len(packed) > limit {
		t := reply(q, resp.Header.RCode, ednsSize > 0)
		t.Header.Truncated = true
		packed = mustPack(t)
	}
	return packed
}

// reply starts a response to q with rcode and, if the client used EDNS,
// our OPT record.
func reply(q dnsmessage.Message, rcode dnsmessage.RCode, edns bool, opts ...dnsmessage.Option) dnsmessage.Message {
	m := dnsmessage.Message{
		Header: dnsmessage.Header{
			ID:                 q.Header.ID,
			Response:           true,
			OpCode:             q.Header.OpCode,
			RecursionDesired:   q.Header.RecursionDesired,
			RecursionAvailable: true,
			RCode:              rcode,
		},
		Questions: q.Questions,
	}
	if edns {
		m.Additionals = []dnsmessage.Resource{optRecord(maxQuerySize, opts...)}
	}
	return m
}

func optRecord(size int, opts ...dnsmessage.Option) dnsmessage.Resource {
	var h dnsmessage.ResourceHeader
	h.SetEDNS0(size, dnsmessage.RCodeSuccess, false)
	return dnsmessage.Resource{Header: h, Body: &dnsmessage.OPTResource{Options: opts}}
}

// mustPack packs a message built only from a parsed query's parts, which
// cannot fail.
func mustPack(m dnsmessage.Message) []byte {
	b, err := m.Pack()
	if err != nil {
		panic(fmt.Sprintf("egress: packing a minimal DNS response: %v", err))
	}
	return b
}

// answer decides and, if allowed, forwards one query.
func (s *Server) answer(ctx context.Context, q dnsmessage.Message, edns bool) dnsmessage.Message {
	if q.Header.OpCode != 0 {
		return reply(q, dnsmessage.RCodeNotImplemented, edns)
	}
	if len(q.Questions) != 1 {
		return reply(q, dnsmessage.RCodeFormatError, edns)
	}
	question := q.Questions[0]
	if question.Class != dnsmessage.ClassINET {
		return reply(q, dnsmessage.RCodeRefused, edns)
	}
	name, qtype := question.Name.String(), typeString(question.Type)
	if n, err := NormalizeName(name); err == nil {
		name = n // as the policy matches it, and as the proxy records it
	}
	pol := s.cfg.policy()
	d := pol.AllowName(name)
	if !d.Allowed {
		s.cfg.record(Event{Kind: EventDNS, Name: name, Type: qtype, Allowed: false, Rule: d.Rule})
		ede := dnsmessage.Option{Code: ednsOptionEDE, Data: append(binary.BigEndian.AppendUint16(nil, edeBlocked), "egress policy: "+d.Rule...)}
		return reply(q, dnsmessage.RCodeNameError, edns, ede)
	}
	up, err := s.cfg.Upstream.Exchange(ctx, upstreamQuery(question))
	if err != nil {
		s.cfg.Logger.Warn("dns: upstream", "name", name, "err", err)
		s.cfg.record(Event{Kind: EventDNS, Name: name, Type: qtype, Allowed: true, Rule: d.Rule + " (upstream failed)"})
		return reply(q, dnsmessage.RCodeServerFailure, edns)
	}
	resp := reply(q, up.Header.RCode, edns)
	var kept []netip.Addr
	resp.Answers, kept = filterAnswers(&s.cfg, pol, EventDNSAnswer, name, qtype, 0, up.Answers)
	resp.Authorities, _ = filterAnswers(&s.cfg, pol, EventDNSAnswer, name, qtype, 0, up.Authorities)
	s.cfg.record(Event{Kind: EventDNS, Name: name, Type: qtype, Addrs: kept, Allowed: true, Rule: d.Rule})
	return resp
}

// upstreamQuery asks one question with recursion and EDNS.
func upstreamQuery(q dnsmessage.Question) dnsmessage.Message {
	return dnsmessage.Message{
		Header:      dnsmessage.Header{RecursionDesired: true},
		Questions:   []dnsmessage.Question{q},
		Additionals: []dnsmessage.Resource{optRecord(upstreamUDPSize)},
	}
}

// filterAnswers returns rs without the A/AAAA records whose address pol
// denies (each recorded as an event of kind) and without SVCB/HTTPS/OPT
// records (SVCB/HTTPS address hints would bypass that check), and the
// addresses kept.
func filterAnswers(cfg *Config, pol Policy, kind, name, qtype string, port uint16, rs []dnsmessage.Resource) ([]dnsmessage.Resource, []netip.Addr) {
	var out []dnsmessage.Resource
	var kept []netip.Addr
	for _, r := range rs {
		var a netip.Addr
		switch b := r.Body.(type) {
		case *dnsmessage.AResource:
			a = netip.AddrFrom4(b.A)
		case *dnsmessage.AAAAResource:
			a = netip.AddrFrom16(b.AAAA)
		case *dnsmessage.SVCBResource, *dnsmessage.HTTPSResource:
			continue
		default:
			if r.Header.Type == dnsmessage.TypeOPT {
				continue
			}
			out = append(out, r)
			continue
		}
		if d := pol.AllowAnswer(name, a, port); !d.Allowed {
			cfg.record(Event{Kind: kind, Name: name, Type: qtype, Addrs: []netip.Addr{a}, Port: port, Allowed: false, Rule: d.Rule})
			continue
		}
		out = append(out, r)
		kept = append(kept, a)
	}
	return out, kept
}

func typeString(t dnsmessage.Type) string {
	return strings.TrimPrefix(t.String(), "Type")
}

// ErrNotFound is returned by Resolver.Resolve when the name does not exist.
var ErrNotFound = errors.New("name not found")

// Resolver resolves names for the host side (the transparent proxy), under
// the same policy, upstream and audit trail as the sandbox's DNS server.
// It is safe for concurrent use.
type Resolver struct {
	cfg Config
}

// NewResolver returns a Resolver; cfg.Upstream must be set. The server-only
// fields of cfg are ignored.
func NewResolver(cfg Config) *Resolver {
	return &Resolver{cfg: cfg.withDefaults()}
}

// Resolve checks name against the current policy and, if it is allowed,
// looks up its IPv4 and IPv6 addresses and returns those the policy allows
// for port. A denied name, or an allowed one none of whose addresses is
// allowed, gives no addresses, the deciding Decision and a nil error; the
// error is for failed lookups (ErrNotFound for a name that does not exist).
// Every decision is audited as EventResolve (and EventDNSAnswer for each
// address removed).
func (r *Resolver) Resolve(ctx context.Context, name string, port uint16) ([]netip.Addr, Decision, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	pol := r.cfg.policy()
	d := pol.AllowName(name)
	if !d.Allowed {
		r.cfg.record(Event{Kind: EventResolve, Name: name, Port: port, Allowed: false, Rule: d.Rule})
		return nil, d, nil
	}
	qname, err := dnsmessage.NewName(strings.TrimSuffix(name, ".") + ".")
	if err != nil {
		return nil, d, fmt.Errorf("resolving %q: %w", name, err)
	}
	types := []dnsmessage.Type{dnsmessage.TypeA, dnsmessage.TypeAAAA}
	answers := make([][]dnsmessage.Resource, len(types))
	errs := make([]error, len(types))
	var wg sync.WaitGroup
	for i, t := range types {
		wg.Go(func() {
			q := dnsmessage.Question{Name: qname, Type: t, Class: dnsmessage.ClassINET}
			m, err := r.cfg.Upstream.Exchange(ctx, upstreamQuery(q))
			switch {
			case err != nil:
				errs[i] = err
			case m.Header.RCode == dnsmessage.RCodeNameError:
				errs[i] = ErrNotFound
			case m.Header.RCode != dnsmessage.RCodeSuccess:
				errs[i] = fmt.Errorf("upstream answered %v", m.Header.RCode)
			default:
				answers[i] = m.Answers
			}
		})
	}
	wg.Wait()
	if errs[0] != nil && errs[1] != nil {
		r.cfg.record(Event{Kind: EventResolve, Name: name, Port: port, Allowed: true, Rule: d.Rule + " (lookup failed)"})
		return nil, d, fmt.Errorf("resolving %q: %w", name, errs[0])
	}
	var all []dnsmessage.Resource
	for _, a := range answers {
		all = append(all, a...)
	}
	var stripped []Event
	collect := &Config{Audit: auditFunc(func(e Event) { stripped = append(stripped, e) }), Now: r.cfg.Now}
	_, kept := filterAnswers(collect, pol, EventDNSAnswer, name, "", port, all)
	for _, e := range stripped {
		r.cfg.record(e)
	}
	if len(kept) == 0 && len(stripped) > 0 {
		d = Decision{Rule: stripped[0].Rule}
	}
	r.cfg.record(Event{Kind: EventResolve, Name: name, Addrs: kept, Port: port, Allowed: d.Allowed, Rule: d.Rule})
	if len(kept) == 0 && d.Allowed {
		return nil, d, fmt.Errorf("resolving %q: %w", name, ErrNotFound)
	}
	return kept, d, nil
}

// auditFunc adapts a function to Audit.
type auditFunc func(Event)

func (f auditFunc) Record(e Event) { f(e) }
