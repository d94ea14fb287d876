package inet_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv/inet"
	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"
	"golang.org/x/net/dns/dnsmessage"
)

var (
	a1    = netip.MustParseAddr("203.0.113.10")
	a2    = netip.MustParseAddr("203.0.113.11")
	b1    = netip.MustParseAddr("203.0.113.20")
	extra = netip.MustParseAddr("10.255.255.254") // a private address, held only by the namespace
	// Routed nowhere by the Internet: only looked up, never sent to.
	notHeld = netip.MustParseAddr("203.0.113.99")
)

// TestInternet starts an Internet in a subtest, uses every service from
// the host, and checks that nothing is left once the subtest is over.
func TestInternet(t *testing.T) {
	testenv.RequireRoot(t)
	sites := map[string][]netip.Addr{"a.test": {a1, a2}, "B.Test.": {b1}}
	var in *inet.Internet
	t.Run("serve", func(t *testing.T) {
		in = inet.Start(t, inet.Config{Sites: sites, Extra: []netip.Addr{extra}})
		want := map[string][]netip.Addr{"a.test": {a1, a2}, "b.test": {b1}}
		if diff := cmp.Diff(want, in.Sites, cmp.Comparer(func(x, y netip.Addr) bool { return x == y })); diff != "" {
			t.Errorf("Sites (-want +got):\n%s", diff)
		}
		t.Run("routes", func(t *testing.T) { checkRoutes(t, in) })
		t.Run("dns", func(t *testing.T) { checkDNS(t, in) })
		t.Run("http", func(t *testing.T) { checkHTTP(t, in) })
		t.Run("echo", func(t *testing.T) { checkEcho(t, in) })
	})
	if in == nil {
		return // Start failed; the subtest said why
	}

	if _, err := netlink.LinkByName(in.Link); !errors.As(err, new(netlink.LinkNotFoundError)) {
		t.Errorf("after cleanup: link %s: %v, want not found", in.Link, err)
	}
	for _, a := range []netip.Addr{a1, a2, b1, extra} {
		if rs := routesTo(t, a); len(rs) != 0 {
			t.Errorf("after cleanup: routes to %s: %v", a, rs)
		}
	}
	if _, err := os.Lstat(in.NS.Path()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after cleanup: namespace mount %s: %v, want gone", in.NS.Path(), err)
	}
}

// checkRoutes shows that exactly the Internet's addresses go to it.
func checkRoutes(t *testing.T, in *inet.Internet) {
	link, err := netlink.LinkByName(in.Link)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []netip.Addr{a1, a2, b1, extra} {
		rs := routesTo(t, a)
		if len(rs) != 1 || rs[0].LinkIndex != link.Attrs().Index {
			t.Errorf("routes to %s: %v, want one via %s", a, rs, in.Link)
		}
	}
	rs, err := netlink.RouteGet(net.IP(notHeld.AsSlice()))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.LinkIndex == link.Attrs().Index {
			t.Errorf("%s, which the Internet does not hold, is routed to it: %v", notHeld, r)
		}
	}
}

