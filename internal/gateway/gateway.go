package gateway

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/agent-sandbox/agent-sandbox/internal/egress"
	"github.com/agent-sandbox/agent-sandbox/internal/network"
)

// Default ports, on each sandbox's gateway address, that the firewall
// redirects DNS and TCP 80/443 to. They are bound on the gateway addresses
// only, never on the host's other addresses.
const (
	DefaultDNSPort   = 10053
	DefaultProxyPort = 10080
)

// DefaultAuditEvents is how many egress decisions each sandbox keeps.
const DefaultAuditEvents = 2000

// Config configures a Gateway.
type Config struct {
	// Ceiling is the operator's policy, bounding every sandbox.
	Ceiling egress.Ceiling
	// Upstream resolves the names a sandbox may use.
	Upstream egress.Upstream
	// Firewall receives each sandbox's address rules; nil leaves the
	// firewall alone (tests of the DNS and proxy side only).
	Firewall *network.Firewall
	// DNSPort and ProxyPort are where the firewall's redirects land.
	DNSPort, ProxyPort uint16
	// AuditEvents bounds each sandbox's audit ring (default
	// DefaultAuditEvents).
	AuditEvents int
	// Dial opens the proxy's upstream connections; nil means net.Dialer.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// CASecret derives each sandbox's interception CA (egress.NewCA), at
	// least egress.MinCASecretLen bytes, kept by the server so that a
	// sandbox keeps its CA across restarts; nil: a random secret of this
	// Gateway's own.
	CASecret []byte
	// UpstreamRoots verify the servers the proxy terminates TLS for (to
	// apply header rules); nil: the host's roots.
	UpstreamRoots *x509.CertPool
	Log           *slog.Logger
}

// ErrNotAttached is returned (wrapped) for a sandbox the Gateway does not
// serve.
var ErrNotAttached = errors.New("sandbox has no network gateway")

// Gateway serves the host side of every attached sandbox.
type Gateway struct {
	cfg Config
	log *slog.Logger

	mu   sync.Mutex          // guards the maps
	byID map[string]*sandbox // sandbox id → its pieces
	byIf map[string]*sandbox // host interface → the same, for the drop log
}

// sandbox is one attached sandbox.
type sandbox struct {
	id     string
	link   network.Link
	policy atomic.Pointer[egress.Policy]
	ca     *egress.CA
	audit  *egress.Ring
	cancel context.CancelFunc
	wg     sync.WaitGroup // the serving goroutines
}

