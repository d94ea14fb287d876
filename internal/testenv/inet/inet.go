package inet

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/agent-sandbox/agent-sandbox/internal/network"
	"golang.org/x/net/dns/dnsmessage"
)

// AltHTTPPort is where every address also serves plain HTTP, besides 80.
const AltHTTPPort = 8080

// Internet is a network namespace standing in for the internet, reached
// from the host through a veth with routes for its addresses only.
type Internet struct {
	NS       *network.Namespace
	Link     string                  // host end of the veth
	HostAddr netip.Addr              // host end's address, the namespace's default gateway
	DNS      netip.AddrPort          // authoritative DNS server (UDP and TCP) for Sites
	CACert   []byte                  // PEM of the CA that signed the HTTPS servers' certificate
	Sites    map[string][]netip.Addr // as configured; names in lower case without the final dot

	mu      sync.Mutex
	queries []string // guarded by mu
}

// Config says what the Internet holds. Only Sites is usually needed.
type Config struct {
	// RunDir is where the namespace is bind-mounted (network.Dir(RunDir));
	// empty means a temporary directory of its own. Not the run directory
	// of a server under test, which would take the Internet for one of its
	// sandboxes.
	RunDir string
	// Link is the veth's /30 (host end .1, far end .2 of the block); the
	// zero value picks one in 198.19.0.0/16 that no other Internet and no
	// host address uses.
	Link netip.Prefix
	// Sites maps a name to its IPv4 addresses, every one of which serves
	// HTTP, HTTPS and echo. Names may share addresses.
	Sites map[string][]netip.Addr
	// Extra addresses are held and routed like the sites' (169.254.169.254,
	// a private address), so that a test can show the firewall blocks them.
	Extra []netip.Addr
	// Names are answered by the DNS server only: their addresses are
	// neither held nor routed (a name pointing at the host, say).
	Names map[string][]netip.Addr
}

// Queries returns the names the DNS server was asked, in order, in lower
// case without the final dot: a test can show that a name the egress
// filter denied never reached it.
func (in *Internet) Queries() []string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return slices.Clone(in.queries)
}

func (in *Internet) logQuery(name string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.queries = append(in.queries, name)
}

// plan is a validated Config.
type plan struct {
	sites map[string][]netip.Addr
	dns   map[string][]netip.Addr // sites and Names
	addrs []netip.Addr            // every site and Extra address once, sorted
	link  netip.Prefix            // zero: pick one
}

// defaultLinks is where a Link is picked from when Config has none.
var defaultLinks = netip.MustParsePrefix("198.19.0.0/16")

func (cfg Config) plan() (plan, error) {
	p := plan{sites: make(map[string][]netip.Addr, len(cfg.Sites))}
	if cfg.Link.IsValid() {
		link := cfg.Link.Masked()
		if !link.Addr().Is4() || link.Bits() != 30 {
			return plan{}, fmt.Errorf("link %s: want an IPv4 /30", cfg.Link)
		}
		p.link = link
	}
	seen := make(map[netip.Addr]bool)
	hold := func(what string, a netip.Addr) error {
		a = a.Unmap()
		if !a.Is4() || a.IsUnspecified() || a.IsLoopback() || a.IsMulticast() || a == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
			return fmt.Errorf("%s: %s is not an IPv4 unicast address", what, a)
		}
		if p.link.Contains(a) {
			return fmt.Errorf("%s: %s is inside the link %s", what, a, p.link)
		}
		if !seen[a] {
			seen[a] = true
			p.addrs = append(p.addrs, a)
		}
		return nil
	}
	for name, addrs := range cfg.Sites {
		canon := canonicalName(name)
		if !validName(canon) {
			return plan{}, fmt.Errorf("site %q: not a domain name", name)
		}
		if _, dup := p.sites[canon]; dup {
			return plan{}, fmt.Errorf("site %q: given twice", canon)
		}
		if len(addrs) == 0 {
			return plan{}, fmt.Errorf("site %q: no addresses", name)
		}
		var unmapped []netip.Addr
		for _, a := range addrs {
			if err := hold("site "+canon, a); err != nil {
				return plan{}, err
			}
			unmapped = append(unmapped, a.Unmap())
		}
		p.sites[canon] = unmapped
	}
	for _, a := range cfg.Extra {
		if err := hold("extra address", a); err != nil {
			return plan{}, err
		}
	}
	p.dns = maps.Clone(p.sites)
	for name, addrs := range cfg.Names {
		canon := canonicalName(name)
		if !validName(canon) {
			return plan{}, fmt.Errorf("name %q: not a domain name", name)
		}
		if _, dup := p.dns[canon]; dup {
			return plan{}, fmt.Errorf("name %q: given twice", canon)
		}
		for _, a := range addrs {
			if !a.Unmap().Is4() {
				return plan{}, fmt.Errorf("name %q: %s is not IPv4", canon, a)
			}
		}
		p.dns[canon] = slices.Clone(addrs)
	}
	slices.SortFunc(p.addrs, netip.Addr.Compare)
	return p, nil
}

// validName reports whether name packs as a DNS question, which also
// rejects empty and overlong labels.
func validName(name string) bool {
	n, err := dnsmessage.NewName(name + ".")
	if err != nil || name == "" {
		return false
	}
	q := dnsmessage.Message{Questions: []dnsmessage.Question{{Name: n, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}}}
	_, err = q.Pack()
	return err == nil
}

// canonicalName is how names are keyed and recorded: DNS names compare
// case-insensitively and the root label is implied.
func canonicalName(name string) string {
	return strings.ToLower(strings.TrimSuffix(name, "."))
}