func checkDNS(t *testing.T, in *inet.Internet) {
	type query struct {
		name  string
		qtype dnsmessage.Type
		rcode dnsmessage.RCode
		want  []netip.Addr
	}
	queries := []query{
		{"a.test", dnsmessage.TypeA, dnsmessage.RCodeSuccess, []netip.Addr{a1, a2}},
		{"B.TEST", dnsmessage.TypeA, dnsmessage.RCodeSuccess, []netip.Addr{b1}},
		{"a.test", dnsmessage.TypeAAAA, dnsmessage.RCodeSuccess, nil},
		{"nope.test", dnsmessage.TypeA, dnsmessage.RCodeNameError, nil},
	}
	var asked []string
	for _, network := range []string{"udp", "tcp"} {
		for _, q := range queries {
			resp, err := ask(network, in.DNS, q.name, q.qtype)
			if err != nil {
				t.Errorf("%s %s %v: %v", network, q.name, q.qtype, err)
				continue
			}
			var got []netip.Addr
			for _, rr := range resp.Answers {
				if a, ok := rr.Body.(*dnsmessage.AResource); ok {
					got = append(got, netip.AddrFrom4(a.A))
				}
			}
			if resp.RCode != q.rcode || !resp.Authoritative || !slices.Equal(got, q.want) {
				t.Errorf("%s %s %v: %v authoritative=%v %v, want %v authoritative %v",
					network, q.name, q.qtype, resp.RCode, resp.Authoritative, got, q.rcode, q.want)
			}
			asked = append(asked, strings.ToLower(q.name))
		}
	}
	if diff := cmp.Diff(asked, in.Queries()); diff != "" {
		t.Errorf("Queries (-want +got):\n%s", diff)
	}

	// Go's own resolver takes the answers as they are.
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", in.DNS.String())
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got, err := r.LookupNetIP(ctx, "ip", "a.test.")
	if err != nil || !slices.Equal(got, []netip.Addr{a1, a2}) {
		t.Errorf("resolver: a.test: %v %v, want %v", got, err, []netip.Addr{a1, a2})
	}
	if _, err := r.LookupNetIP(ctx, "ip", "nope.test."); !isNotFound(err) {
		t.Errorf("resolver: nope.test: %v, want not found", err)
	}
}

func checkHTTP(t *testing.T, in *inet.Internet) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(in.CACert) {
		t.Fatal("CACert holds no certificate")
	}
	// A Transport of its own: no proxy from the environment, whatever it says.
	client := func(serverName string) *http.Client {
		return &http.Client{
			Timeout:   10 * time.Second,
			Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: serverName}},
		}
	}
	get := func(c *http.Client, url, host string) (string, error) {
		req, err := http.NewRequest("GET", url, nil)
		if err != nil {
			return "", err
		}
		req.Host = host
		resp, err := c.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return "", fmt.Errorf("%s: %s", resp.Status, b)
		}
		return string(b), err
	}
	for _, c := range []struct {
		site string
		addr netip.Addr
	}{{"a.test", a1}, {"a.test", a2}, {"b.test", b1}} {
		for _, scheme := range []struct {
			name string
			port uint16
		}{{"http", 80}, {"https", 443}} {
			url := scheme.name + "://" + c.addr.String() + "/"
			want := fmt.Sprintf("site=%s local=%s", c.site, netip.AddrPortFrom(c.addr, scheme.port))
			if got, err := get(client(c.site), url, c.site); err != nil || got != want {
				t.Errorf("GET %s (Host %s): %q %v, want %q", url, c.site, got, err, want)
			}
		}
	}
	// The certificate holds the addresses too, and only the sites' names.
	if _, err := get(client(""), "https://"+a1.String()+"/", "a.test"); err != nil {
		t.Errorf("GET https://%s/ verifying the address: %v", a1, err)
	}
	if _, err := get(client("other.test"), "https://"+a1.String()+"/", "other.test"); err == nil {
		t.Errorf("GET https://%s/ as other.test: verified, want a certificate error", a1)
	}

	const n = 3<<20 + 17
	for _, scheme := range []string{"http", "https"} {
		c := client("a.test")
		url := fmt.Sprintf("%s://%s/bytes?n=%d", scheme, a1, n)
		if got, err := get(c, url, "a.test"); err != nil || len(got) != n {
			t.Errorf("GET %s: %d bytes, %v; want %d", url, len(got), err, n)
		}
		url = fmt.Sprintf("%s://%s/sink", scheme, a1)
		resp, err := c.Post(url, "application/octet-stream", bytes.NewReader(make([]byte, n)))
		if err != nil {
			t.Errorf("POST %s: %v", url, err)
			continue
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(b) != strconv.Itoa(n) {
			t.Errorf("POST %s: %q %v, want %d", url, b, err, n)
		}
	}

	// A header's digest, not its value; 404 without it.
	req, _ := http.NewRequest("GET", "https://"+a1.String()+"/digest?header=X-Key", nil)
	req.Host = "a.test"
	req.Header.Set("X-Key", "value")
	digest := func(req *http.Request) string {
		resp, err := client("a.test").Do(req)
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return fmt.Sprintf("%d %s", resp.StatusCode, b)
	}
	if got, want := digest(req), fmt.Sprintf("200 sha256=%x", sha256.Sum256([]byte("value"))); got != want {
		t.Errorf("GET /digest: %q, want %q", got, want)
	}
	req.Header.Del("X-Key")
	if got := digest(req); !strings.HasPrefix(got, "404 ") {
		t.Errorf("GET /digest without the header: %q, want 404", got)
	}
}

