package egress

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func ptr[T any](v T) *T { return &v }

func TestParseRules(t *testing.T) {
	tests := []struct {
		name      string
		network   string
		internet  *bool
		wantErr   []string // substrings, all present
		wantAllow []string
		wantDeny  []string
		wantOff   bool
	}{
		{name: "absent"},
		{name: "null", network: "null"},
		{name: "internet true", network: "{}", internet: ptr(true)},
		{name: "internet false", internet: ptr(false), wantOff: true},
		{
			name:      "every kind of entry",
			network:   `{"allowOut":["1.2.3.4","10.0.0.0/8","example.com","*.Example.COM.","2001:db8::/32","::1","10.1.2.3/8"],"denyOut":["bad.example.com","*.evil.test","203.0.113.7"]}`,
			wantAllow: []string{"1.2.3.4", "10.0.0.0/8", "example.com", "*.Example.COM.", "2001:db8::/32", "::1", "10.1.2.3/8"},
			wantDeny:  []string{"bad.example.com", "*.evil.test", "203.0.113.7"},
		},
		{
			name:    "other network fields are ignored",
			network: `{"allowPublicTraffic":false,"maskRequestHost":"x-${PORT}","httpsPorts":[443],"rules":{"a.com":[]}}`,
		},
		{name: "empty entry", network: `{"allowOut":[""]}`, wantErr: []string{`network.allowOut[0] "": empty entry`}},
		{name: "space", network: `{"allowOut":[" a.com"]}`, wantErr: []string{`network.allowOut[0] " a.com": leading or trailing space`}},
		{name: "bad prefix length", network: `{"denyOut":["10.0.0.0/33"]}`, wantErr: []string{`network.denyOut[0] "10.0.0.0/33": invalid CIDR`}},
		{name: "bad IPv4", network: `{"allowOut":["1.2.3.999"]}`, wantErr: []string{`network.allowOut[0] "1.2.3.999": invalid IP address`}},
		{name: "bad IPv6", network: `{"allowOut":["2001:db8::g"]}`, wantErr: []string{`invalid IP address`}},
		{name: "zone", network: `{"allowOut":["fe80::1%eth0"]}`, wantErr: []string{`IP address with a zone`}},
		{name: "mapped CIDR", network: `{"allowOut":["::ffff:10.0.0.0/104"]}`, wantErr: []string{`IPv4-mapped IPv6 CIDR`}},
		{name: "bare star", network: `{"allowOut":["*"]}`, wantErr: []string{`a wildcard is allowed only as a leading "*."`}},
		{name: "inner star", network: `{"allowOut":["a.*.com"]}`, wantErr: []string{`a wildcard is allowed only as a leading "*."`}},
		{name: "double star", network: `{"allowOut":["*.*.com"]}`, wantErr: []string{`a wildcard is allowed only`}},
		{name: "space in name", network: `{"allowOut":["exa mple.com"]}`, wantErr: []string{`invalid domain: invalid character ' ' in label "exa mple"`}},
		{name: "non-ASCII", network: `{"allowOut":["bücher.de"]}`, wantErr: []string{`invalid domain: non-ASCII name: give internationalised names in their xn-- (punycode) form`}},
		{name: "punycode is fine", network: `{"allowOut":["xn--bcher-kva.de"]}`, wantAllow: []string{"xn--bcher-kva.de"}},
		{name: "empty label", network: `{"denyOut":["a..b"]}`, wantErr: []string{`network.denyOut[0] "a..b": invalid domain: empty label`}},
		{name: "long label", network: fmt.Sprintf(`{"allowOut":["%s.com"]}`, strings.Repeat("a", 64)), wantErr: []string{`longer than 63 characters`}},
		{name: "long name", network: fmt.Sprintf(`{"allowOut":["%s"]}`, strings.Repeat("abcdefghi.", 26)), wantErr: []string{`name longer than 253 characters`}},
		{
			name:    "every bad entry is reported",
			network: `{"allowOut":["ok.com","",  "1.2.3.999"],"denyOut":["a b"]}`,
			wantErr: []string{`network.allowOut[1] ""`, `network.allowOut[2] "1.2.3.999"`, `network.denyOut[0] "a b"`},
		},
		{name: "not an object", network: `"a.com"`, wantErr: []string{"network: json"}},
		{name: "not a list", network: `{"allowOut":"a.com"}`, wantErr: []string{"network: json"}},
		{name: "not strings", network: `{"denyOut":[1]}`, wantErr: []string{"network: json"}},
		{
			name:    "too many entries",
			network: `{"allowOut":[` + strings.TrimSuffix(strings.Repeat(`"a.com",`, 1001), ",") + `]}`,
			wantErr: []string{"network.allowOut: 1001 entries, at most 1000 allowed"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := ParseRules(json.RawMessage(tt.network), tt.internet)
			if len(tt.wantErr) > 0 {
				if err == nil {
					t.Fatalf("ParseRules = nil error, want %q", tt.wantErr)
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not contain %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseRules: %v", err)
			}
			if r.InternetOff != tt.wantOff {
				t.Errorf("InternetOff = %v, want %v", r.InternetOff, tt.wantOff)
			}
			if diff := cmp.Diff(tt.wantAllow, r.AllowOut()); diff != "" {
				t.Errorf("AllowOut (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantDeny, r.DenyOut()); diff != "" {
				t.Errorf("DenyOut (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCeilingValidate(t *testing.T) {
	if err := DefaultCeiling().Validate(); err != nil {
		t.Fatalf("default ceiling: %v", err)
	}
	tests := []struct {
		name    string
		c       Ceiling
		wantErr string
	}{
		{"address in domain list", Ceiling{AllowDomains: []string{"10.0.0.0/8"}}, `ceiling.allowDomains[0] "10.0.0.0/8": an address: put it in a CIDR list`},
		{"domain in CIDR list", Ceiling{AllowCIDRs: []string{"example.com"}}, `ceiling.allowCIDRs[0] "example.com": not a CIDR or IP address`},
		{"bad deny domain", Ceiling{DenyDomains: []string{"a_b c"}}, `ceiling.denyDomains[0]`},
		{"bad deny CIDR", Ceiling{DenyCIDRs: []string{"1.2.3.4/40"}}, `ceiling.denyCIDRs[0] "1.2.3.4/40": invalid CIDR`},
		{"bad reserved", Ceiling{ReservedCIDRs: []string{"pool"}}, `ceiling.reservedCIDRs[0] "pool": not a CIDR or IP address`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.c.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate = %v, want error containing %q", err, tt.wantErr)
			}
			if _, err := NewPolicy(tt.c, Rules{}); err == nil {
				t.Fatal("NewPolicy accepted an invalid ceiling")
			}
		})
	}
}

func mustPolicy(t *testing.T, c Ceiling, network string, internet *bool) Policy {
	t.Helper()
	r, err := ParseRules(json.RawMessage(network), internet)
	if err != nil {
		t.Fatalf("ParseRules: %v", err)
	}
	p, err := NewPolicy(c, r)
	if err != nil {
		t.Fatalf("NewPolicy: %v", err)
	}
	return p
}

// check is one decision to verify: a name, or an address when the string
// parses as one (via AllowAddr, not AllowName).
type check struct {
	dest    string
	allowed bool
	rule    string
}

func TestDecisions(t *testing.T) {
	widen := DefaultCeiling()
	widen.SandboxMayWiden = true
	open := Ceiling{Open: true}
	tests := []struct {
		name     string
		ceiling  Ceiling
		network  string
		internet *bool
		checks   []check
	}{
		{
			name:    "default ceiling",
			ceiling: DefaultCeiling(),
			checks: []check{
				{"pypi.org", true, "ceiling:pypi.org"},
				{"PyPI.org.", true, "ceiling:pypi.org"},
				{"files.pythonhosted.org", true, "ceiling:files.pythonhosted.org"},
				{"raw.githubusercontent.com", true, "ceiling:*.githubusercontent.com"},
				{"a.b.githubusercontent.com", true, "ceiling:*.githubusercontent.com"},
				{"githubusercontent.com", false, RuleAllowlist},
				{"random-name.example", false, RuleAllowlist},
				{"pypi.org.evil.test", false, RuleAllowlist},
				{"evilpypi.org", false, RuleAllowlist},
				{"bücher.de", false, "invalid name: non-ASCII name: give internationalised names in their xn-- (punycode) form"},
				{"1.1.1.1", false, RuleAllowlist},
				{"169.254.169.254", false, "private:link-local 169.254.0.0/16"},
				{"2a04:4e42::223", false, "ipv6"},
			},
		},
		{
			name:     "allow_internet_access false blocks all, registries included",
			ceiling:  DefaultCeiling(),
			network:  `{"allowOut":["example.com","8.8.8.8"]}`,
			internet: ptr(false),
			checks: []check{
				{"pypi.org", false, RuleInternetOff},
				{"example.com", false, RuleInternetOff},
				{"8.8.8.8", false, RuleInternetOff},
			},
		},
		{
			name:     "allow_internet_access false under an open ceiling",
			ceiling:  open,
			internet: ptr(false),
			checks: []check{
				{"anything.example", false, RuleInternetOff},
				{"1.1.1.1", false, RuleInternetOff},
			},
		},
		{
			name:    "allowOut cannot widen an allowlist ceiling by default",
			ceiling: DefaultCeiling(),
			network: `{"allowOut":["example.com","203.0.113.0/24"]}`,
			checks: []check{
				{"example.com", false, "ceiling:allowlist (allowOut:example.com not permitted by the ceiling)"},
				{"203.0.113.9", false, "ceiling:allowlist (allowOut:203.0.113.0/24 not permitted by the ceiling)"},
				{"pypi.org", true, "ceiling:pypi.org"},
			},
		},
		{
			name:    "wildcard allowOut where the ceiling permits widening",
			ceiling: widen,
			network: `{"allowOut":["*.example.com"]}`,
			checks: []check{
				{"a.example.com", true, "allowOut:*.example.com"},
				{"a.b.example.com", true, "allowOut:*.example.com"},
				{"A.Example.Com.", true, "allowOut:*.example.com"},
				{"example.com", false, RuleAllowlist},
				{"notexample.com", false, RuleAllowlist},
				{"pypi.org", true, "ceiling:pypi.org"},
			},
		},
		{
			name:     "allowOut wins over allow_internet_access false where it counts",
			ceiling:  widen,
			network:  `{"allowOut":["example.com","8.8.8.8"]}`,
			internet: ptr(false),
			checks: []check{
				{"example.com", true, "allowOut:example.com"},
				{"8.8.8.8", true, "allowOut:8.8.8.8"},
				{"pypi.org", false, RuleInternetOff},
				{"1.1.1.1", false, RuleInternetOff},
			},
		},
		{
			name:    "allowOut beats denyOut, domains included",
			ceiling: widen,
			network: `{"allowOut":["*.example.com","example.org","203.0.113.0/24"],"denyOut":["bad.example.com","example.org","203.0.113.7","pypi.org"]}`,
			checks: []check{
				{"good.example.com", true, "allowOut:*.example.com"},
				{"bad.example.com", true, "allowOut:*.example.com"},
				{"example.org", true, "allowOut:example.org"},
				{"203.0.113.8", true, "allowOut:203.0.113.0/24"},
				{"203.0.113.7", true, "allowOut:203.0.113.0/24"},
				// A denyOut domain no allow entry names still denies it.
				{"pypi.org", false, "denyOut:pypi.org"},
			},
		},
		{
			name:    "denyOut beats the ceiling's allowlist",
			ceiling: DefaultCeiling(),
			network: `{"denyOut":["pypi.org","*.githubusercontent.com"]}`,
			checks: []check{
				{"pypi.org", false, "denyOut:pypi.org"},
				{"raw.githubusercontent.com", false, "denyOut:*.githubusercontent.com"},
				{"files.pythonhosted.org", true, "ceiling:files.pythonhosted.org"},
			},
		},
		{
			name:    "ALL_TRAFFIC in denyOut denies every IPv4 address allowOut does not name",
			ceiling: open,
			network: `{"denyOut":["0.0.0.0/0"],"allowOut":["8.8.8.8"]}`,
			checks: []check{
				{"8.8.8.8", true, "allowOut:8.8.8.8"},
				{"1.1.1.1", false, "denyOut:0.0.0.0/0"},
				{"example.com", true, RuleOpen}, // the name; its addresses are then denied
			},
		},
		{
			name:    "E2B's only-this-host idiom under an allowlist that does not widen",
			ceiling: DefaultCeiling(),
			network: `{"allowOut":["pypi.org","example.com"],"denyOut":["0.0.0.0/0"]}`,
			checks: []check{
				{"pypi.org", true, "ceiling:pypi.org"},
				{"example.com", false, "ceiling:allowlist (allowOut:example.com not permitted by the ceiling)"},
				{"files.pythonhosted.org", true, "ceiling:files.pythonhosted.org"}, // its addresses are denied
				{"151.101.0.223", false, "denyOut:0.0.0.0/0"},
			},
		},
		{
			name:    "ceiling CIDR allow of a public range",
			ceiling: Ceiling{AllowCIDRs: []string{"198.51.100.0/24"}},
			checks: []check{
				{"198.51.100.5", true, "ceiling:198.51.100.0/24"},
				{"198.51.101.5", false, RuleAllowlist},
				{"pypi.org", false, RuleAllowlist},
			},
		},
		{
			name:    "sandbox CIDR allow of a public range",
			ceiling: widen,
			network: `{"allowOut":["198.51.100.0/24","8.8.8.8"]}`,
			checks: []check{
				{"198.51.100.5", true, "allowOut:198.51.100.0/24"},
				{"8.8.8.8", true, "allowOut:8.8.8.8"},
				{"8.8.4.4", false, RuleAllowlist},
			},
		},
		{
			name:    "sandbox rules never open private ranges",
			ceiling: Ceiling{Open: true, SandboxMayWiden: true},
			network: `{"allowOut":["10.0.0.0/8","169.254.169.254","127.0.0.1","0.0.0.0/0","fc00::/7"]}`,
			checks: []check{
				{"10.1.1.1", false, "private:private 10.0.0.0/8"},
				{"169.254.169.254", false, "private:link-local 169.254.0.0/16"},
				{"127.0.0.1", false, "private:loopback 127.0.0.0/8"},
				{"fd00::1", false, "private:unique-local fc00::/7"},
				{"8.8.8.8", true, "allowOut:0.0.0.0/0"},
			},
		},
		{
			name:    "open ceiling still denies private, metadata, loopback and IPv6",
			ceiling: open,
			checks: []check{
				{"anything.example", true, RuleOpen},
				{"8.8.8.8", true, RuleOpen},
				{"::ffff:8.8.8.8", true, RuleOpen},
				{"10.0.0.1", false, "private:private 10.0.0.0/8"},
				{"172.16.5.4", false, "private:private 172.16.0.0/12"},
				{"192.168.1.1", false, "private:private 192.168.0.0/16"},
				{"100.64.0.1", false, "private:cgnat 100.64.0.0/10"},
				{"127.0.0.53", false, "private:loopback 127.0.0.0/8"},
				{"169.254.169.254", false, "private:link-local 169.254.0.0/16"},
				{"0.0.0.0", false, "private:this-network 0.0.0.0/8"},
				{"224.0.0.251", false, "private:multicast 224.0.0.0/4"},
				{"255.255.255.255", false, "private:reserved 240.0.0.0/4"},
				{"::ffff:10.0.0.1", false, "private:private 10.0.0.0/8"},
				{"::", false, "private:unspecified ::/128"},
				{"::1", false, "private:loopback ::1/128"},
				{"fe80::1", false, "private:link-local fe80::/10"},
				{"ff02::1", false, "private:multicast ff00::/8"},
				{"64:ff9b::a00:1", false, "private:nat64 64:ff9b::/96"},
				{"2001:4860:4860::8888", false, RuleIPv6},
				{"localhost", true, RuleOpen}, // the name; 127.0.0.1 in its answer is then stripped
			},
		},
		{
			name:    "IPv6 needs an explicit CIDR rule",
			ceiling: Ceiling{Open: true, AllowCIDRs: []string{"2001:db8:1::/48"}},
			network: `{"allowOut":["2001:db8:2::/48"]}`,
			checks: []check{
				{"2001:db8:1::1", true, "ceiling:2001:db8:1::/48"},
				{"2001:db8:2::1", true, "allowOut:2001:db8:2::/48"},
				{"2001:db8:3::1", false, RuleIPv6},
			},
		},
		{
			name:    "ceiling opens private ranges only with a CIDR inside them",
			ceiling: Ceiling{AllowCIDRs: []string{"0.0.0.0/0", "10.1.0.0/16", "fd00:1::/32"}},
			checks: []check{
				{"8.8.8.8", true, "ceiling:0.0.0.0/0"},
				{"10.1.2.3", true, "ceiling:10.1.0.0/16"},
				{"10.2.0.1", false, "private:private 10.0.0.0/8"},
				{"169.254.169.254", false, "private:link-local 169.254.0.0/16"},
				{"127.0.0.1", false, "private:loopback 127.0.0.0/8"},
				{"fd00:1::5", true, "ceiling:fd00:1::/32"},
			},
		},
		{
			name:    "reserved host and pool prefixes",
			ceiling: Ceiling{Open: true, ReservedCIDRs: []string{"203.0.113.0/28", "10.200.0.0/16"}, AllowCIDRs: []string{"10.200.5.0/24"}},
			checks: []check{
				{"203.0.113.5", false, "reserved:203.0.113.0/28"},
				{"203.0.113.100", true, RuleOpen},
				{"10.200.1.1", false, "reserved:10.200.0.0/16"},
				{"10.200.5.1", true, "ceiling:10.200.5.0/24"},
			},
		},
		{
			name:    "ceiling denylist beats sandbox allowOut",
			ceiling: Ceiling{Open: true, DenyDomains: []string{"*.evil.test"}, DenyCIDRs: []string{"198.51.100.0/24"}},
			network: `{"allowOut":["a.evil.test","198.51.100.1"]}`,
			checks: []check{
				{"a.evil.test", false, "ceiling.deny:*.evil.test"},
				{"198.51.100.1", false, "ceiling.deny:198.51.100.0/24"},
				{"good.test", true, RuleOpen},
			},
		},
		{
			name:    "exact entry names the rule over a wildcard",
			ceiling: Ceiling{AllowDomains: []string{"*.example.com", "api.example.com", "*.b.example.com"}},
			checks: []check{
				{"api.example.com", true, "ceiling:api.example.com"},
				{"x.b.example.com", true, "ceiling:*.b.example.com"},
				{"x.example.com", true, "ceiling:*.example.com"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustPolicy(t, tt.ceiling, tt.network, tt.internet)
			for _, c := range tt.checks {
				var got Decision
				if a, err := netip.ParseAddr(c.dest); err == nil {
					got = p.AllowAddr(a, 443)
					// An IP literal given as a name is decided the same way.
					if n := p.AllowName(c.dest); n != got {
						t.Errorf("AllowName(%q) = %+v, AllowAddr = %+v", c.dest, n, got)
					}
				} else {
					got = p.AllowName(c.dest)
				}
				if want := (Decision{Allowed: c.allowed, Rule: c.rule}); got != want {
					t.Errorf("%s: got %+v, want %+v", c.dest, got, want)
				}
			}
		})
	}
}

func TestAllowAnswer(t *testing.T) {
	// An address of an allowed name needs no CIDR rule, but private,
	// reserved, denied and IPv6 addresses are still refused.
	allowlist := DefaultCeiling()
	allowlist.ReservedCIDRs = []string{"198.51.100.0/24"}
	allowlist.AllowCIDRs = []string{"2001:db8:1::/48"}
	widen := allowlist
	widen.SandboxMayWiden = true
	p := mustPolicy(t, allowlist, `{"denyOut":["203.0.113.66"]}`, nil)
	off := mustPolicy(t, allowlist, "", ptr(false))
	// E2B's idiom: an allowOut name's addresses escape denyOut.
	only := mustPolicy(t, widen, `{"allowOut":["api.test"],"denyOut":["0.0.0.0/0"]}`, nil)
	onlyOff := mustPolicy(t, widen, `{"allowOut":["api.test"]}`, ptr(false))
	narrow := mustPolicy(t, allowlist, `{"allowOut":["pypi.org","api.test"],"denyOut":["0.0.0.0/0"]}`, nil)
	tests := []struct {
		p    Policy
		name string
		addr string
		want Decision
	}{
		{p, "pypi.org", "151.101.0.223", allow(RuleAnswer)},
		{p, "pypi.org", "::ffff:151.101.0.223", allow(RuleAnswer)},
		{p, "pypi.org", "169.254.169.254", deny("private:link-local 169.254.0.0/16")},
		{p, "pypi.org", "127.0.0.1", deny("private:loopback 127.0.0.0/8")},
		{p, "pypi.org", "192.168.0.1", deny("private:private 192.168.0.0/16")},
		{p, "pypi.org", "198.51.100.9", deny("reserved:198.51.100.0/24")},
		{p, "pypi.org", "203.0.113.66", deny("denyOut:203.0.113.66")},
		{p, "pypi.org", "2a04:4e42::223", deny(RuleIPv6)},
		{p, "pypi.org", "2001:db8:1::5", allow("ceiling:2001:db8:1::/48")},
		{off, "pypi.org", "151.101.0.223", deny(RuleInternetOff)},
		{only, "api.test", "151.101.0.223", allow(RuleAnswer)},
		{only, "API.test.", "151.101.0.223", allow(RuleAnswer)},
		{only, "pypi.org", "151.101.0.223", deny("denyOut:0.0.0.0/0")},
		{only, "api.test", "10.0.0.1", deny("private:private 10.0.0.0/8")},
		{only, "api.test", "198.51.100.9", deny("reserved:198.51.100.0/24")},
		{only, "api.test", "2a04:4e42::223", deny(RuleIPv6)},
		{onlyOff, "api.test", "151.101.0.223", allow(RuleAnswer)},
		{onlyOff, "pypi.org", "151.101.0.223", deny(RuleInternetOff)},
		// Without widening, an allowOut entry counts where the ceiling
		// allows its name too.
		{narrow, "pypi.org", "151.101.0.223", allow(RuleAnswer)},
		{narrow, "api.test", "151.101.0.223", deny("denyOut:0.0.0.0/0")},
		{narrow, "files.pythonhosted.org", "151.101.0.223", deny("denyOut:0.0.0.0/0")},
		{Policy{}, "pypi.org", "151.101.0.223", deny(RuleNoPolicy)},
	}
	for _, tt := range tests {
		if got := tt.p.AllowAnswer(tt.name, netip.MustParseAddr(tt.addr), 443); got != tt.want {
			t.Errorf("AllowAnswer(%s, %s) = %+v, want %+v", tt.name, tt.addr, got, tt.want)
		}
	}
	// The same public address, connected to directly, needs a rule.
	if got := p.AllowAddr(netip.MustParseAddr("151.101.0.223"), 443); got != deny(RuleAllowlist) {
		t.Errorf("AllowAddr = %+v", got)
	}
}

func TestZeroPolicyDeniesAll(t *testing.T) {
	var p Policy
	if d := p.AllowName("pypi.org"); d.Allowed || d.Rule != RuleNoPolicy {
		t.Errorf("AllowName = %+v", d)
	}
	if d := p.AllowAddr(netip.MustParseAddr("8.8.8.8"), 53); d.Allowed || d.Rule != RuleNoPolicy {
		t.Errorf("AllowAddr = %+v", d)
	}
	p = mustPolicy(t, Ceiling{Open: true}, "", nil)
	if d := p.AllowAddr(netip.Addr{}, 0); d.Allowed {
		t.Errorf("AllowAddr(invalid) = %+v", d)
	}
}

func TestNormalizeName(t *testing.T) {
	tests := []struct{ in, want, err string }{
		{"Example.COM.", "example.com", ""},
		{"_sip._tcp.example.com", "_sip._tcp.example.com", ""},
		{"", "", "empty name"},
		{".", "", "empty name"},
		{"a..b", "", "empty label"},
		{"ex!ample.com", "", `invalid character '!'`},
		{"пример.рф", "", "non-ASCII name"},
	}
	for _, tt := range tests {
		got, err := NormalizeName(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("NormalizeName(%q) error = %v, want %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("NormalizeName(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestForwarding(t *testing.T) {
	rules := func(pairs ...string) []ForwardRule {
		var out []ForwardRule
		for _, s := range pairs {
			verdict, prefix, _ := strings.Cut(s, " ")
			out = append(out, ForwardRule{Prefix: netip.MustParsePrefix(prefix), Allow: verdict == "accept"})
		}
		return out
	}
	off := false
	for _, tc := range []struct {
		name    string
		ceiling Ceiling
		network string
		off     *bool
		want    []ForwardRule
	}{
		{name: "default: nothing", ceiling: DefaultCeiling(), network: `{"allowOut":["1.2.3.0/24"]}`, want: nil},
		{name: "widening adds sandbox CIDRs before denyOut, IPv4 only, domains ignored",
			ceiling: Ceiling{SandboxMayWiden: true, AllowCIDRs: []string{"203.0.113.0/24"}, DenyCIDRs: []string{"1.2.3.128/25"}},
			network: `{"allowOut":["1.2.3.0/24","9.9.9.9","2001:db8::/32","a.test"],"denyOut":["1.2.3.4","b.test","0.0.0.0/0"]}`,
			want: rules("drop 1.2.3.128/25", "accept 1.2.3.0/24", "accept 9.9.9.9/32",
				"drop 1.2.3.4/32", "drop 0.0.0.0/0", "accept 203.0.113.0/24")},
		{name: "without widening allowOut counts inside the ceiling's CIDRs",
			ceiling: Ceiling{AllowCIDRs: []string{"203.0.113.0/24", "198.51.0.0/16"}},
			network: `{"allowOut":["203.0.113.7","198.0.0.0/8","8.8.8.8"],"denyOut":["0.0.0.0/0"]}`,
			want:    rules("accept 203.0.113.7/32", "accept 198.51.0.0/16", "drop 0.0.0.0/0", "accept 203.0.113.0/24", "accept 198.51.0.0/16")},
		{name: "open ceiling with denials", ceiling: Ceiling{Open: true, DenyCIDRs: []string{"198.51.100.0/24"}},
			network: `{"denyOut":["8.8.8.8"]}`,
			want:    rules("drop 198.51.100.0/24", "drop 8.8.8.8/32", "accept 0.0.0.0/0")},
		{name: "internet off: nothing", ceiling: Ceiling{Open: true}, off: &off, want: nil},
		{name: "internet off: allowOut only", ceiling: Ceiling{Open: true, DenyCIDRs: []string{"9.9.9.0/24"}}, network: `{"allowOut":["9.9.9.9","8.8.8.8"]}`, off: &off,
			want: rules("drop 9.9.9.0/24", "accept 9.9.9.9/32", "accept 8.8.8.8/32")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := ParseRules([]byte(tc.network), tc.off)
			if err != nil {
				t.Fatal(err)
			}
			p, err := NewPolicy(tc.ceiling, r)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, p.Forwarding(), cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); d != "" {
				t.Errorf("Forwarding (-want +got):\n%s", d)
			}
		})
	}
	if (Policy{}).Forwarding() != nil {
		t.Error("the zero Policy forwards something")
	}
}
