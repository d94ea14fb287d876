package fetch

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
)

// fakeNet answers lookups from a table and records what is dialled; every
// dial succeeds with one end of a pipe.
type fakeNet struct {
	mu     sync.Mutex
	names  map[string][][]netip.Addr // successive answers per name; the last repeats
	dialed []string
}

func (f *fakeNet) resolve(_ context.Context, host string) ([]netip.Addr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	answers, ok := f.names[host]
	if !ok {
		return nil, errors.New("no such host")
	}
	a := answers[0]
	if len(answers) > 1 {
		f.names[host] = answers[1:]
	}
	return a, nil
}

func (f *fakeNet) dial(_ context.Context, _, address string) (net.Conn, error) {
	f.mu.Lock()
	f.dialed = append(f.dialed, address)
	f.mu.Unlock()
	c, s := net.Pipe()
	s.Close()
	return c, nil
}

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func newTestDialer(t *testing.T, f *fakeNet, allow ...string) *Dialer {
	t.Helper()
	d, err := New(Config{
		Allow:        allow,
		SandboxPools: []netip.Prefix{netip.MustParsePrefix("10.200.0.0/16")},
		// A public address of the host: closed although no egress range holds it.
		HostAddrs: func() ([]netip.Prefix, error) {
			return []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("198.51.100.7/32")}, nil
		},
		Resolve: f.resolve,
		Dial:    f.dial,
	})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestDialRules(t *testing.T) {
	names := map[string][][]netip.Addr{
		"registry.example": {addrs("203.0.113.10")},
		"mixed.example":    {addrs("10.1.2.3", "203.0.113.11", "::1")},
		"metadata.example": {addrs("169.254.169.254")},
		"self.example":     {addrs("198.51.100.7")},
		"sandbox.example":  {addrs("10.200.0.6")},
		"v6.example":       {addrs("2001:db8::1", "fd00::1")},
		"mapped.example":   {addrs("::ffff:127.0.0.1")},
		"internal.example": {addrs("192.168.1.5")},
	}
	tests := []struct {
		name    string
		allow   []string
		network string
		address string
		dial    []string // what is dialled, in order (each dial succeeds, so one)
		refused string   // the refusal's text, when refused
	}{
		{name: "a public name is dialled by the address it resolved to",
			address: "registry.example:443", dial: []string{"203.0.113.10:443"}},
		{name: "a public IP", address: "203.0.113.99:443", dial: []string{"203.0.113.99:443"}},
		{name: "loopback",
			address: "127.0.0.1:5000",
			refused: "registry 127.0.0.1:5000 resolves to 127.0.0.1, in the loopback range 127.0.0.0/8: refused; allow it with --registry 127.0.0.1:5000"},
		{name: "loopback IPv6", address: "[::1]:5000",
			refused: "registry [::1]:5000 resolves to ::1, in the loopback range ::1/128: refused; allow it with --registry [::1]:5000"},
		{name: "a name resolving to the metadata address", address: "metadata.example:80",
			refused: "registry metadata.example:80 resolves to 169.254.169.254, in the link-local range 169.254.0.0/16: refused; allow it with --registry metadata.example:80"},
		{name: "a private network", address: "internal.example:443",
			refused: "registry internal.example:443 resolves to 192.168.1.5, in the private range 192.168.0.0/16: refused; allow it with --registry internal.example:443"},
		{name: "the host's own public address", address: "self.example:443",
			refused: "registry self.example:443 resolves to 198.51.100.7, one of this host's own addresses: refused; allow it with --registry self.example:443"},
		{name: "a sandbox", address: "sandbox.example:443",
			refused: "registry sandbox.example:443 resolves to 10.200.0.6, in the sandbox address pool 10.200.0.0/16: refused; allow it with --registry sandbox.example:443"},
		{name: "an IPv4-mapped IPv6 address is judged as IPv4", address: "mapped.example:443",
			refused: "registry mapped.example:443 resolves to 127.0.0.1, in the loopback range 127.0.0.0/8: refused; allow it with --registry mapped.example:443"},
		{name: "only the public addresses of a mixed answer are dialled",
			address: "mixed.example:443", dial: []string{"203.0.113.11:443"}},
		{name: "public IPv6, not unique-local", address: "v6.example:443", dial: []string{"[2001:db8::1]:443"}},
		{name: "tcp4 skips IPv6 answers", network: "tcp4", address: "v6.example:443",
			refused: ""}, // no IPv4 address at all: an error, not a refusal
		{name: "an allowed host:port is dialled as named", allow: []string{"127.0.0.1:5000"},
			address: "127.0.0.1:5000", dial: []string{"127.0.0.1:5000"}},
		{name: "an allowed host is allowed on every port", allow: []string{"Internal.Example."},
			address: "internal.example:8443", dial: []string{"internal.example:8443"}},
		{name: "an allowed host:port does not open another port", allow: []string{"127.0.0.1:5000"},
			address: "127.0.0.1:5001",
			refused: "registry 127.0.0.1:5001 resolves to 127.0.0.1, in the loopback range 127.0.0.0/8: refused; allow it with --registry 127.0.0.1:5001"},
		{name: "an allowed IPv6 host", allow: []string{"[::1]:5000"}, address: "[::1]:5000", dial: []string{"[::1]:5000"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeNet{names: maps(names)}
			d := newTestDialer(t, f, tt.allow...)
			network := tt.network
			if network == "" {
				network = "tcp"
			}
			c, err := d.DialContext(t.Context(), network, tt.address)
			var re *RefusedError
			switch {
			case tt.dial != nil:
				if err != nil {
					t.Fatalf("DialContext: %v", err)
				}
				c.Close()
			case tt.refused != "":
				if !errors.As(err, &re) {
					t.Fatalf("DialContext = %v, want a *RefusedError", err)
				}
				if err.Error() != tt.refused {
					t.Errorf("refusal:\n got %s\nwant %s", err, tt.refused)
				}
			default:
				if err == nil || errors.As(err, &re) {
					t.Fatalf("DialContext = %v, want a plain error", err)
				}
			}
			if !slices.Equal(f.dialed, tt.dial) {
				t.Errorf("dialled %q, want %q", f.dialed, tt.dial)
			}
		})
	}
}

