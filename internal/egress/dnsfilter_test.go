package egress

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/net/dns/dnsmessage"
)

// fakeUpstream is a DNS server on 127.0.0.1 (UDP and TCP on one port)
// answering from a fixed zone.
type fakeUpstream struct {
	addr string
	mu   sync.Mutex
	seen map[string]int // "udp name" / "tcp name" -> queries
}

// fakeZone: name -> addresses. "tc.test." is truncated over UDP; "nx.test."
// does not exist; "many.test." has 60 A records.
var fakeZone = map[string][]string{
	"pypi.org.":          {"151.101.0.223", "2a04:4e42::223"},
	"rebind.test.":       {"169.254.169.254", "203.0.113.10", "127.0.0.1", "10.0.0.5"},
	"private.test.":      {"10.0.0.1", "fd00::1"},
	"allowed.test.":      {"203.0.113.1"},
	"tc.test.":           {"203.0.113.20"},
	"www.allowed.test.":  {"203.0.113.2"},
	"svcb.allowed.test.": {"203.0.113.3"},
}

func init() {
	for i := range 60 {
		fakeZone["many.test."] = append(fakeZone["many.test."], fmt.Sprintf("203.0.113.%d", i+1))
	}
}

func startUpstream(t *testing.T) *fakeUpstream {
	t.Helper()
	var pc net.PacketConn
	var ln net.Listener
	for range 20 {
		var err error
		pc, err = net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ln, err = net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			break
		}
		pc.Close()
		pc = nil
	}
	if pc == nil {
		t.Fatal("no port free for both UDP and TCP")
	}
	u := &fakeUpstream{addr: pc.LocalAddr().String(), seen: map[string]int{}}
	var wg sync.WaitGroup
	t.Cleanup(func() { pc.Close(); ln.Close(); wg.Wait() })
	wg.Go(func() {
		buf := make([]byte, 65535)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if resp := u.respond(buf[:n], true); resp != nil {
				pc.WriteTo(resp, from)
			}
		}
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				buf := make([]byte, 65535)
				n, err := readTCPMessage(c, buf)
				if err != nil {
					return
				}
				resp := u.respond(buf[:n], false)
				c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(resp))), resp...))
			})
		}
	})
	return u
}

func (u *fakeUpstream) count(proto, name string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.seen[proto+" "+name]
}

func (u *fakeUpstream) respond(query []byte, udp bool) []byte {
	var q dnsmessage.Message
	if err := q.Unpack(query); err != nil || len(q.Questions) != 1 {
		return nil
	}
	question := q.Questions[0]
	name := strings.ToLower(question.Name.String())
	proto := "tcp"
	if udp {
		proto = "udp"
	}
	u.mu.Lock()
	u.seen[proto+" "+name]++
	u.mu.Unlock()
	m := dnsmessage.Message{
		Header:    dnsmessage.Header{ID: q.Header.ID, Response: true, RecursionAvailable: true, RecursionDesired: q.Header.RecursionDesired},
		Questions: q.Questions,
	}
	addrs, ok := fakeZone[name]
	switch {
	case !ok:
		m.Header.RCode = dnsmessage.RCodeNameError
	case name == "tc.test." && udp:
		m.Header.Truncated = true
	}
	hdr := dnsmessage.ResourceHeader{Name: question.Name, Class: dnsmessage.ClassINET, TTL: 60}
	if !m.Header.Truncated {
		for _, s := range addrs {
			a := netip.MustParseAddr(s)
			switch {
			case a.Is4() && question.Type == dnsmessage.TypeA:
				m.Answers = append(m.Answers, dnsmessage.Resource{Header: hdr, Body: &dnsmessage.AResource{A: a.As4()}})
			case a.Is6() && question.Type == dnsmessage.TypeAAAA:
				m.Answers = append(m.Answers, dnsmessage.Resource{Header: hdr, Body: &dnsmessage.AAAAResource{AAAA: a.As16()}})
			}
		}
		if name == "svcb.allowed.test." && question.Type == dnsmessage.TypeHTTPS {
			m.Answers = append(m.Answers, dnsmessage.Resource{Header: hdr, Body: &dnsmessage.HTTPSResource{SVCBResource: dnsmessage.SVCBResource{
				Priority: 1, Target: dnsmessage.MustNewName("."),
				Params: []dnsmessage.SVCParam{{Key: dnsmessage.SVCParamIPv4Hint, Value: []byte{10, 0, 0, 1}}},
			}}})
			m.Answers = append(m.Answers, dnsmessage.Resource{Header: hdr, Body: &dnsmessage.TXTResource{TXT: []string{"kept"}}})
		}
	}
	b, err := m.Pack()
	if err != nil {
		panic(err)
	}
	return b
}

