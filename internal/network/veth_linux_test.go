package network

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The test "internet": a namespace behind the host on a veth of its own
// with benchmarking-range addresses and the metadata address.
var (
	inetHost = netip.MustParseAddr("198.18.0.1") // the host's end: a host address
	inetAddr = netip.MustParseAddr("198.18.0.2")
	metaAddr = netip.MustParseAddr("169.254.169.254")
)

const inetLink = "sbtinet0" // not HostNamePrefix: the firewall must not treat it as a sandbox

// TestIsolation builds two sandboxes and a test internet, and checks the
// host-side isolation from inside the sandboxes.
func TestIsolation(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.LockFirewall(t)
	ctx := context.Background()
	// A server that ran on this host leaves the table (with no sandbox
	// chains once its sandboxes are gone): the test then shares it and
	// removes only its own pieces.
	existed := tableListed(t)
	t.Cleanup(func() {
		if !existed && tableListed(t) {
			t.Errorf("table inet %s still listed after teardown", TableName)
		}
	})
	runDir := t.TempDir()
	t.Cleanup(func() { _ = unix.Unmount(Dir(runDir), unix.MNT_DETACH) })

	inet := newNamespace(t, runDir, "inet")
	setupInternet(t, inet)
	inetPort := serve(t, inet, "0.0.0.0:0", "inet") // answers on inetAddr and metaAddr

	// Two host listeners on the test internet's host end (a host address):
	// one on a port the firewall allows, one on a port it does not.
	allowedLn := serve(t, nil, net.JoinHostPort(inetHost.String(), "0"), "host-allowed")
	hostPort := serve(t, nil, net.JoinHostPort(inetHost.String(), "0"), "host")

	fw, err := NewFirewall(FirewallConfig{HostTCPPorts: []uint16{allowedLn}})
	if err != nil {
		t.Fatal(err)
	}
	if err := fw.EnsureBase(ctx); err != nil {
		t.Fatal(err)
	}
	if !existed {
		t.Cleanup(func() {
			if err := fw.Delete(context.Background()); err != nil {
				t.Errorf("deleting firewall: %v", err)
			}
		})
	}
	if err := fw.EnsureBase(ctx); err != nil { // idempotent
		t.Fatalf("EnsureBase again: %v", err)
	}

	pool, err := NewPool(DefaultPoolPrefix)
	if err != nil {
		t.Fatal(err)
	}
	type sandbox struct {
		ns    *Namespace
		cfg   VethConfig
		port  uint16 // listener inside
		gwLst uint16 // host listener on the gateway address
	}
	sbs := make([]*sandbox, 2)
	for i := range sbs {
		id := fmt.Sprintf("isolation-test-%d-%d", os.Getpid(), i)
		ns := newNamespace(t, runDir, id)
		addrs, err := pool.Allocate(id)
		if err != nil {
			t.Fatal(err)
		}
		cfg := VethConfig{SandboxID: id, Addrs: addrs, Firewall: fw}
		if err := ns.AttachVeth(ctx, cfg); err != nil {
			t.Fatalf("AttachVeth: %v", err)
		}
		t.Cleanup(func() {
			if err := DetachVeth(context.Background(), cfg); err != nil {
				t.Errorf("DetachVeth: %v", err)
			}
		})
		sbs[i] = &sandbox{ns: ns, cfg: cfg,
			port:  serve(t, ns, "0.0.0.0:0", "sandbox"),
			gwLst: serve(t, nil, net.JoinHostPort(addrs.Gateway.String(), "0"), "gateway"),
		}
	}
	a, b := sbs[0], sbs[1]

	// The targets are real: the host reaches each of them.
	for _, addr := range []string{
		ap(inetAddr, inetPort), ap(metaAddr, inetPort),
		ap(a.cfg.Addrs.Sandbox, a.port), ap(b.cfg.Addrs.Sandbox, b.port),
	} {
		if err := dial(nil, addr); err != nil {
			t.Errorf("host to %s: %v", addr, err)
		}
	}
	// Existing behaviour: Dial into the sandbox's own loopback.
	if err := dial(a.ns, ap(netip.MustParseAddr("127.0.0.1"), a.port)); err != nil {
		t.Errorf("Dial into sandbox loopback: %v", err)
	}

	type check struct {
		name string
		addr string
		ok   bool
	}
	run := func(t *testing.T, from *sandbox, checks []check) {
		t.Helper()
		for _, c := range checks {
			err := dial(from.ns, c.addr)
			if c.ok && err != nil {
				t.Errorf("%s (%s): %v, want reachable", c.name, c.addr, err)
			}
			if !c.ok && err == nil {
				t.Errorf("%s (%s): reachable, want blocked", c.name, c.addr)
			}
		}
	}
	blocked := func(s, other *sandbox) []check {
		return []check{
			{"own gateway", ap(s.cfg.Addrs.Gateway, s.gwLst), false},
			{"other gateway", ap(other.cfg.Addrs.Gateway, other.gwLst), false},
			{"host address", ap(inetHost, hostPort), false},
			{"other sandbox", ap(other.cfg.Addrs.Sandbox, other.port), false},
			{"metadata", ap(metaAddr, inetPort), false},
		}
	}
	t.Run("deny-all default", func(t *testing.T) {
		for _, s := range []struct{ s, o *sandbox }{{a, b}, {b, a}} {
			run(t, s.s, append(blocked(s.s, s.o),
				check{"internet", ap(inetAddr, inetPort), false},
				check{"allowed host port", ap(inetHost, allowedLn), true},
			))
		}
	})
	t.Run("allow rule", func(t *testing.T) {
		if err := fw.SetAllowed(ctx, a.cfg.hostName(), []netip.Prefix{netip.PrefixFrom(inetAddr, 32)}); err != nil {
			t.Fatal(err)
		}
		run(t, a, []check{{"internet", ap(inetAddr, inetPort), true}})
		run(t, b, []check{{"internet from the other sandbox", ap(inetAddr, inetPort), false}})
		// Allowing everything opens neither the fixed denials nor the host.
		if err := fw.SetAllowed(ctx, a.cfg.hostName(), []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}); err != nil {
			t.Fatal(err)
		}
		run(t, a, append(blocked(a, b), check{"internet", ap(inetAddr, inetPort), true}))
		if err := fw.SetAllowed(ctx, a.cfg.hostName(), nil); err != nil {
			t.Fatal(err)
		}
		run(t, a, []check{{"internet after reset", ap(inetAddr, inetPort), false}})
	})
	t.Run("restore leases", func(t *testing.T) {
		leases, err := HostVeths()
		if err != nil {
			t.Fatal(err)
		}
		p2, _ := NewPool(DefaultPoolPrefix)
		if err := p2.Restore(leases); err != nil {
			t.Fatal(err)
		}
		for _, s := range sbs {
			if got := leases[s.cfg.SandboxID]; got != s.cfg.Addrs {
				t.Errorf("HostVeths[%s] = %v, want %v", s.cfg.SandboxID, got, s.cfg.Addrs)
			}
		}
		n, _ := p2.Allocate("new")
		if n == a.cfg.Addrs || n == b.cfg.Addrs {
			t.Errorf("restored pool handed out %v, in use", n)
		}
	})
	t.Run("detach", func(t *testing.T) {
		if err := DetachVeth(ctx, b.cfg); err != nil {
			t.Fatal(err)
		}
		if err := DetachVeth(ctx, b.cfg); err != nil {
			t.Errorf("DetachVeth again: %v", err)
		}
		if _, err := netlink.LinkByName(b.cfg.hostName()); err == nil {
			t.Errorf("host end %s still there", b.cfg.hostName())
		}
		var links []string
		if err := b.ns.Do(func() error {
			ls, err := netlink.LinkList()
			for _, l := range ls {
				links = append(links, l.Attrs().Name)
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(links, []string{"lo"}) {
			t.Errorf("links in detached sandbox = %v, want [lo]", links)
		}
		if chains := ourChains(t); slices.Contains(chains, sandboxChain+b.cfg.hostName()) ||
			!slices.Contains(chains, sandboxChain+a.cfg.hostName()) {
			t.Errorf("chains after detaching b = %v", chains)
		}
		// a is unaffected.
		run(t, a, []check{{"allowed host port", ap(inetHost, allowedLn), true}})
	})
}

func TestAttachVethRollsBack(t *testing.T) {
	testenv.RequireRoot(t)
	runDir := t.TempDir()
	t.Cleanup(func() { _ = unix.Unmount(Dir(runDir), unix.MNT_DETACH) })
	ns := newNamespace(t, runDir, "rollback")
	cfg := VethConfig{SandboxID: "rollback", Addrs: VethAddrs{
		Gateway: netip.MustParseAddr("198.18.3.1"), Sandbox: netip.MustParseAddr("198.18.3.2")}}
	// A second eth0 in the namespace fails at creation; a bad name or
	// address fails before anything is made.
	if err := ns.AttachVeth(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = DetachVeth(context.Background(), cfg) })
	other := cfg
	other.SandboxID = "rollback-2"
	if err := ns.AttachVeth(context.Background(), other); err == nil {
		t.Error("second AttachVeth into one namespace succeeded")
	}
	if _, err := netlink.LinkByName(VethName("rollback-2")); err == nil {
		t.Error("failed AttachVeth left its host end behind")
	}
	for _, bad := range []VethConfig{
		{HostName: "eth9", Addrs: cfg.Addrs},
		{HostName: "asb-0123456789ab", Addrs: cfg.Addrs},
		{SandboxID: "x", Addrs: VethAddrs{Gateway: cfg.Addrs.Gateway, Sandbox: netip.MustParseAddr("198.18.3.9")}},
	} {
		if err := ns.AttachVeth(context.Background(), bad); err == nil {
			t.Errorf("AttachVeth(%+v) succeeded", bad)
		}
	}
}

func setupInternet(t *testing.T, inet *Namespace) {
	t.Helper()
	f, err := os.Open(inet.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	la := netlink.NewLinkAttrs()
	la.Name = inetLink
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: "eth0", PeerNamespace: netlink.NsFd(int(f.Fd()))}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := deleteLink(inetLink); err != nil {
			t.Errorf("deleting %s: %v", inetLink, err)
		}
	})
	host, err := netlink.LinkByName(inetLink)
	if err != nil {
		t.Fatal(err)
	}
	// Replies to the sandboxes are forwarded from this link: per-interface
	// forwarding, which goes away with the link.
	if err := writeSysctl("ipv4/conf/"+inetLink+"/forwarding", "1"); err != nil {
		t.Fatal(err)
	}
	must(t, netlink.AddrAdd(host, &netlink.Addr{IPNet: ipNet(inetHost)}))
	must(t, netlink.LinkSetUp(host))
	must(t, netlink.RouteAdd(&netlink.Route{
		Dst: &net.IPNet{IP: net.IP(metaAddr.AsSlice()), Mask: net.CIDRMask(32, 32)},
		Gw:  net.IP(inetAddr.AsSlice()),
	}))
	must(t, inet.Do(func() error {
		eth, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		if err := netlink.AddrAdd(eth, &netlink.Addr{IPNet: ipNet(inetAddr)}); err != nil {
			return err
		}
		if err := netlink.LinkSetUp(eth); err != nil {
			return err
		}
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: eth.Attrs().Index, Gw: net.IP(inetHost.AsSlice())}); err != nil {
			return err
		}
		// No dummy driver in every kernel: the metadata address sits on eth0.
		return netlink.AddrAdd(eth, &netlink.Addr{IPNet: &net.IPNet{IP: net.IP(metaAddr.AsSlice()), Mask: net.CIDRMask(32, 32)}})
	}))
}

