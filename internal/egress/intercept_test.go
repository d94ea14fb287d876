package egress

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// echoHeaders answers every request with the headers the rules set and
// the ones a client sets itself, as "Name=value" lines.
var echoHeaders = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	for _, k := range []string{"X-Secret", "Authorization", "X-Forwarded-For", "X-Own"} {
		fmt.Fprintf(w, "%s=%s\n", k, strings.Join(r.Header.Values(k), ","))
	}
	fmt.Fprintf(w, "host=%s query=%s\n", r.Host, r.URL.RawQuery)
})

const secretRules = `{"rules":{"example.com":[{"transform":{"headers":{"x-secret":"s3cret","Authorization":"Bearer rule"}}}],` +
	`"web.test":[{"transform":{"headers":{"X-Secret":"plain"}}}],"*.example.com":[{}]}}`

func testCA(t *testing.T) *CA {
	t.Helper()
	ca, err := NewCA(bytes.Repeat([]byte{7}, MinCASecretLen), "isbtest")
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// sandboxClient is an HTTP client of a sandbox whose every connection goes
// to the proxy at addr and that trusts roots.
func sandboxClient(addr string, roots *x509.CertPool) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		},
		TLSClientConfig: &tls.Config{RootCAs: roots},
	}}
}

func get(t *testing.T, c *http.Client, url string, hdr map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "error: " + err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestProxyIntercepts(t *testing.T) {
	tlsSrv := httptest.NewTLSServer(echoHeaders) // its certificate names example.com
	t.Cleanup(tlsSrv.Close)
	plainSrv := httptest.NewServer(echoHeaders)
	t.Cleanup(plainSrv.Close)
	routes := map[string]string{
		"198.18.0.11:443": strings.TrimPrefix(tlsSrv.URL, "https://"),
		"198.18.0.10:80":  strings.TrimPrefix(plainSrv.URL, "http://"),
	}
	ca := testCA(t)
	sandboxRoots := x509.NewCertPool()
	sandboxRoots.AppendCertsFromPEM(ca.CertPEM())
	upstreamRoots := x509.NewCertPool()
	upstreamRoots.AddCert(tlsSrv.Certificate())
	own := map[string]string{"Authorization": "Bearer own", "X-Own": "kept", "X-Forwarded-For": "192.0.2.1"}
	withRules := "X-Secret=s3cret\nAuthorization=Bearer rule\nX-Forwarded-For=192.0.2.1\nX-Own=kept\n"

	tests := []struct {
		name      string
		orig      string
		url       string
		upstream  *x509.CertPool
		noCA      bool
		roots     *x509.CertPool // the sandbox's; nil: sandboxRoots
		want      string         // prefix of "status body"
		wantEvent eventKey
	}{
		{
			name: "HTTPS to a name with rules: TLS terminated, headers set and replaced",
			orig: "198.18.0.11:443", url: "https://example.com/x?a=%zz", upstream: upstreamRoots,
			want:      "200 " + withRules + "host=example.com query=a=%zz\n",
			wantEvent: eventKey{EventProxy, "example.com", "", "198.18.0.11", true, "ceiling:example.com + rules:example.com"},
		},
		{
			name: "HTTP to a name with rules",
			orig: "198.18.0.10:80", url: "http://web.test/", upstream: upstreamRoots,
			want:      "200 X-Secret=plain\nAuthorization=Bearer own\n",
			wantEvent: eventKey{EventProxy, "web.test", "", "198.18.0.10", true, "ceiling:web.test + rules:web.test"},
		},
		{
			name: "an upstream certificate the proxy does not trust: 502, nothing sent",
			orig: "198.18.0.11:443", url: "https://example.com/", upstream: x509.NewCertPool(),
			want:      "502 agent-sandbox: cannot reach example.com: TLS with example.com: tls: failed to verify certificate: x509: certificate signed by unknown authority",
			wantEvent: eventKey{EventProxy, "example.com", "", "198.18.0.11", true, "ceiling:example.com + rules:example.com"},
		},
		{
			name: "without a CA a TLS connection with rules is refused",
			orig: "198.18.0.11:443", url: "https://example.com/", upstream: upstreamRoots, noCA: true,
			want:      "0 error: ",
			wantEvent: eventKey{EventProxy, "example.com", "", "198.18.0.11", false, "rules:example.com (no CA to terminate TLS with)"},
		},
		{
			name: "a name without rules stays a blind TLS pass-through",
			orig: "198.18.0.11:443", url: "https://example.com/", upstream: upstreamRoots, noCA: true, roots: upstreamRoots,
			want:      "200 X-Secret=\nAuthorization=Bearer own\n",
			wantEvent: eventKey{EventProxy, "example.com", "", "198.18.0.11", true, "ceiling:example.com"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			network := secretRules
			if tt.roots != nil {
				network = `{"rules":{"*.example.com":[{"transform":{"headers":{"X-Secret":"s"}}}]}}`
			}
			pol := mustPolicy(t, proxyCeiling(), network, nil)
			env := startProxy(t, pol, netip.MustParseAddrPort(tt.orig), routes, func(c *ProxyConfig) {
				c.UpstreamRoots = tt.upstream
				if !tt.noCA {
					c.CA = ca
				}
			})
			roots := sandboxRoots
			if tt.roots != nil {
				roots = tt.roots
			}
			status, body := get(t, sandboxClient(env.addr, roots), tt.url, own)
			if got := fmt.Sprintf("%d %s", status, body); !strings.HasPrefix(got, tt.want) {
				t.Errorf("got %q, want %q…", got, tt.want)
			}
			env.stop(t)
			events, _ := env.ring.Since(0, 0)
			if diff := cmp.Diff([]eventKey{tt.wantEvent}, keys(events)); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

// TestProxyInterceptsLive: on one kept-alive connection, each request
// gets the rule as it is then, and a request for another name is refused.
func TestProxyInterceptsLive(t *testing.T) {
	tlsSrv := httptest.NewTLSServer(echoHeaders)
	t.Cleanup(tlsSrv.Close)
	routes := map[string]string{"198.18.0.11:443": strings.TrimPrefix(tlsSrv.URL, "https://")}
	ca := testCA(t)
	var cur atomic.Pointer[Policy]
	set := func(network string) {
		p := mustPolicy(t, proxyCeiling(), network, nil)
		cur.Store(&p)
	}
	set(`{"rules":{"example.com":[{"transform":{"headers":{"X-Secret":"one"}}}]}}`)
	env := startProxy(t, Policy{}, netip.MustParseAddrPort("198.18.0.11:443"), routes, func(c *ProxyConfig) {
		c.Policy = func() Policy { return *cur.Load() }
		c.CA = ca
		c.UpstreamRoots = x509.NewCertPool()
		c.UpstreamRoots.AddCert(tlsSrv.Certificate())
	})
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM())
	client := sandboxClient(env.addr, roots)
	// Another name on the same connection: the client's TLS session is
	// for example.com; the Host says otherwise.
	misdirected := func() (int, string) {
		req, _ := http.NewRequest(http.MethodGet, "https://example.com/", nil)
		req.Host = "other.test"
		resp, err := client.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	steps := []struct {
		network string // "" keeps the policy
		do      func() (int, string)
		want    string
	}{
		{do: func() (int, string) { return get(t, client, "https://example.com/", nil) }, want: "200 X-Secret=one\n"},
		{network: `{"rules":{"example.com":[{"transform":{"headers":{"X-Secret":"two"}}}]}}`,
			do: func() (int, string) { return get(t, client, "https://example.com/", nil) }, want: "200 X-Secret=two\n"},
		{do: misdirected, want: `421 agent-sandbox: a request for "other.test" on a connection to example.com refused`},
		{network: `{}`, do: func() (int, string) { return get(t, client, "https://example.com/", nil) }, want: "200 X-Secret=\n"},
	}
	for i, s := range steps {
		if s.network != "" {
			set(s.network)
		}
		status, body := s.do()
		if got := fmt.Sprintf("%d %s", status, body); !strings.HasPrefix(got, s.want) {
			t.Errorf("step %d: got %q, want %q…", i, got, s.want)
		}
	}
	env.stop(t)
	// One connection from the sandbox, one upstream: the requests shared
	// them.
	events, _ := env.ring.Since(0, 0)
	if len(events) != 1 {
		t.Errorf("events:\n%v", keys(events))
	}
}

func TestCA(t *testing.T) {
	secret := bytes.Repeat([]byte{1}, MinCASecretLen)
	a, err := NewCA(secret, "isb1")
	if err != nil {
		t.Fatal(err)
	}
	again, err := NewCA(secret, "isb1")
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewCA(secret, "isb2")
	if err != nil {
		t.Fatal(err)
	}
	// The same sandbox gets the same CA (what a restarted server needs),
	// another sandbox another.
	if !a.key.Equal(again.key) || a.cert.SerialNumber.Cmp(again.cert.SerialNumber) != 0 || !bytes.Equal(a.cert.SubjectKeyId, again.cert.SubjectKeyId) {
		t.Error("the CA derived again differs")
	}
	if a.key.Equal(other.key) {
		t.Error("two sandboxes share a CA key")
	}
	if _, err := NewCA(secret[:16], "isb1"); err == nil {
		t.Error("a short secret was accepted")
	}
	// A leaf signed by the CA derived again verifies against the first's
	// certificate, which is what the sandbox holds.
	now := time.Now()
	leaf, err := again.leaf("api.example.com", now)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(a.CertPEM())
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{DNSName: "api.example.com", Roots: roots, CurrentTime: now}); err != nil {
		t.Errorf("verifying a leaf: %v", err)
	}
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{DNSName: "api.example.com", Roots: roots, CurrentTime: now.Add(-23 * time.Hour)}); err != nil {
		t.Errorf("verifying a leaf on a clock a day behind: %v", err)
	}
	if c, _ := again.leaf("api.example.com", now.Add(time.Hour)); c != leaf {
		t.Error("a fresh leaf was made again")
	}
	if c, _ := again.leaf("api.example.com", now.Add(leafLifetime-leafRenew+time.Minute)); c == leaf {
		t.Error("a leaf close to its end was not renewed")
	}
	for i := range maxLeaves + 1 {
		if _, err := again.leaf(fmt.Sprintf("n%d.example.com", i), now); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(again.leaves); n > maxLeaves {
		t.Errorf("%d leaves kept, want at most %d", n, maxLeaves)
	}
}

func TestParseHeaderRules(t *testing.T) {
	long := strings.Repeat("a", 60)
	tests := []struct {
		name     string
		rules    string
		wantErr  string
		wantJSON string // RulesJSON
		match    map[string]string
	}{
		{name: "absent", rules: `null`},
		{name: "empty", rules: `{}`},
		{
			name:     "exact beats the longest wildcard; keys in lower case",
			rules:    `{"API.example.com":[{"transform":{"headers":{"X-A":"exact"}}}],"*.example.com":[{"transform":{"headers":{"X-A":"short"}}}],"*.b.example.com":[{"transform":{"headers":{"x-a":"long"}}}],"none.test":[{}],"null.test":[{"transform":null}]}`,
			wantJSON: `{"*.b.example.com":[{"transform":{"headers":{"x-a":"long"}}}],"*.example.com":[{"transform":{"headers":{"X-A":"short"}}}],"api.example.com":[{"transform":{"headers":{"X-A":"exact"}}}],"none.test":[{}],"null.test":[{"transform":null}]}`,
			match: map[string]string{
				"api.example.com": "*api.example.com X-A=exact", "Api.Example.Com.": "*api.example.com X-A=exact",
				"x.example.com": "**.example.com X-A=short", "a.b.example.com": "**.b.example.com X-A=long",
				"example.com": "", "none.test": "*none.test", "x.none.test": "",
			},
		},
		{name: "too many domains", rules: `{"a1.t":[],"a2.t":[],"a3.t":[],"a4.t":[],"a5.t":[],"a6.t":[],"a7.t":[],"a8.t":[],"a9.t":[],"a10.t":[],"a11.t":[]}`,
			wantErr: "Network rules can have at most 10 domains."},
		{name: "empty domain", rules: `{"":[]}`, wantErr: "Rule domain must not be empty."},
		{name: "long domain", rules: `{"` + long + "." + long + "." + long + `.com":[]}`, wantErr: "exceeds maximum length of 128 characters."},
		{name: "IP", rules: `{"1.2.3.4":[]}`, wantErr: `Rule domain "1.2.3.4" is not a valid domain name.`},
		{name: "CIDR", rules: `{"1.2.3.0/24":[]}`, wantErr: `Rule domain "1.2.3.0/24" is not a valid domain name.`},
		{name: "bare star", rules: `{"*":[]}`, wantErr: `Rule domain "*" is not a valid domain name.`},
		{name: "twice", rules: `{"a.test":[],"A.test":[]}`, wantErr: `is given twice`},
		{name: "two rules", rules: `{"a.test":[{},{}]}`, wantErr: `Domain "a.test" can have at most 1 transform rule.`},
		{name: "unknown field", rules: `{"a.test":[{"transfrom":{}}]}`, wantErr: `unknown field "transfrom"`},
		{name: "bad header name", rules: `{"a.test":[{"transform":{"headers":{"X A":"b"}}}]}`,
			wantErr: `Header name "X A" in rule for domain "a.test" must contain only valid HTTP token characters.`},
		{name: "bad header value", rules: `{"a.test":[{"transform":{"headers":{"X-A":"b\r\nX-B: c"}}}]}`,
			wantErr: `Value for header "X-A" in rule for domain "a.test" contains invalid characters.`},
		{name: "long value", rules: `{"a.test":[{"transform":{"headers":{"X-A":"` + strings.Repeat("v", 2049) + `"}}}]}`,
			wantErr: `exceeds maximum length of 2048 characters.`},
		{name: "same header twice", rules: `{"a.test":[{"transform":{"headers":{"X-A":"1","x-a":"2"}}}]}`, wantErr: `Header "X-A" in rule for domain "a.test" is given twice`},
		{name: "framing header", rules: `{"a.test":[{"transform":{"headers":{"content-length":"0"}}}]}`, wantErr: `cannot be set by a rule`},
		{name: "E2B secret", rules: `{"a.test":[{"transform":{"headers":{"Authorization":"Bearer ${e2b.secrets.openai}"}}}]}`,
			wantErr: `names an E2B secret or identity token`},
		{name: "not an object", rules: `[]`, wantErr: `network.rules: json`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := ParseRules(json.RawMessage(`{"rules":`+tt.rules+`}`), nil)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseRules = %v, want an error with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := string(r.RulesJSON()); got != tt.wantJSON {
				t.Errorf("RulesJSON = %s, want %s", got, tt.wantJSON)
			}
			p, err := NewPolicy(DefaultCeiling(), r)
			if err != nil {
				t.Fatal(err)
			}
			for name, want := range tt.match {
				var got string
				if hs, pattern, ok := p.HeaderRule(name); ok {
					got = "*" + pattern
					for _, h := range hs {
						got += " " + h.Name + "=" + h.Value
					}
				}
				if got != want {
					t.Errorf("HeaderRule(%s) = %q, want %q", name, got, want)
				}
			}
		})
	}
}
