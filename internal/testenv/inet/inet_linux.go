package inet

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"net/netip"
	"os"
	"slices"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/network"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// namePrefix names both the namespace and the host end of its veth. It must
// not be network's sandbox prefix "asb-": the firewall would isolate the
// link as a sandbox instead of forwarding to it.
const namePrefix = "inet-"

// Start builds an Internet as cfg says and tears it down when t ends, also
// when t fails. It needs root: without it t is skipped (failed under CI).
func Start(t testing.TB, cfg Config) *Internet {
	t.Helper()
	testenv.RequireRoot(t)
	p, err := cfg.plan()
	if err != nil {
		t.Fatalf("starting test internet: %v", err)
	}
	name := namePrefix + randomHex(4) // 13 bytes: within IFNAMSIZ
	fail := func(step string, err error) {
		t.Helper()
		t.Fatalf("starting test internet %s: %s: %v", name, step, err)
	}
	// Each step pushes its undo as soon as it succeeds; t.Cleanup runs them
	// last in, first out.
	undo := func(f func() error) {
		t.Cleanup(func() {
			if err := f(); err != nil {
				t.Errorf("stopping test internet %s: %v", name, err)
			}
		})
	}

	link, unlock, err := lockAddrs(p)
	if err != nil {
		fail("locking addresses", err)
	}
	undo(unlock)
	host, far := link.Addr().Next(), link.Addr().Next().Next()

	runDir := cfg.RunDir
	if runDir == "" {
		runDir = t.TempDir()
	}
	dir := network.Dir(runDir)
	mounted, err := isMountRoot(dir)
	if err != nil {
		fail("inspecting the run directory", err)
	}
	if !mounted {
		// network.Create makes dir a mount point; leave it as found, or
		// removing a temporary RunDir fails.
		undo(func() error {
			if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
				return fmt.Errorf("unmounting %s: %w", dir, err)
			}
			return nil
		})
	}
	ns, err := network.Create(runDir, name)
	if err != nil {
		fail("creating the namespace", err)
	}
	undo(ns.Delete)

	if err := addVeth(ns, name); err != nil {
		fail("creating the veth", err)
	}
	undo(func() error { return network.DeleteLink(name) })
	index, err := setupHostEnd(name, link, host)
	if err != nil {
		fail("configuring the host end", err)
	}
	if err := ns.Do(func() error { return setupFarEnd(link, far, host, p.addrs) }); err != nil {
		fail("configuring the namespace", err)
	}
	for _, a := range p.addrs {
		r := &netlink.Route{LinkIndex: index, Dst: hostPrefix(a), Gw: net.IP(far.AsSlice())}
		if err := netlink.RouteAdd(r); err != nil {
			// EEXIST: a route this test does not own (another tool's, or a
			// test internet that bypassed the locks) already claims a.
			fail(fmt.Sprintf("adding host route to %s via %s", a, far), err)
		}
		undo(func() error { return deleteRoute(r) })
	}

	in := &Internet{NS: ns, Link: name, HostAddr: host, DNS: netip.AddrPortFrom(far, 53), Sites: make(map[string][]netip.Addr)}
	for n, addrs := range p.sites {
		in.Sites[n] = slices.Clone(addrs) // the DNS server reads p.sites while the caller may write these
	}
	all := append([]netip.Addr{far}, p.addrs...)
	names := slices.Sorted(maps.Keys(p.sites))
	var cert tls.Certificate
	in.CACert, cert, err = newCertificate(names, all)
	if err != nil {
		fail("issuing the certificate", err)
	}
	var ls *listeners
	if err := ns.Do(func() (err error) {
		ls, err = listen(far, all)
		return err
	}); err != nil {
		fail("listening", err)
	}
	srv := serve(ls, cert, &dnsServer{sites: p.dns, log: in.logQuery})
	undo(srv.close)
	return in
}