// testCeiling allows the fake zone's test names and pypi.org.
func testCeiling() Ceiling {
	c := DefaultCeiling()
	c.AllowDomains = append(c.AllowDomains, "rebind.test", "private.test", "*.allowed.test", "allowed.test", "tc.test", "nx.test", "many.test")
	return c
}

// livePolicy is a policy getter whose policy the test replaces.
type livePolicy struct{ p atomic.Pointer[Policy] }

func (l *livePolicy) set(p Policy) { l.p.Store(&p) }
func (l *livePolicy) get() Policy  { return *l.p.Load() }

type dnsEnv struct {
	up     *fakeUpstream
	policy *livePolicy
	ring   *Ring
	udp    string
	tcp    string
}

func startServer(t *testing.T, p Policy, mod func(*Config)) *dnsEnv {
	t.Helper()
	env := &dnsEnv{up: startUpstream(t), policy: &livePolicy{}, ring: NewRing(100)}
	env.policy.set(p)
	cfg := Config{
		Policy:   env.policy.get,
		Upstream: &NetUpstream{Addr: env.up.addr},
		Audit:    env.ring,
		Timeout:  2 * time.Second,
	}
	if mod != nil {
		mod(&cfg)
	}
	s := NewServer(cfg)
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	env.udp, env.tcp = pc.LocalAddr().String(), ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 2)
	go func() { errc <- s.ServeUDP(ctx, pc) }()
	go func() { errc <- s.ServeTCP(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		for range 2 {
			if err := <-errc; err != nil {
				t.Errorf("Serve returned %v after cancel", err)
			}
		}
	})
	return env
}

// exchange sends one query to our server and returns the raw response.
func exchange(t *testing.T, network, addr string, query []byte) ([]byte, error) {
	t.Helper()
	c, err := net.Dial(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(3 * time.Second))
	if network == "tcp" {
		query = append(binary.BigEndian.AppendUint16(nil, uint16(len(query))), query...)
	}
	if _, err := c.Write(query); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 65535)
	var n int
	if network == "tcp" {
		n, err = readTCPMessage(c, buf)
	} else {
		n, err = c.Read(buf)
	}
	return buf[:n], err
}

func ask(t *testing.T, network, addr, name string, qtype dnsmessage.Type, edns bool) dnsmessage.Message {
	t.Helper()
	q := dnsmessage.Message{
		Header:    dnsmessage.Header{ID: 0xbeef, RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName(name), Type: qtype, Class: dnsmessage.ClassINET}},
	}
	if edns {
		q.Additionals = []dnsmessage.Resource{optRecord(1232)}
	}
	b, err := q.Pack()
	if err != nil {
		t.Fatal(err)
	}
	resp, err := exchange(t, network, addr, b)
	if err != nil {
		t.Fatalf("%s query %s: %v", network, name, err)
	}
	var m dnsmessage.Message
	if err := m.Unpack(resp); err != nil {
		t.Fatalf("unpacking response: %v", err)
	}
	if m.Header.ID != 0xbeef || !m.Header.Response {
		t.Fatalf("bad response header %+v", m.Header)
	}
	return m
}