// New checks cfg and returns a Gateway serving no sandbox yet.
func New(cfg Config) (*Gateway, error) {
	if err := cfg.Ceiling.Validate(); err != nil {
		return nil, fmt.Errorf("egress policy: %w", err)
	}
	if cfg.Upstream == nil {
		return nil, errors.New("gateway: no upstream resolver")
	}
	if cfg.DNSPort == 0 {
		cfg.DNSPort = DefaultDNSPort
	}
	if cfg.ProxyPort == 0 {
		cfg.ProxyPort = DefaultProxyPort
	}
	if cfg.AuditEvents <= 0 {
		cfg.AuditEvents = DefaultAuditEvents
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	switch {
	case cfg.CASecret == nil:
		cfg.CASecret = make([]byte, egress.MinCASecretLen)
		rand.Read(cfg.CASecret)
	case len(cfg.CASecret) < egress.MinCASecretLen:
		return nil, fmt.Errorf("gateway: the CA secret has %d bytes, want at least %d", len(cfg.CASecret), egress.MinCASecretLen)
	}
	return &Gateway{cfg: cfg, log: cfg.Log, byID: map[string]*sandbox{}, byIf: map[string]*sandbox{}}, nil
}

// Redirects are the firewall redirects that send a sandbox's DNS and web
// traffic to a Gateway with these ports.
func Redirects(dnsPort, proxyPort uint16) []network.Redirect {
	return []network.Redirect{
		{Proto: "udp", Port: 53, ToPort: dnsPort},
		{Proto: "tcp", Port: 53, ToPort: dnsPort},
		{Proto: "tcp", Port: 80, ToPort: proxyPort},
		{Proto: "tcp", Port: 443, ToPort: proxyPort},
	}
}

// Attach starts serving sandbox id on link with its egress rules and
// bandwidth caps. On error nothing is left behind.
func (g *Gateway) Attach(ctx context.Context, id string, link network.Link, rules egress.Rules, bw network.Bandwidth) (err error) {
	pol, err := egress.NewPolicy(g.cfg.Ceiling, rules)
	if err != nil {
		return fmt.Errorf("attaching sandbox %s to the gateway: %w", id, err)
	}
	ca, err := egress.NewCA(g.cfg.CASecret, id)
	if err != nil {
		return fmt.Errorf("attaching sandbox %s to the gateway: %w", id, err)
	}
	sb := &sandbox{id: id, link: link, ca: ca, audit: egress.NewRing(g.cfg.AuditEvents)}
	sb.policy.Store(&pol)

	var closers []func() error
	defer func() {
		if err != nil {
			for _, c := range closers {
				c()
			}
			err = fmt.Errorf("attaching sandbox %s to the gateway: %w", id, err)
		}
	}()
	dnsAddr := netip.AddrPortFrom(link.Gateway, g.cfg.DNSPort).String()
	udp, err := net.ListenPacket("udp4", dnsAddr)
	if err != nil {
		return fmt.Errorf("binding the DNS filter: %w", err)
	}
	closers = append(closers, udp.Close)
	tcp, err := net.Listen("tcp4", dnsAddr)
	if err != nil {
		return fmt.Errorf("binding the DNS filter: %w", err)
	}
	closers = append(closers, tcp.Close)
	proxyLn, err := net.Listen("tcp4", netip.AddrPortFrom(link.Gateway, g.cfg.ProxyPort).String())
	if err != nil {
		return fmt.Errorf("binding the egress proxy: %w", err)
	}
	closers = append(closers, proxyLn.Close)
	if err := g.apply(ctx, link, &pol, bw); err != nil {
		return err
	}

	log := g.log.With("sandbox_id", id)
	ecfg := egress.Config{
		Policy:   func() egress.Policy { return *sb.policy.Load() },
		Upstream: g.cfg.Upstream,
		Audit:    sb.audit,
		Logger:   log,
	}
	dns := egress.NewServer(ecfg)
	proxy := egress.NewProxy(egress.ProxyConfig{Config: ecfg, Dial: g.cfg.Dial, CA: ca, UpstreamRoots: g.cfg.UpstreamRoots})
	serveCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	sb.cancel = cancel
	serve := func(name string, f func(context.Context) error) {
		sb.wg.Go(func() {
			if err := f(serveCtx); err != nil && serveCtx.Err() == nil {
				log.Error("egress service stopped", "service", name, "err", err)
			}
		})
	}
	serve("dns/udp", func(ctx context.Context) error { return dns.ServeUDP(ctx, udp) })
	serve("dns/tcp", func(ctx context.Context) error { return dns.ServeTCP(ctx, tcp) })
	serve("proxy", func(ctx context.Context) error { return proxy.Serve(ctx, proxyLn) })

	g.mu.Lock()
	defer g.mu.Unlock()
	if g.byID[id] != nil {
		sb.stop()
		return fmt.Errorf("attaching sandbox %s to the gateway: already attached", id)
	}
	g.byID[id], g.byIf[link.HostIf] = sb, sb
	return nil
}

// apply puts pol's address rules into the firewall and bw into tc.
func (g *Gateway) apply(ctx context.Context, link network.Link, pol *egress.Policy, bw network.Bandwidth) error {
	if g.cfg.Firewall == nil {
		return nil
	}
	if err := g.cfg.Firewall.SetRules(ctx, link.HostIf, firewallRules(pol)); err != nil {
		return fmt.Errorf("setting firewall rules: %w", err)
	}
	if err := network.SetBandwidth(link.HostIf, bw); err != nil {
		return fmt.Errorf("setting bandwidth caps: %w", err)
	}
	return nil
}

// firewallRules is pol's address side in the firewall's terms.
func firewallRules(pol *egress.Policy) network.SandboxRules {
	var rules network.SandboxRules
	for _, r := range pol.Forwarding() {
		rules = append(rules, network.PrefixRule{Prefix: r.Prefix, Accept: r.Allow})
	}
	return rules
}

// Update replaces sandbox id's rules; bandwidth stays as attached.
func (g *Gateway) Update(ctx context.Context, id string, rules egress.Rules) error {
	sb, err := g.get(id)
	if err != nil {
		return err
	}
	pol, err := egress.NewPolicy(g.cfg.Ceiling, rules)
	if err != nil {
		return fmt.Errorf("updating the egress policy of sandbox %s: %w", id, err)
	}
	if g.cfg.Firewall != nil {
		if err := g.cfg.Firewall.SetRules(ctx, sb.link.HostIf, firewallRules(&pol)); err != nil {
			return fmt.Errorf("updating the egress policy of sandbox %s: %w", id, err)
		}
	}
	sb.policy.Store(&pol)
	return nil
}

// Detach stops serving sandbox id. The firewall chain and tc state go with
// the sandbox's veth. It does nothing for a sandbox not attached.
func (g *Gateway) Detach(id string) {
	g.mu.Lock()
	sb := g.byID[id]
	if sb != nil {
		delete(g.byID, id)
		if g.byIf[sb.link.HostIf] == sb {
			delete(g.byIf, sb.link.HostIf)
		}
	}
	g.mu.Unlock()
	if sb != nil {
		sb.stop()
	}
}

// Close detaches every sandbox.
func (g *Gateway) Close() {
	g.mu.Lock()
	ids := make([]string, 0, len(g.byID))
	for id := range g.byID {
		ids = append(ids, id)
	}
	g.mu.Unlock()
	for _, id := range ids {
		g.Detach(id)
	}
}

// EgressCA returns the certificate (PEM) of the CA the egress proxy signs
// with when it terminates TLS for sandbox id to apply header rules: what
// the sandbox must trust. Its key stays here.
func (g *Gateway) EgressCA(id string) ([]byte, error) {
	sb, err := g.get(id)
	if err != nil {
		return nil, err
	}
	return sb.ca.CertPEM(), nil
}

// Events returns sandbox id's audit events after cursor (at most limit)
// and the cursor to pass next (see egress.Ring.Since).
func (g *Gateway) Events(id string, cursor uint64, limit int) ([]egress.Event, uint64, error) {
	sb, err := g.get(id)
	if err != nil {
		return nil, 0, err
	}
	ev, next := sb.audit.Since(cursor, limit)
	return ev, next, nil
}

// RecordDrops reads the firewall's drop log until ctx ends and records each
// drop in the audit ring of the sandbox it came from.
func (g *Gateway) RecordDrops(ctx context.Context, dl *network.DropLog) error {
	return dl.Read(ctx, func(d network.Drop) {
		g.mu.Lock()
		sb := g.byIf[d.HostIf]
		g.mu.Unlock()
		if sb == nil {
			return // a sandbox starting or ending, or another server's
		}
		sb.audit.Record(egress.Event{
			Time:  d.Time,
			Kind:  egress.EventFirewall,
			Proto: d.Proto,
			Addrs: []netip.Addr{d.Dst},
			Port:  d.DstPort,
			Rule:  "firewall:" + d.Reason,
		})
	})
}

func (g *Gateway) get(id string) (*sandbox, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	sb := g.byID[id]
	if sb == nil {
		return nil, fmt.Errorf("sandbox %s: %w", id, ErrNotAttached)
	}
	return sb, nil
}

// stop ends the serving goroutines; they close their sockets.
func (sb *sandbox) stop() {
	sb.cancel()
	sb.wg.Wait()
}