func addVeth(ns *network.Namespace, name string) error {
	f, err := os.Open(ns.Path())
	if err != nil {
		return err
	}
	defer f.Close()
	la := netlink.NewLinkAttrs()
	la.Name = name
	veth := &netlink.Veth{LinkAttrs: la, PeerName: "eth0", PeerNamespace: netlink.NsFd(int(f.Fd()))}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("adding %s: %w", name, err)
	}
	return nil
}

// setupHostEnd addresses and raises the host end and returns its index.
func setupHostEnd(name string, link netip.Prefix, host netip.Addr) (int, error) {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return 0, fmt.Errorf("finding %s: %w", name, err)
	}
	if err := netlink.AddrAdd(l, &netlink.Addr{IPNet: linkNet(host, link)}); err != nil {
		return 0, fmt.Errorf("adding %s to %s: %w", host, name, err)
	}
	// Replies to sandboxes come in here and are forwarded to them; the
	// per-interface switch goes away with the link, the global one is left
	// alone.
	if err := network.WriteSysctl("ipv4/conf/"+name+"/forwarding", "1"); err != nil {
		return 0, err
	}
	// The Internet is IPv4 only, as sandboxes are: no link-local address
	// or route on the host for tests to trip over. A kernel without IPv6
	// has no switch.
	if err := network.WriteSysctl("ipv6/conf/"+name+"/disable_ipv6", "1"); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return 0, err
	}
	if err := netlink.LinkSetUp(l); err != nil {
		return 0, fmt.Errorf("setting %s up: %w", name, err)
	}
	return l.Attrs().Index, nil
}

// setupFarEnd runs inside the namespace: eth0 gets the link's far end and
// the default route back to the host, lo the addresses the Internet holds.
func setupFarEnd(link netip.Prefix, far, host netip.Addr, addrs []netip.Addr) error {
	eth, err := netlink.LinkByName("eth0")
	if err != nil {
		return fmt.Errorf("finding eth0: %w", err)
	}
	if err := netlink.AddrAdd(eth, &netlink.Addr{IPNet: linkNet(far, link)}); err != nil {
		return fmt.Errorf("adding %s to eth0: %w", far, err)
	}
	if err := netlink.LinkSetUp(eth); err != nil {
		return fmt.Errorf("setting eth0 up: %w", err)
	}
	if err := netlink.RouteAdd(&netlink.Route{LinkIndex: eth.Attrs().Index, Gw: net.IP(host.AsSlice())}); err != nil {
		return fmt.Errorf("adding default route via %s: %w", host, err)
	}
	// On lo, as /32s: they need no subnet route and the host routes to
	// them through eth0 anyway (the dummy driver is not in every kernel).
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("finding lo: %w", err)
	}
	for _, a := range addrs {
		if err := netlink.AddrAdd(lo, &netlink.Addr{IPNet: hostPrefix(a)}); err != nil {
			return fmt.Errorf("adding %s to lo: %w", a, err)
		}
	}
	return nil
}

func deleteRoute(r *netlink.Route) error {
	if err := netlink.RouteDel(r); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("deleting host route to %s: %w", r.Dst, err)
	}
	return nil
}

// isMountRoot reports whether path is the root of a mount; a missing path
// is not.
func isMountRoot(path string) (bool, error) {
	var st unix.Statx_t
	err := unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BASIC_STATS, &st)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, &os.PathError{Op: "statx", Path: path, Err: err}
	}
	if st.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT == 0 {
		return false, errors.New("the kernel does not report mount roots (Linux 5.8 or later does)")
	}
	return st.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0, nil
}

func hostPrefix(a netip.Addr) *net.IPNet {
	return &net.IPNet{IP: net.IP(a.AsSlice()), Mask: net.CIDRMask(32, 32)}
}

func linkNet(a netip.Addr, link netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: net.IP(a.AsSlice()), Mask: net.CIDRMask(link.Bits(), 32)}
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b) // never fails (crypto/rand, Go 1.24)
	return hex.EncodeToString(b)
}