func answerAddrs(m dnsmessage.Message) []string {
	var out []string
	for _, r := range m.Answers {
		switch b := r.Body.(type) {
		case *dnsmessage.AResource:
			out = append(out, netip.AddrFrom4(b.A).String())
		case *dnsmessage.AAAAResource:
			out = append(out, netip.AddrFrom16(b.AAAA).String())
		}
	}
	return out
}

// eventKey is what the tests compare of an audit Event.
type eventKey struct {
	Kind, Name, Type string
	Addrs            string
	Allowed          bool
	Rule             string
}

func keys(es []Event) []eventKey {
	var out []eventKey
	for _, e := range es {
		var as []string
		for _, a := range e.Addrs {
			as = append(as, a.String())
		}
		out = append(out, eventKey{e.Kind, e.Name, e.Type, strings.Join(as, ","), e.Allowed, e.Rule})
	}
	return out
}

func TestServer(t *testing.T) {
	tests := []struct {
		name       string
		qname      string
		qtype      dnsmessage.Type
		wantRCode  dnsmessage.RCode
		wantAddrs  []string
		wantEvents []eventKey
		wantBlock  bool // EDE "Blocked" present
	}{
		{
			name: "allowed name answered", qname: "pypi.org.", qtype: dnsmessage.TypeA,
			wantRCode: dnsmessage.RCodeSuccess, wantAddrs: []string{"151.101.0.223"},
			wantEvents: []eventKey{{EventDNS, "pypi.org", "A", "151.101.0.223", true, "ceiling:pypi.org"}},
		},
		{
			name: "IPv6 answer stripped by default", qname: "PyPI.org.", qtype: dnsmessage.TypeAAAA,
			wantRCode: dnsmessage.RCodeSuccess,
			wantEvents: []eventKey{
				{EventDNSAnswer, "pypi.org", "AAAA", "2a04:4e42::223", false, RuleIPv6},
				{EventDNS, "pypi.org", "AAAA", "", true, "ceiling:pypi.org"},
			},
		},
		{
			name: "denied name refused with NXDOMAIN", qname: "evil.example.", qtype: dnsmessage.TypeA,
			wantRCode: dnsmessage.RCodeNameError, wantBlock: true,
			wantEvents: []eventKey{{EventDNS, "evil.example", "A", "", false, RuleAllowlist}},
		},
		{
			name: "rebinding answers stripped", qname: "rebind.test.", qtype: dnsmessage.TypeA,
			wantRCode: dnsmessage.RCodeSuccess, wantAddrs: []string{"203.0.113.10"},
			wantEvents: []eventKey{
				{EventDNSAnswer, "rebind.test", "A", "169.254.169.254", false, "private:link-local 169.254.0.0/16"},
				{EventDNSAnswer, "rebind.test", "A", "127.0.0.1", false, "private:loopback 127.0.0.0/8"},
				{EventDNSAnswer, "rebind.test", "A", "10.0.0.5", false, "private:private 10.0.0.0/8"},
				{EventDNS, "rebind.test", "A", "203.0.113.10", true, "ceiling:rebind.test"},
			},
		},
		{
			name: "only private answers: empty NOERROR", qname: "private.test.", qtype: dnsmessage.TypeA,
			wantRCode: dnsmessage.RCodeSuccess,
			wantEvents: []eventKey{
				{EventDNSAnswer, "private.test", "A", "10.0.0.1", false, "private:private 10.0.0.0/8"},
				{EventDNS, "private.test", "A", "", true, "ceiling:private.test"},
			},
		},
		{
			name: "allowed but nonexistent", qname: "nx.test.", qtype: dnsmessage.TypeA,
			wantRCode:  dnsmessage.RCodeNameError,
			wantEvents: []eventKey{{EventDNS, "nx.test", "A", "", true, "ceiling:nx.test"}},
		},
		{
			name: "truncated upstream answer retried over TCP", qname: "tc.test.", qtype: dnsmessage.TypeA,
			wantRCode: dnsmessage.RCodeSuccess, wantAddrs: []string{"203.0.113.20"},
			wantEvents: []eventKey{{EventDNS, "tc.test", "A", "203.0.113.20", true, "ceiling:tc.test"}},
		},
		{
			name: "wildcard", qname: "www.allowed.test.", qtype: dnsmessage.TypeA,
			wantRCode: dnsmessage.RCodeSuccess, wantAddrs: []string{"203.0.113.2"},
			wantEvents: []eventKey{{EventDNS, "www.allowed.test", "A", "203.0.113.2", true, "ceiling:*.allowed.test"}},
		},
		{
			name: "HTTPS records removed, others kept", qname: "svcb.allowed.test.", qtype: dnsmessage.TypeHTTPS,
			wantRCode:  dnsmessage.RCodeSuccess,
			wantEvents: []eventKey{{EventDNS, "svcb.allowed.test", "HTTPS", "", true, "ceiling:*.allowed.test"}},
		},
	}
	p := mustPolicy(t, testCeiling(), "", nil)
	for _, network := range []string{"udp", "tcp"} {
		env := startServer(t, p, nil)
		addr := env.udp
		if network == "tcp" {
			addr = env.tcp
		}
		for _, tt := range tests {
			t.Run(network+"/"+tt.name, func(t *testing.T) {
				_, cursor := env.ring.Since(0, 0)
				m := ask(t, network, addr, tt.qname, tt.qtype, true)
				if m.Header.RCode != tt.wantRCode {
					t.Errorf("rcode = %v, want %v", m.Header.RCode, tt.wantRCode)
				}
				if diff := cmp.Diff(tt.wantAddrs, answerAddrs(m)); diff != "" {
					t.Errorf("addresses (-want +got):\n%s", diff)
				}
				for _, r := range m.Answers {
					if r.Header.Type == dnsmessage.TypeHTTPS || r.Header.Type == dnsmessage.TypeSVCB {
						t.Errorf("answer kept %v record", r.Header.Type)
					}
				}
				if tt.qtype == dnsmessage.TypeHTTPS && len(m.Answers) != 1 {
					t.Errorf("answers = %v, want the TXT record only", m.Answers)
				}
				if got := hasBlockedEDE(m); got != tt.wantBlock {
					t.Errorf("EDE Blocked present = %v, want %v", got, tt.wantBlock)
				}
				events, _ := env.ring.Since(cursor, 0)
				if diff := cmp.Diff(tt.wantEvents, keys(events)); diff != "" {
					t.Errorf("audit events (-want +got):\n%s", diff)
				}
			})
		}
		if n := env.up.count("udp", "evil.example.") + env.up.count("tcp", "evil.example."); n != 0 {
			t.Errorf("%s: denied name reached the upstream %d times", network, n)
		}
		if env.up.count("tcp", "tc.test.") == 0 {
			t.Errorf("%s: truncated answer was not retried over TCP", network)
		}
	}
}