func newNamespace(t *testing.T, runDir, name string) *Namespace {
	t.Helper()
	ns, err := Create(runDir, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ns.Delete(); err != nil {
			t.Errorf("deleting namespace %s: %v", name, err)
		}
	})
	return ns
}

// serve listens on addr (inside ns, or on the host if ns is nil), answers
// each connection with tag, and returns the port.
func serve(t *testing.T, ns *Namespace, addr, tag string) uint16 {
	t.Helper()
	var ln net.Listener
	listen := func() (err error) {
		ln, err = net.Listen("tcp4", addr)
		return err
	}
	var err error
	if ns != nil {
		err = ns.Do(listen)
	} else {
		err = listen()
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			io.WriteString(c, tag)
			c.Close()
		}
	}()
	return uint16(ln.Addr().(*net.TCPAddr).Port)
}

// dial connects to addr from ns (the host if nil) and reads the greeting.
func dial(ns *Namespace, addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	var c net.Conn
	var err error
	if ns != nil {
		c, err = ns.Dial(ctx, "tcp4", addr)
	} else {
		var d net.Dialer
		c, err = d.DialContext(ctx, "tcp4", addr)
	}
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(700 * time.Millisecond))
	b, err := io.ReadAll(c)
	if err != nil {
		return err
	}
	if len(b) == 0 {
		return errors.New("no greeting")
	}
	return nil
}

func ap(a netip.Addr, port uint16) string { return netip.AddrPortFrom(a, port).String() }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func tableListed(t *testing.T) bool {
	t.Helper()
	exists, _, err := FirewallChains()
	if err != nil {
		t.Fatal(err)
	}
	return exists
}

func ourChains(t *testing.T) []string {
	t.Helper()
	_, chains, err := FirewallChains()
	if err != nil {
		t.Fatal(err)
	}
	return chains
}