func checkEcho(t *testing.T, in *inet.Internet) {
	for _, a := range []netip.Addr{a1, a2, b1, extra} {
		for _, network := range []string{"tcp", "udp"} {
			addr := netip.AddrPortFrom(a, 7).String()
			msg := "hello " + network + " " + addr
			c, err := net.DialTimeout(network, addr, 2*time.Second)
			if err != nil {
				t.Errorf("dialing %s %s: %v", network, addr, err)
				continue
			}
			c.SetDeadline(time.Now().Add(2 * time.Second))
			buf := make([]byte, len(msg))
			_, err = io.WriteString(c, msg)
			if err == nil {
				_, err = io.ReadFull(c, buf)
			}
			c.Close()
			if err != nil || string(buf) != msg {
				t.Errorf("echo %s %s: %q %v, want %q", network, addr, buf, err, msg)
			}
		}
	}
}

// ask sends one question to server over network ("udp" or "tcp").
func ask(network string, server netip.AddrPort, name string, qtype dnsmessage.Type) (dnsmessage.Message, error) {
	q := dnsmessage.Message{
		Header:    dnsmessage.Header{ID: 0x5ab, RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName(name + "."), Type: qtype, Class: dnsmessage.ClassINET}},
	}
	packed, err := q.Pack()
	if err != nil {
		return dnsmessage.Message{}, err
	}
	c, err := net.DialTimeout(network, server.String(), 2*time.Second)
	if err != nil {
		return dnsmessage.Message{}, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	var resp []byte
	if network == "tcp" {
		if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(packed))), packed...)); err != nil {
			return dnsmessage.Message{}, err
		}
		var n [2]byte
		if _, err := io.ReadFull(c, n[:]); err != nil {
			return dnsmessage.Message{}, err
		}
		resp = make([]byte, binary.BigEndian.Uint16(n[:]))
		if _, err := io.ReadFull(c, resp); err != nil {
			return dnsmessage.Message{}, err
		}
	} else {
		if _, err := c.Write(packed); err != nil {
			return dnsmessage.Message{}, err
		}
		resp = make([]byte, 65535)
		n, err := c.Read(resp)
		if err != nil {
			return dnsmessage.Message{}, err
		}
		resp = resp[:n]
	}
	var m dnsmessage.Message
	if err := m.Unpack(resp); err != nil {
		return dnsmessage.Message{}, err
	}
	if m.ID != q.ID || !m.Response {
		return dnsmessage.Message{}, fmt.Errorf("answer to another query: %+v", m.Header)
	}
	return m, nil
}

func routesTo(t *testing.T, a netip.Addr) []netlink.Route {
	t.Helper()
	rs, err := netlink.RouteListFiltered(netlink.FAMILY_V4,
		&netlink.Route{Dst: &net.IPNet{IP: net.IP(a.AsSlice()), Mask: net.CIDRMask(32, 32)}}, netlink.RT_FILTER_DST)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func isNotFound(err error) bool {
	var dnsErr *net.DNSError
	return errors.As(err, &dnsErr) && dnsErr.IsNotFound
}
