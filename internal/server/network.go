package server

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agent-sandbox/agent-sandbox/internal/egress"
	"github.com/agent-sandbox/agent-sandbox/internal/gateway"
	"github.com/agent-sandbox/agent-sandbox/internal/network"
	"github.com/agent-sandbox/agent-sandbox/internal/template"
)

// dropLogGroup is the NFLOG group the firewall logs its drops to, read back
// for the sandboxes' audit trails. One process per host can read a group.
const dropLogGroup = 7319

// sandboxNetwork is the host side of sandbox networking.
type sandboxNetwork struct {
	pool *network.Pool
	// host makes every sandbox's namespace, veth and lease, for every
	// backend.
	host    *network.Host
	gateway *gateway.Gateway
	// builds serves the sandboxes of template build steps, under the
	// build egress policy.
	builds *gateway.Gateway
}

// newSandboxNetwork builds the address pool, the firewall, the host
// networking over them and the egress gateways from cfg. Nothing is
// installed until host.Prepare.
func newSandboxNetwork(cfg Config, log *slog.Logger) (*sandboxNetwork, error) {
	pool, err := network.NewPool(cfg.AddressPool)
	if err != nil {
		return nil, fmt.Errorf("--address-pool: %w", err)
	}
	ceiling, err := loadCeiling("--egress-policy", cfg.EgressPolicy)
	if err != nil {
		return nil, err
	}
	buildCeiling, err := loadCeiling("--build-egress-policy", cfg.BuildEgressPolicy)
	if err != nil {
		return nil, err
	}
	if buildCeiling, err = allowMirror(buildCeiling, cmp.Or(cfg.Mirror, template.DefaultMirror)); err != nil {
		return nil, err
	}
	// An allowed name must not resolve to the host itself or to a sandbox:
	// the proxy dials from the host, where those are reachable.
	reserved, err := network.HostPrefixes()
	if err != nil {
		return nil, err
	}
	for _, p := range append(reserved, pool.Prefix()) {
		ceiling.ReservedCIDRs = append(ceiling.ReservedCIDRs, p.String())
		buildCeiling.ReservedCIDRs = append(buildCeiling.ReservedCIDRs, p.String())
	}
	upstream := cfg.DNSUpstream
	if upstream == "" {
		if upstream, err = systemResolver("/etc/resolv.conf"); err != nil {
			return nil, fmt.Errorf("finding a DNS resolver for sandboxes (set --dns-upstream): %w", err)
		}
	}
	fw, err := network.NewFirewall(network.FirewallConfig{
		Redirects: gateway.Redirects(gateway.DefaultDNSPort, gateway.DefaultProxyPort),
		LogGroup:  dropLogGroup,

		MaxConnsPerSandbox: uint32(cfg.MaxConnsPerSandbox), // Validate bounds it
	})
	if err != nil {
		return nil, fmt.Errorf("setting up the firewall: %w", err)
	}
	caSecret, err := egressCASecret(filepath.Join(cfg.DataDir, "egress-ca.secret"))
	if err != nil {
		return nil, err
	}
	resolver := &egress.Cache{Upstream: &egress.NetUpstream{Addr: upstream}}
	gw, err := gateway.New(gateway.Config{
		Ceiling:   ceiling,
		Upstream:  resolver,
		Firewall:  fw,
		DNSPort:   gateway.DefaultDNSPort,
		ProxyPort: gateway.DefaultProxyPort,
		CASecret:  caSecret,
		Log:       log.With("component", "gateway"),
	})
	if err != nil {
		return nil, fmt.Errorf("setting up the egress gateway: %w", err)
	}
	// Its own gateway, on the same firewall: a sandbox's policy is its
	// gateway's ceiling narrowed by its rules, and a build's is another
	// ceiling, not a narrowing of the customers'.
	builds, err := gateway.New(gateway.Config{
		Ceiling:   buildCeiling,
		Upstream:  resolver,
		Firewall:  fw,
		DNSPort:   gateway.DefaultDNSPort,
		ProxyPort: gateway.DefaultProxyPort,
		Log:       log.With("component", "gateway", "builds", true),
	})
	if err != nil {
		return nil, fmt.Errorf("setting up the build egress gateway: %w", err)
	}
	host, err := network.NewHost(network.HostConfig{Pool: pool, Firewall: fw})
	if err != nil {
		return nil, err
	}
	return &sandboxNetwork{pool: pool, host: host, gateway: gw, builds: builds}, nil
}

// egressCASecret returns the secret every sandbox's egress CA is derived
// from (egress.NewCA), kept in path so that a restarted server has the CA
// its sandboxes trust.
func egressCASecret(path string) ([]byte, error) {
	return keptSecret(path, "egress CA secret", egress.MinCASecretLen,
		"sandboxes running then stop trusting their egress proxy's CA")
}

// allowMirror adds the Debian mirror's host to a build ceiling: apt in the
// package steps fetches from it, whatever the policy file says.
func allowMirror(c egress.Ceiling, mirror string) (egress.Ceiling, error) {
	u, err := url.Parse(mirror)
	if err != nil || u.Hostname() == "" {
		return c, fmt.Errorf("--mirror %q: want an http(s) URL", mirror)
	}
	if a, err := netip.ParseAddr(u.Hostname()); err == nil {
		c.AllowCIDRs = append(slices.Clone(c.AllowCIDRs), netip.PrefixFrom(a, a.BitLen()).String())
	} else {
		c.AllowDomains = append(slices.Clone(c.AllowDomains), u.Hostname())
	}
	return c, c.Validate()
}

// loadCeiling reads an egress policy, a JSON egress.Ceiling, from the
// file that flag names; "" gives the default (package registries only).
func loadCeiling(flag, path string) (egress.Ceiling, error) {
	if path == "" {
		return egress.DefaultCeiling(), nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return egress.Ceiling{}, fmt.Errorf("reading %s: %w", flag, err)
	}
	var c egress.Ceiling
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return egress.Ceiling{}, fmt.Errorf("%s %s: %w", flag, path, err)
	}
	if err := c.Validate(); err != nil {
		return egress.Ceiling{}, fmt.Errorf("%s %s: %w", flag, path, err)
	}
	return c, nil
}

// systemResolver returns the first nameserver of a resolv.conf as
// host:port.
func systemResolver(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "nameserver" {
			if ip, err := netip.ParseAddr(fields[1]); err == nil {
				return netip.AddrPortFrom(ip.WithZone(""), 53).String(), nil
			}
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", errors.New(path + " names no nameserver")
}

// recordDrops feeds the firewall's drop log into the sandboxes' audit
// trails until ctx ends. Without it sandboxes are just as isolated; only
// the audit lacks the dropped packets, so a failure is a warning.
func (n *sandboxNetwork) recordDrops(ctx context.Context, log *slog.Logger) {
	dl, err := network.OpenDropLog(dropLogGroup)
	if err != nil {
		log.Warn("the egress audit will not show packets the firewall drops", "err", err)
		return
	}
	defer dl.Close()
	if err := n.gateway.RecordDrops(ctx, dl); err != nil {
		log.Warn("reading the firewall's drop log stopped; the egress audit no longer shows dropped packets", "err", err)
	}
}