func hasBlockedEDE(m dnsmessage.Message) bool {
	for _, r := range m.Additionals {
		opt, ok := r.Body.(*dnsmessage.OPTResource)
		if !ok {
			continue
		}
		for _, o := range opt.Options {
			if o.Code == ednsOptionEDE && len(o.Data) >= 2 && binary.BigEndian.Uint16(o.Data) == edeBlocked &&
				strings.HasPrefix(string(o.Data[2:]), "egress policy: ") {
				return true
			}
		}
	}
	return false
}

func TestServerLivePolicyChange(t *testing.T) {
	env := startServer(t, mustPolicy(t, DefaultCeiling(), "", nil), nil)
	rcode := func() dnsmessage.RCode {
		return ask(t, "udp", env.udp, "allowed.test.", dnsmessage.TypeA, false).Header.RCode
	}
	if got := rcode(); got != dnsmessage.RCodeNameError {
		t.Fatalf("before: rcode %v, want NXDOMAIN", got)
	}
	env.policy.set(mustPolicy(t, testCeiling(), "", nil))
	if got := rcode(); got != dnsmessage.RCodeSuccess {
		t.Fatalf("after allowing: rcode %v, want NOERROR", got)
	}
	env.policy.set(mustPolicy(t, testCeiling(), `{"denyOut":["allowed.test"]}`, nil))
	if got := rcode(); got != dnsmessage.RCodeNameError {
		t.Fatalf("after denyOut: rcode %v, want NXDOMAIN", got)
	}
	env.policy.set(mustPolicy(t, testCeiling(), "", ptr(false)))
	if m := ask(t, "udp", env.udp, "pypi.org.", dnsmessage.TypeA, false); m.Header.RCode != dnsmessage.RCodeNameError {
		t.Fatalf("internet off: pypi.org rcode %v, want NXDOMAIN", m.Header.RCode)
	}
	events, _ := env.ring.Since(0, 0)
	var rules []string
	for _, e := range events {
		rules = append(rules, fmt.Sprint(e.Allowed, " ", e.Rule))
	}
	want := []string{"false ceiling:allowlist", "true ceiling:allowed.test", "false denyOut:allowed.test", "false " + RuleInternetOff}
	if diff := cmp.Diff(want, rules); diff != "" {
		t.Errorf("audit (-want +got):\n%s", diff)
	}
}

