package inet

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestConfigPlan(t *testing.T) {
	addr := netip.MustParseAddr
	for _, c := range []struct {
		name    string
		cfg     Config
		wantErr string // empty: valid
	}{
		{name: "empty", cfg: Config{}},
		{name: "sites and extra", cfg: Config{
			Sites: map[string][]netip.Addr{"a.test": {addr("203.0.113.10")}, "b.test": {addr("203.0.113.10")}},
			Extra: []netip.Addr{addr("169.254.169.254")},
		}},
		{name: "mapped address", cfg: Config{Sites: map[string][]netip.Addr{"a.test": {addr("::ffff:203.0.113.10")}}}},
		{name: "IPv6", cfg: Config{Sites: map[string][]netip.Addr{"a.test": {addr("2001:db8::1")}}}, wantErr: "not an IPv4 unicast"},
		{name: "loopback", cfg: Config{Extra: []netip.Addr{addr("127.0.0.2")}}, wantErr: "not an IPv4 unicast"},
		{name: "no addresses", cfg: Config{Sites: map[string][]netip.Addr{"a.test": nil}}, wantErr: "no addresses"},
		{name: "bad name", cfg: Config{Sites: map[string][]netip.Addr{"a..test": {addr("203.0.113.10")}}}, wantErr: "not a domain name"},
		{name: "name twice", cfg: Config{Sites: map[string][]netip.Addr{"a.test": {addr("203.0.113.10")}, "A.test.": {addr("203.0.113.11")}}}, wantErr: "given twice"},
		{name: "link not /30", cfg: Config{Link: netip.MustParsePrefix("198.18.4.0/29")}, wantErr: "want an IPv4 /30"},
		{name: "address in link", cfg: Config{Link: netip.MustParsePrefix("198.18.4.0/30"), Extra: []netip.Addr{addr("198.18.4.2")}}, wantErr: "inside the link"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := c.cfg.plan()
			if c.wantErr == "" && err != nil {
				t.Fatalf("plan: %v", err)
			}
			if c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)) {
				t.Fatalf("plan: %v, want an error containing %q", err, c.wantErr)
			}
		})
	}

	p, err := Config{
		Sites: map[string][]netip.Addr{"A.Test.": {addr("203.0.113.11"), addr("::ffff:203.0.113.10")}},
		Extra: []netip.Addr{addr("203.0.113.10"), addr("169.254.169.254")},
	}.plan()
	if err != nil {
		t.Fatal(err)
	}
	if got := p.sites["a.test"]; len(got) != 2 || got[1] != addr("203.0.113.10") {
		t.Errorf("sites[a.test] = %v, want the addresses unmapped under the canonical name", got)
	}
	if got, want := p.addrs, []netip.Addr{addr("169.254.169.254"), addr("203.0.113.10"), addr("203.0.113.11")}; !slices.Equal(got, want) {
		t.Errorf("addrs = %v, want %v (each once, sorted)", got, want)
	}
}
