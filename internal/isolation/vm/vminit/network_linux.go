package vminit

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// guestIf is the guest's one network interface (virtio-net; no udev
// renames it).
const guestIf = "eth0"

// setupNetwork brings up the loopback and, with n, eth0 with its address
// and default route, and the forward from the host side to the guest's
// loopback (forwardToLoopback).
func setupNetwork(n *Network) error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("finding the loopback: %w", err)
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		return fmt.Errorf("bringing up the loopback: %w", err)
	}
	if n == nil {
		return nil
	}
	eth, err := waitLink(guestIf)
	if err != nil {
		return err
	}
	if err := configure(eth, n); err != nil {
		return err
	}
	return forwardToLoopback(n)
}

// configure gives eth n's address and default route, and brings it up.
func configure(eth netlink.Link, n *Network) error {
	addr := &netlink.Addr{IPNet: prefixNet(n.Address)}
	if err := netlink.AddrAdd(eth, addr); err != nil {
		return fmt.Errorf("adding %s to %s: %w", n.Address, guestIf, err)
	}
	if err := netlink.LinkSetUp(eth); err != nil {
		return fmt.Errorf("bringing up %s: %w", guestIf, err)
	}
	route := &netlink.Route{LinkIndex: eth.Attrs().Index, Gw: n.Gateway.AsSlice()}
	if err := netlink.RouteReplace(route); err != nil {
		return fmt.Errorf("adding the default route via %s: %w", n.Gateway, err)
	}
	return nil
}

// waitLink waits for the interface name: virtio-net probes it
// asynchronously after its module loads.
func waitLink(name string) (netlink.Link, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		l, err := netlink.LinkByName(name)
		var notFound netlink.LinkNotFoundError
		if err == nil || !errors.As(err, &notFound) || time.Now().After(deadline) {
			if err != nil {
				return nil, fmt.Errorf("waiting for %s: %w", name, err)
			}
			return l, nil
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// forwardToLoopback sends TCP that arrives on eth0 from the host side's
// own address (n.Forwarder) to 127.0.0.1, same port, so that the host
// reaches servers that listen only on the guest's loopback (envd, and
// whatever the sandbox runs there), as it does in the jail through the
// network namespace's loopback. route_localnet lets the kernel route a
// packet from outside to 127.0.0.1 at all. Only the forwarder's packets
// are rewritten: anything else that reaches eth0 meets the loopback's
// usual refusal.
func forwardToLoopback(n *Network) error {
	if !n.Forwarder.Is4() {
		return fmt.Errorf("forwarding to the loopback: forwarder %s is not IPv4", n.Forwarder)
	}
	if err := os.WriteFile("/proc/sys/net/ipv4/conf/"+guestIf+"/route_localnet", []byte("1"), 0); err != nil {
		return fmt.Errorf("enabling route_localnet on %s: %w", guestIf, err)
	}
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("opening nftables: %w", err)
	}
	t := c.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: "vminit"})
	ch := c.AddChain(&nftables.Chain{
		Name: "forward_to_loopback", Table: t,
		Type: nftables.ChainTypeNAT, Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest,
	})
	c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: forwardExprs(n)})
	if err := c.Flush(); err != nil {
		return fmt.Errorf("adding the forward to the loopback: %w", err)
	}
	return nil
}

// forwardExprs is the rule
//
//	iifname "eth0" ip saddr <Forwarder> meta l4proto tcp dnat to 127.0.0.1
func forwardExprs(n *Network) []expr.Any {
	ifname := make([]byte, unix.IFNAMSIZ)
	copy(ifname, guestIf)
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4}, // saddr
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: n.Forwarder.AsSlice()},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
		&expr.Immediate{Register: 1, Data: []byte{127, 0, 0, 1}},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1},
	}
}

// prefixNet is p as netlink takes an address.
func prefixNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}
