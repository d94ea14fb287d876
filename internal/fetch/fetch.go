// Package fetch dials the connections the server makes on behalf of an API
// caller: the registry pulls of a template built from an image (fromImage),
// and every redirect they follow (registries send blobs to a CDN). Such a
// fetch must not make the server, which runs as root on the host, a way for
// a caller to reach what sandboxes cannot: the host's loopback services,
// cloud metadata at 169.254.169.254, private networks.
//
// A Dialer resolves the name itself and connects only to the addresses it
// checked, at every dial (a redirect is a new dial; an answer that changed,
// as in DNS rebinding, is checked again). It refuses the ranges egress
// closes to sandboxes (egress.PrivateRange: loopback, link-local, RFC 1918,
// CGNAT, multicast, reserved, IPv6 unique-local and link-local, NAT64 and
// 6to4), the host's own addresses (asked at every dial) and the sandbox
// address pools. The operator opens one host, whatever it resolves to, by
// listing it in Config.Allow (serve --registry HOST[:PORT]); nothing a
// caller sends can. The refusal is a *RefusedError that names the rule and
// the flag that lifts it.
//
// The operator's egress ceiling (serve --egress-policy) bounds sandboxes,
// not these fetches: any public address is reachable, as a registry or CDN
// may be anywhere. Environment proxies (HTTPS_PROXY) are not used: a proxy
// would make the connection on our behalf, past these checks.
package fetch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/egress"
	"github.com/agent-sandbox/agent-sandbox/internal/network"
)

// AllowFlag is the serve flag that fills Config.Allow; refusals name it.
const AllowFlag = "--registry"

// Config configures a Dialer.
type Config struct {
	// Allow are the hosts the operator trusts whatever they resolve to:
	// "HOST" (any port) or "HOST:PORT" ("[v6]:PORT"), HOST as URLs name
	// it (a name or an IP address). Their redirects are checked like any
	// other dial.
	Allow []string
	// SandboxPools are the sandbox address pools, refused like the host's
	// own addresses.
	SandboxPools []netip.Prefix
	// HostAddrs lists the host's own addresses; it is asked at every dial,
	// since they change (DHCP, VPNs). Default network.HostPrefixes.
	HostAddrs func() ([]netip.Prefix, error)
	// Resolve looks up the addresses of a name; default the system
	// resolver.
	Resolve func(ctx context.Context, host string) ([]netip.Addr, error)
	// Dial connects to address ("ip:port", or an allowed "host:port");
	// default a net.Dialer with a 30 s timeout.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
}

// Dialer dials for server-side fetches under the rules of the package doc.
// It is safe for concurrent use.
type Dialer struct {
	cfg   Config
	allow map[string]bool // normalized "host" and "host:port"
}

// New checks cfg.Allow and returns a Dialer.
func New(cfg Config) (*Dialer, error) {
	d := &Dialer{cfg: cfg, allow: map[string]bool{}}
	var errs []error
	for _, e := range cfg.Allow {
		key, err := allowKey(e)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s %q: %w", AllowFlag, e, err))
			continue
		}
		d.allow[key] = true
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if d.cfg.HostAddrs == nil {
		d.cfg.HostAddrs = network.HostPrefixes
	}
	if d.cfg.Resolve == nil {
		d.cfg.Resolve = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	if d.cfg.Dial == nil {
		d.cfg.Dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	return d, nil
}

// allowKey normalizes an Allow entry: "host" or "host:port".
func allowKey(e string) (string, error) {
	if e == "" || strings.ContainsAny(e, "/ \t@?#") {
		return "", errors.New("want HOST or HOST:PORT, e.g. registry.internal:5000")
	}
	if a, err := netip.ParseAddr(e); err == nil { // a bare IP, IPv6 included
		return normalHost(a.String()), nil
	}
	host, port, err := net.SplitHostPort(e)
	if err != nil {
		if strings.Contains(e, ":") {
			return "", errors.New("want HOST or HOST:PORT (an IPv6 address with a port in brackets)")
		}
		return normalHost(e), nil
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("port %q: want 1-65535", port)
	}
	if host == "" {
		return "", errors.New("no host")
	}
	return net.JoinHostPort(normalHost(host), port), nil
}

// normalHost is host as Allow keys hold it: lower case, no trailing dot,
// IP addresses in their canonical form.
func normalHost(host string) string {
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap().String()
	}
	return strings.TrimSuffix(strings.ToLower(host), ".")
}

// allowed reports whether the operator allowed host:port.
func (d *Dialer) allowed(host, port string) bool {
	h := normalHost(host)
	return d.allow[h] || d.allow[net.JoinHostPort(h, port)]
}

// Transport returns an HTTP transport whose connections d dials, without
// environment proxies; otherwise like http.DefaultTransport.
func (d *Dialer) Transport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	t.DialContext = d.DialContext
	return t
}