func TestServerTruncatesLargeUDPAnswers(t *testing.T) {
	env := startServer(t, mustPolicy(t, testCeiling(), "", nil), nil)
	m := ask(t, "udp", env.udp, "many.test.", dnsmessage.TypeA, false)
	if !m.Header.Truncated || len(m.Answers) != 0 {
		t.Errorf("UDP without EDNS: truncated=%v with %d answers, want TC and none", m.Header.Truncated, len(m.Answers))
	}
	m = ask(t, "udp", env.udp, "many.test.", dnsmessage.TypeA, true) // 1232 bytes fit 60 records
	if m.Header.Truncated || len(m.Answers) != 60 {
		t.Errorf("UDP with EDNS: truncated=%v with %d answers, want 60", m.Header.Truncated, len(m.Answers))
	}
	m = ask(t, "tcp", env.tcp, "many.test.", dnsmessage.TypeA, false)
	if m.Header.Truncated || len(m.Answers) != 60 {
		t.Errorf("TCP: truncated=%v with %d answers, want 60", m.Header.Truncated, len(m.Answers))
	}
}

func TestServerMalformedQueries(t *testing.T) {
	env := startServer(t, mustPolicy(t, testCeiling(), "", nil), nil)
	// A header followed by garbage: FORMERR with the query's ID.
	bad := []byte{0x12, 0x34, 0x01, 0x00, 0x00, 0x01, 0, 0, 0, 0, 0, 0, 0xff, 0xff}
	resp, err := exchange(t, "udp", env.udp, bad)
	if err != nil {
		t.Fatal(err)
	}
	var m dnsmessage.Message
	if err := m.Unpack(resp); err != nil || m.Header.ID != 0x1234 || m.Header.RCode != dnsmessage.RCodeFormatError {
		t.Errorf("garbage query: %+v, %v; want FORMERR for ID 0x1234", m.Header, err)
	}
	// Two questions: FORMERR.
	q := dnsmessage.Message{Header: dnsmessage.Header{ID: 7}, Questions: []dnsmessage.Question{
		{Name: dnsmessage.MustNewName("pypi.org."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET},
		{Name: dnsmessage.MustNewName("allowed.test."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET},
	}}
	b, _ := q.Pack()
	resp, err = exchange(t, "tcp", env.tcp, b)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Unpack(resp); err != nil || m.Header.RCode != dnsmessage.RCodeFormatError {
		t.Errorf("two questions: %+v, %v; want FORMERR", m.Header, err)
	}
	// Too short to answer: dropped, and the server keeps serving.
	c, _ := net.Dial("udp", env.udp)
	c.Write([]byte{1, 2, 3})
	c.Close()
	if m := ask(t, "udp", env.udp, "pypi.org.", dnsmessage.TypeA, false); m.Header.RCode != dnsmessage.RCodeSuccess {
		t.Errorf("after garbage: rcode %v", m.Header.RCode)
	}
}

// failingUpstream is an Upstream that always fails.
type failingUpstream struct{}

func (failingUpstream) Exchange(context.Context, dnsmessage.Message) (dnsmessage.Message, error) {
	return dnsmessage.Message{}, errors.New("upstream down")
}

func TestServerUpstreamFailure(t *testing.T) {
	env := startServer(t, mustPolicy(t, testCeiling(), "", nil), func(c *Config) { c.Upstream = failingUpstream{} })
	if m := ask(t, "udp", env.udp, "pypi.org.", dnsmessage.TypeA, false); m.Header.RCode != dnsmessage.RCodeServerFailure {
		t.Errorf("rcode %v, want SERVFAIL", m.Header.RCode)
	}
	events, _ := env.ring.Since(0, 0)
	if len(events) != 1 || events[0].Rule != "ceiling:pypi.org (upstream failed)" {
		t.Errorf("audit = %+v", events)
	}
}

func TestServerUpstreamTimeout(t *testing.T) {
	// An upstream that never answers: the query fails within Timeout.
	silent, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	env := startServer(t, mustPolicy(t, testCeiling(), "", nil), func(c *Config) {
		c.Upstream = &NetUpstream{Addr: silent.LocalAddr().String()}
		c.Timeout = 100 * time.Millisecond
	})
	start := time.Now()
	if m := ask(t, "tcp", env.tcp, "pypi.org.", dnsmessage.TypeA, false); m.Header.RCode != dnsmessage.RCodeServerFailure {
		t.Errorf("rcode %v, want SERVFAIL", m.Header.RCode)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %v", d)
	}
}

func TestServerBoundsInflight(t *testing.T) {
	// One slot, held by a query stuck upstream: a second UDP query, which
	// the upstream would answer at once, is dropped rather than queued.
	entered, release := make(chan struct{}), make(chan struct{})
	upstream := upstreamFunc(func(ctx context.Context, q dnsmessage.Message) (dnsmessage.Message, error) {
		if q.Questions[0].Name.String() == "pypi.org." {
			close(entered)
			select {
			case <-release:
			case <-ctx.Done():
			}
			return dnsmessage.Message{}, errors.New("stuck")
		}
		return dnsmessage.Message{Header: dnsmessage.Header{Response: true}, Questions: q.Questions}, nil
	})
	env := startServer(t, mustPolicy(t, testCeiling(), "", nil), func(c *Config) {
		c.Upstream = upstream
		c.MaxInflight = 1
	})
	query := func(name string) []byte {
		q := dnsmessage.Message{Header: dnsmessage.Header{ID: 1}, Questions: []dnsmessage.Question{
			{Name: dnsmessage.MustNewName(name), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}}}
		b, _ := q.Pack()
		return b
	}
	c1, _ := net.Dial("udp", env.udp)
	defer c1.Close()
	c1.Write(query("pypi.org."))
	<-entered
	c2, _ := net.Dial("udp", env.udp)
	defer c2.Close()
	c2.Write(query("allowed.test."))
	c2.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := c2.Read(make([]byte, 512)); err == nil {
		t.Error("second query answered while the only slot was busy")
	}
	close(release)
	c1.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := c1.Read(make([]byte, 512)); err != nil {
		t.Fatalf("first query: %v", err)
	}
	// With the slot free again (it is released just after that response
	// is sent), the same query is answered.
	for try := 0; ; try++ {
		c3, _ := net.Dial("udp", env.udp)
		c3.Write(query("allowed.test."))
		c3.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		_, err := c3.Read(make([]byte, 512))
		c3.Close()
		if err == nil {
			break
		}
		if try == 20 {
			t.Fatalf("after release: %v", err)
		}
	}
}

type upstreamFunc func(context.Context, dnsmessage.Message) (dnsmessage.Message, error)

func (f upstreamFunc) Exchange(ctx context.Context, q dnsmessage.Message) (dnsmessage.Message, error) {
	return f(ctx, q)
}

func TestResolver(t *testing.T) {
	up := startUpstream(t)
	ring := NewRing(100)
	pol := mustPolicy(t, testCeiling(), `{"denyOut":["www.allowed.test"]}`, nil)
	r := NewResolver(Config{Policy: func() Policy { return pol }, Upstream: &NetUpstream{Addr: up.addr}, Audit: ring})
	tests := []struct {
		name      string
		wantAddrs []string
		wantD     Decision
		wantErr   error
		wantKeys  []eventKey
	}{
		{
			name: "pypi.org", wantAddrs: []string{"151.101.0.223"}, wantD: allow("ceiling:pypi.org"),
			wantKeys: []eventKey{
				{EventDNSAnswer, "pypi.org", "", "2a04:4e42::223", false, RuleIPv6},
				{EventResolve, "pypi.org", "", "151.101.0.223", true, "ceiling:pypi.org"},
			},
		},
		{
			name: "rebind.test", wantAddrs: []string{"203.0.113.10"}, wantD: allow("ceiling:rebind.test"),
			wantKeys: []eventKey{
				{EventDNSAnswer, "rebind.test", "", "169.254.169.254", false, "private:link-local 169.254.0.0/16"},
				{EventDNSAnswer, "rebind.test", "", "127.0.0.1", false, "private:loopback 127.0.0.0/8"},
				{EventDNSAnswer, "rebind.test", "", "10.0.0.5", false, "private:private 10.0.0.0/8"},
				{EventResolve, "rebind.test", "", "203.0.113.10", true, "ceiling:rebind.test"},
			},
		},
		{
			name: "private.test", wantD: deny("private:private 10.0.0.0/8"),
			wantKeys: []eventKey{
				{EventDNSAnswer, "private.test", "", "10.0.0.1", false, "private:private 10.0.0.0/8"},
				{EventDNSAnswer, "private.test", "", "fd00::1", false, "private:unique-local fc00::/7"},
				{EventResolve, "private.test", "", "", false, "private:private 10.0.0.0/8"},
			},
		},
		{
			name: "www.allowed.test", wantD: deny("denyOut:www.allowed.test"),
			wantKeys: []eventKey{{EventResolve, "www.allowed.test", "", "", false, "denyOut:www.allowed.test"}},
		},
		{
			name: "random.example", wantD: deny(RuleAllowlist),
			wantKeys: []eventKey{{EventResolve, "random.example", "", "", false, RuleAllowlist}},
		},
		{
			name: "nx.test", wantD: allow("ceiling:nx.test"), wantErr: ErrNotFound,
			wantKeys: []eventKey{{EventResolve, "nx.test", "", "", true, "ceiling:nx.test (lookup failed)"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, cursor := ring.Since(0, 0)
			addrs, d, err := r.Resolve(context.Background(), tt.name, 443)
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("err = %v, want %v", err, tt.wantErr)
			}
			var got []string
			for _, a := range addrs {
				got = append(got, a.String())
			}
			if diff := cmp.Diff(tt.wantAddrs, got); diff != "" {
				t.Errorf("addrs (-want +got):\n%s", diff)
			}
			if d != tt.wantD {
				t.Errorf("decision = %+v, want %+v", d, tt.wantD)
			}
			events, _ := ring.Since(cursor, 0)
			// A and AAAA are looked up concurrently but filtered in that order.
			if diff := cmp.Diff(tt.wantKeys, keys(events)); diff != "" {
				t.Errorf("audit (-want +got):\n%s", diff)
			}
			for _, e := range events {
				if e.Port != 443 {
					t.Errorf("event port = %d, want 443", e.Port)
				}
			}
			if tt.name == "www.allowed.test" || tt.name == "random.example" {
				if n := up.count("udp", tt.name+"."); n != 0 {
					t.Errorf("denied name reached the upstream %d times", n)
				}
			}
		})
	}
}
