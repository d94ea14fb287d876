package network

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// aliasPrefix starts the alias of a sandbox veth's host end; the sandbox
// id follows.
const aliasPrefix = "agent-sandbox:"

func (c VethConfig) hostName() string {
	if c.HostName != "" {
		return c.HostName
	}
	return VethName(c.SandboxID)
}

// AttachVeth gives the namespace a routed veth: the host end cfg.HostName
// with the gateway address, the end PeerName inside with the sandbox
// address and a default route via the gateway. The host end forwards
// (per-interface forwarding), filters by reverse path, sends no redirects
// and has IPv6 disabled, as does the end inside. If cfg.Firewall is set,
// the sandbox's firewall pieces are added before the link comes up. On
// error nothing is left behind.
func (ns *Namespace) AttachVeth(ctx context.Context, cfg VethConfig) (err error) {
	host := cfg.hostName()
	if err := checkVethConfig(host, cfg); err != nil {
		return fmt.Errorf("attaching veth to %s: %w", ns.name, err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("attaching veth %s to %s: %w", host, ns.name, err)
	}
	mtu := cfg.MTU
	if mtu == 0 {
		mtu = 1500
	}
	var undo []func() error
	defer func() {
		if err != nil {
			for i := len(undo) - 1; i >= 0; i-- {
				err = errors.Join(err, undo[i]())
			}
		}
	}()

	f, err := os.Open(ns.path)
	if err != nil {
		return fmt.Errorf("attaching veth %s to %s: %w", host, ns.name, err)
	}
	defer f.Close()
	la := netlink.NewLinkAttrs()
	la.Name = host
	la.MTU = mtu
	veth := &netlink.Veth{
		LinkAttrs:     la,
		PeerName:      PeerName,
		PeerNamespace: netlink.NsFd(int(f.Fd())),
		PeerMTU:       uint32(mtu),
	}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("creating veth %s in %s: %w", host, ns.name, err)
	}
	undo = append(undo, func() error { return DeleteLink(host) })
	link, err := netlink.LinkByName(host)
	if err != nil {
		return fmt.Errorf("finding veth %s: %w", host, err)
	}
	if cfg.SandboxID != "" {
		if err := netlink.LinkSetAlias(link, aliasPrefix+cfg.SandboxID); err != nil {
			return fmt.Errorf("setting alias of veth %s: %w", host, err)
		}
	}
	for _, s := range []struct{ path, val string }{
		{"ipv6/conf/" + host + "/disable_ipv6", "1"},
		{"ipv4/conf/" + host + "/forwarding", "1"},
		{"ipv4/conf/" + host + "/rp_filter", "1"},
		{"ipv4/conf/" + host + "/send_redirects", "0"},
	} {
		if err := WriteSysctl(s.path, s.val); err != nil {
			return fmt.Errorf("configuring veth %s: %w", host, err)
		}
	}
	if cfg.Firewall != nil {
		if err := cfg.Firewall.AddSandbox(ctx, host); err != nil {
			return fmt.Errorf("attaching veth %s: %w", host, err)
		}
		undo = append(undo, func() error { return cfg.Firewall.RemoveSandbox(context.WithoutCancel(ctx), host) })
	}
	if err := netlink.AddrAdd(link, &netlink.Addr{IPNet: ipNet(cfg.Addrs.Gateway)}); err != nil {
		return fmt.Errorf("adding %s to veth %s: %w", cfg.Addrs.Gateway, host, err)
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("setting veth %s up: %w", host, err)
	}
	err = ns.Do(func() error {
		peer, err := netlink.LinkByName(PeerName)
		if err != nil {
			return fmt.Errorf("finding %s: %w", PeerName, err)
		}
		if err := WriteSysctl("ipv6/conf/"+PeerName+"/disable_ipv6", "1"); err != nil {
			return err
		}
		if err := netlink.AddrAdd(peer, &netlink.Addr{IPNet: ipNet(cfg.Addrs.Sandbox)}); err != nil {
			return fmt.Errorf("adding %s to %s: %w", cfg.Addrs.Sandbox, PeerName, err)
		}
		if err := netlink.LinkSetUp(peer); err != nil {
			return fmt.Errorf("setting %s up: %w", PeerName, err)
		}
		gw := net.IP(cfg.Addrs.Gateway.AsSlice())
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: peer.Attrs().Index, Gw: gw}); err != nil {
			return fmt.Errorf("adding default route via %s: %w", gw, err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("configuring veth %s inside %s: %w", host, ns.name, err)
	}
	return nil
}

// DetachVeth removes the veth described by cfg (its host end, which takes
// the end inside with it) and, if cfg.Firewall is set, the sandbox's
// firewall pieces. Only HostName (or SandboxID) and Firewall are used.
// Detaching a veth that is gone succeeds; deleting the namespace alone also
// removes the pair, but not the firewall pieces or the bandwidth ifb.
func DetachVeth(ctx context.Context, cfg VethConfig) error {
	host := cfg.hostName()
	var errs []error
	if cfg.Firewall != nil {
		errs = append(errs, cfg.Firewall.RemoveSandbox(context.WithoutCancel(ctx), host))
	}
	if err := DeleteLink(host); err != nil {
		errs = append(errs, fmt.Errorf("detaching veth: %w", err))
	}
	// The upload shaper's ifb is a device of its own: it outlives the veth.
	if err := deleteIFB(host); err != nil {
		errs = append(errs, fmt.Errorf("detaching veth: %w", err))
	}
	return errors.Join(errs...)
}

// HostVeths returns the leases of the sandbox veths on the host (sandbox
// id → addresses), read from the host ends' aliases and addresses, for
// Pool.Restore after a restart: a surviving sandbox's namespace keeps its
// veth, and with it its lease.
func HostVeths() (map[string]VethAddrs, error) {
	links, err := RetryDump(netlink.LinkList)
	if err != nil {
		return nil, fmt.Errorf("listing links: %w", err)
	}
	leases := make(map[string]VethAddrs)
	for _, l := range links {
		a := l.Attrs()
		id, ok := strings.CutPrefix(a.Alias, aliasPrefix)
		if !ok || !strings.HasPrefix(a.Name, HostNamePrefix) || l.Type() != "veth" {
			continue
		}
		addrs, err := RetryDump(func() ([]netlink.Addr, error) { return netlink.AddrList(l, netlink.FAMILY_V4) })
		if err != nil {
			return nil, fmt.Errorf("listing addresses of %s: %w", a.Name, err)
		}
		for _, ad := range addrs {
			gw, ok := netip.AddrFromSlice(ad.IP.To4())
			if !ok {
				continue
			}
			if ones, _ := ad.Mask.Size(); ones == 30 {
				leases[id] = VethAddrs{Gateway: gw, Sandbox: gw.Next()}
			}
		}
	}
	return leases, nil
}

func checkVethConfig(host string, cfg VethConfig) error {
	if !strings.HasPrefix(host, HostNamePrefix) || len(host) > 15 || len(host) <= len(HostNamePrefix) || strings.ContainsAny(host, "/ \x00") {
		return fmt.Errorf("invalid veth name %q", host)
	}
	a := cfg.Addrs
	if !a.Gateway.Is4() || !a.Sandbox.Is4() || a.Gateway == a.Sandbox || !a.Prefix().Contains(a.Sandbox) {
		return fmt.Errorf("invalid veth addresses %s and %s: want two host addresses of one /30", a.Gateway, a.Sandbox)
	}
	if cfg.MTU != 0 && (cfg.MTU < 576 || cfg.MTU > 65535) {
		return fmt.Errorf("invalid MTU %d", cfg.MTU)
	}
	return nil
}

// DeleteLink deletes the link called name; a link that is not there is
// no error.
func DeleteLink(name string) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		if _, ok := err.(netlink.LinkNotFoundError); ok {
			return nil
		}
		return fmt.Errorf("finding %s: %w", name, err)
	}
	if err := netlink.LinkDel(l); err != nil && !errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("deleting %s: %w", name, err)
	}
	return nil
}

func ipNet(a netip.Addr) *net.IPNet {
	return &net.IPNet{IP: net.IP(a.AsSlice()), Mask: net.CIDRMask(30, 32)}
}

// WriteSysctl sets /proc/sys/net/<path> to val, in the calling thread's
// network namespace.
func WriteSysctl(path, val string) error {
	p := filepath.Join("/proc/sys/net", path)
	if err := os.WriteFile(p, []byte(val), 0o644); err != nil {
		return fmt.Errorf("setting %s: %w", p, err)
	}
	return nil
}