// RefusedError is a dial the rules refused: every address Host resolved to
// is closed. Its text is meant for the API caller and the operator.
type RefusedError struct {
	Host, Port string     // as dialled
	Addr       netip.Addr // the first address refused
	// Range is the closed range Addr is in, and Kind what it is:
	// an egress range name ("loopback", "link-local", "private", …),
	// "host" for the host's own addresses or "sandbox" for a pool.
	Range netip.Prefix
	Kind  string
}

// Error implements error, e.g. "registry 127.0.0.1:5000 resolves to
// 127.0.0.1, in the loopback range 127.0.0.0/8: refused; allow it with
// --registry 127.0.0.1:5000".
func (e *RefusedError) Error() string {
	target := net.JoinHostPort(e.Host, e.Port)
	var where string
	switch e.Kind {
	case kindHost:
		where = "one of this host's own addresses"
	case kindSandbox:
		where = "in the sandbox address pool " + e.Range.String()
	default:
		where = fmt.Sprintf("in the %s range %s", e.Kind, e.Range)
	}
	return fmt.Sprintf("registry %s resolves to %s, %s: refused; allow it with %s %s", target, e.Addr, where, AllowFlag, target)
}

// Kinds of RefusedError besides the egress range names.
const (
	kindHost    = "host"
	kindSandbox = "sandbox"
)

// DialContext connects to address ("host:port") under the rules of the
// package doc; it has the signature of http.Transport.DialContext.
func (d *Dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	switch network {
	case "tcp", "tcp4", "tcp6":
	default:
		return nil, fmt.Errorf("dialing %s %s: only TCP is dialled for fetches", network, address)
	}
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, fmt.Errorf("dialing %s: %w", address, err)
	}
	if d.allowed(host, port) {
		return d.cfg.Dial(ctx, network, address)
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else if addrs, err = d.cfg.Resolve(ctx, host); err != nil {
		return nil, fmt.Errorf("resolving %s: %w", host, err)
	}
	closed, err := d.closedRanges()
	if err != nil {
		return nil, err
	}
	var open []netip.Addr
	var refused *RefusedError
	for _, a := range addrs {
		a = a.Unmap().WithZone("")
		if (network == "tcp4" && !a.Is4()) || (network == "tcp6" && !a.Is6()) {
			continue
		}
		if r, kind, ok := closedRange(a, closed); ok {
			if refused == nil {
				refused = &RefusedError{Host: host, Port: port, Addr: a, Range: r, Kind: kind}
			}
			continue
		}
		open = append(open, a)
	}
	if len(open) == 0 {
		if refused != nil {
			return nil, refused
		}
		return nil, fmt.Errorf("resolving %s: no %s address", host, network)
	}
	var errs []error
	for _, a := range open {
		c, err := d.cfg.Dial(ctx, network, net.JoinHostPort(a.String(), port))
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("dialing %s: %w", address, errors.Join(errs...))
}

// closed is a range a fetch does not reach, with its kind.
type closed struct {
	prefix netip.Prefix
	kind   string
}

// closedRanges returns the sandbox pools and the host's current addresses
// but its loopback ones, which the egress loopback ranges name better.
func (d *Dialer) closedRanges() ([]closed, error) {
	hosts, err := d.cfg.HostAddrs()
	if err != nil {
		return nil, fmt.Errorf("checking a fetch against the host's addresses: %w", err)
	}
	out := make([]closed, 0, len(hosts)+len(d.cfg.SandboxPools))
	for _, p := range d.cfg.SandboxPools {
		out = append(out, closed{p, kindSandbox})
	}
	for _, p := range hosts {
		if !p.Addr().IsLoopback() {
			out = append(out, closed{p, kindHost})
		}
	}
	return out, nil
}

// closedRange returns the closed range holding a, if any: a sandbox pool
// or a host address first, as they say more than the egress range that
// may hold them too ("private 10.0.0.0/8").
func closedRange(a netip.Addr, cs []closed) (netip.Prefix, string, bool) {
	for _, c := range cs {
		if c.prefix.Contains(a) {
			return c.prefix, c.kind, true
		}
	}
	return egress.PrivateRange(a)
}
