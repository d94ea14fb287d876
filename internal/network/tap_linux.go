package network

import (
	"fmt"
	"net"
	"net/netip"
	"os"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ForwarderAddr is the namespace's own address once ForwardTo has handed
// the sandbox's address to a VM: the server's connections into the
// sandbox (Dial to Link.Address) come from it. It is link-local, so it
// is never routed beyond the tap, and the host's firewall drops it from
// a sandbox anyway.
var ForwarderAddr = netip.MustParseAddr("169.254.0.1")

// OpenTap creates the tap device name inside the namespace and returns
// its one queue, for a VM monitor to read and write frames on (with
// virtio-net headers: IFF_VNET_HDR). The device exists as long as the
// descriptor is open, in this process or the one it is passed to: it
// goes with the VM, and nothing is left to remove.
func (ns *Namespace) OpenTap(name string) (*os.File, error) {
	var tap *os.File
	err := ns.Do(func() error {
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("opening /dev/net/tun: %w", err)
		}
		ifr, err := unix.NewIfreq(name)
		if err != nil {
			unix.Close(fd)
			return err
		}
		ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			unix.Close(fd)
			return fmt.Errorf("TUNSETIFF: %w", err)
		}
		tap = os.NewFile(uintptr(fd), "tap "+name)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("creating tap %s in %s: %w", name, ns.name, err)
	}
	return tap, nil
}

// ForwardTo moves the sandbox's address (link.Address, on PeerName since
// AttachVeth) to a VM behind dev, a tap in the namespace: the namespace
// becomes a router between the veth and the tap that answers ARP for each
// side on the other's behalf (proxy ARP), so the guest uses the address
// and gateway the jail would, and the host's firewall, DNS filter and
// shaper on the veth see the guest's own packets unchanged. The
// namespace keeps only ForwarderAddr, on dev, from which the server
// reaches the guest.
func (ns *Namespace) ForwardTo(dev string, link Link) error {
	hostEnd, err := netlink.LinkByName(link.HostIf)
	if err != nil {
		return fmt.Errorf("forwarding %s to %s in %s: finding %s: %w", link.Address, dev, ns.name, link.HostIf, err)
	}
	err = ns.Do(func() error {
		peer, err := netlink.LinkByName(PeerName)
		if err != nil {
			return fmt.Errorf("finding %s: %w", PeerName, err)
		}
		tap, err := netlink.LinkByName(dev)
		if err != nil {
			return fmt.Errorf("finding %s: %w", dev, err)
		}
		for _, kv := range [][2]string{
			{"ipv4/ip_forward", "1"},
			{"ipv6/conf/" + dev + "/disable_ipv6", "1"},
			{"ipv4/conf/" + PeerName + "/proxy_arp", "1"},
			{"ipv4/conf/" + dev + "/proxy_arp", "1"},
			// Proxy ARP answers after a random delay of up to 0.8 s by
			// default, which gives a real owner on a shared segment the
			// first word; each of these links has no other. A restored
			// guest asks for its new gateway when it first answers.
			{"ipv4/neigh/" + PeerName + "/proxy_delay", "0"},
			{"ipv4/neigh/" + dev + "/proxy_delay", "0"},
		} {
			if err := WriteSysctl(kv[0], kv[1]); err != nil {
				return err
			}
		}
		// Removing the address takes the default route with it.
		if err := netlink.AddrDel(peer, &netlink.Addr{IPNet: ipNet(link.Address)}); err != nil {
			return fmt.Errorf("removing %s from %s: %w", link.Address, PeerName, err)
		}
		fwd := &net.IPNet{IP: net.IP(ForwarderAddr.AsSlice()), Mask: net.CIDRMask(32, 32)}
		if err := netlink.AddrAdd(tap, &netlink.Addr{IPNet: fwd}); err != nil {
			return fmt.Errorf("adding %s to %s: %w", ForwarderAddr, dev, err)
		}
		if err := netlink.LinkSetUp(tap); err != nil {
			return fmt.Errorf("setting %s up: %w", dev, err)
		}
		host32 := func(a netip.Addr) *net.IPNet {
			return &net.IPNet{IP: net.IP(a.AsSlice()), Mask: net.CIDRMask(32, 32)}
		}
		routes := []*netlink.Route{
			{LinkIndex: peer.Attrs().Index, Dst: host32(link.Gateway), Scope: netlink.SCOPE_LINK},
			{LinkIndex: peer.Attrs().Index, Gw: net.IP(link.Gateway.AsSlice())},
			{LinkIndex: tap.Attrs().Index, Dst: host32(link.Address), Scope: netlink.SCOPE_LINK, Src: fwd.IP},
		}
		for _, r := range routes {
			if err := netlink.RouteAdd(r); err != nil {
				return fmt.Errorf("adding route %s: %w", r, err)
			}
		}
		// Without an address on the veth, the namespace would ask for the
		// gateway's MAC from ForwarderAddr, which the host end's strict
		// rp_filter (its route is not the veth) leaves unanswered: the
		// guest would reach nothing. The entry is set instead.
		gw := &netlink.Neigh{
			LinkIndex: peer.Attrs().Index, Family: netlink.FAMILY_V4, State: netlink.NUD_PERMANENT,
			IP: net.IP(link.Gateway.AsSlice()), HardwareAddr: hostEnd.Attrs().HardwareAddr,
		}
		if err := netlink.NeighSet(gw); err != nil {
			return fmt.Errorf("setting the gateway's neighbour entry: %w", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("forwarding %s to %s in %s: %w", link.Address, dev, ns.name, err)
	}
	return nil
}