func maps(m map[string][][]netip.Addr) map[string][][]netip.Addr {
	out := map[string][][]netip.Addr{}
	for k, v := range m {
		out[k] = slices.Clone(v)
	}
	return out
}

// TestDialChecksEveryDial: a name that resolved to a public address and
// then to loopback (DNS rebinding) is refused on the second dial; the
// check is made when connecting, not once per URL.
func TestDialChecksEveryDial(t *testing.T) {
	f := &fakeNet{names: map[string][][]netip.Addr{"rebind.example": {addrs("203.0.113.12"), addrs("127.0.0.1")}}}
	d := newTestDialer(t, f)
	c, err := d.DialContext(t.Context(), "tcp", "rebind.example:443")
	if err != nil {
		t.Fatalf("first dial: %v", err)
	}
	c.Close()
	var re *RefusedError
	if _, err := d.DialContext(t.Context(), "tcp", "rebind.example:443"); !errors.As(err, &re) || re.Addr != netip.MustParseAddr("127.0.0.1") {
		t.Fatalf("second dial = %v, want refused for 127.0.0.1", err)
	}
	if !slices.Equal(f.dialed, []string{"203.0.113.12:443"}) {
		t.Errorf("dialled %q", f.dialed)
	}
}

func TestHostAddrsFailClosed(t *testing.T) {
	f := &fakeNet{}
	d, err := New(Config{HostAddrs: func() ([]netip.Prefix, error) { return nil, errors.New("netlink down") }, Dial: f.dial})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.DialContext(t.Context(), "tcp", "203.0.113.1:443"); err == nil || !strings.Contains(err.Error(), "netlink down") {
		t.Fatalf("DialContext = %v, want the host address error", err)
	}
	if len(f.dialed) != 0 {
		t.Errorf("dialled %q", f.dialed)
	}
}

func TestNewChecksAllow(t *testing.T) {
	for _, e := range []string{"", "http://registry", "registry:0", "registry:99999", "registry:http", ":5000", "a b"} {
		if _, err := New(Config{Allow: []string{e}}); err == nil || !strings.Contains(err.Error(), "--registry") {
			t.Errorf("New(Allow %q) = %v, want an error naming --registry", e, err)
		}
	}
	for _, e := range []string{"registry.internal", "registry.internal:5000", "127.0.0.1:5000", "10.0.0.1", "::1", "[fd00::1]:5000"} {
		if _, err := New(Config{Allow: []string{e}}); err != nil {
			t.Errorf("New(Allow %q) = %v", e, err)
		}
	}
}

// TestTransportChecksRedirects follows a redirect from an allowed server
// on loopback to one that is not allowed: the transport refuses to dial
// the second, and with both allowed the request gets through.
func TestTransportChecksRedirects(t *testing.T) {
	blob := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "blob") }))
	t.Cleanup(blob.Close)
	reg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, blob.URL+"/blob", http.StatusTemporaryRedirect)
	}))
	t.Cleanup(reg.Close)
	regHost, blobHost := strings.TrimPrefix(reg.URL, "http://"), strings.TrimPrefix(blob.URL, "http://")
	get := func(allow ...string) (string, error) {
		d, err := New(Config{Allow: allow})
		if err != nil {
			t.Fatal(err)
		}
		c := &http.Client{Transport: d.Transport()}
		defer c.CloseIdleConnections()
		resp, err := c.Get(reg.URL + "/v2/x/blobs/sha256:0")
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	// Positive control: with both allowed the redirect is followed.
	if body, err := get(regHost, blobHost); err != nil || body != "blob" {
		t.Fatalf("with both allowed: %q, %v", body, err)
	}
	var re *RefusedError
	if _, err := get(regHost); !errors.As(err, &re) || net.JoinHostPort(re.Host, re.Port) != blobHost {
		t.Fatalf("redirect to %s with only %s allowed: %v, want refused", blobHost, regHost, err)
	} else {
		t.Log(err)
	}
	if _, err := get(); !errors.As(err, &re) || net.JoinHostPort(re.Host, re.Port) != regHost {
		t.Fatalf("nothing allowed: %v, want %s refused", err, regHost)
	}
}
