package network

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
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
// isolationTestPrefix is away from DefaultPoolPrefix, which a server's
// surviving sandboxes may hold.
var isolationTestPrefix = netip.MustParsePrefix("10.252.0.0/24")

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
	whoPort := serveWith(t, inet, "0.0.0.0:0", remoteIP)

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

	pool, err := NewPool(isolationTestPrefix)
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
	t.Run("link settings", func(t *testing.T) {
		host := a.cfg.hostName()
		want := map[string]string{
			"ipv4/conf/" + host + "/forwarding":     "1",
			"ipv4/conf/" + host + "/rp_filter":      "1",
			"ipv4/conf/" + host + "/send_redirects": "0",
			"ipv6/conf/" + host + "/disable_ipv6":   "1",
		}
		for path, v := range want {
			got, err := readSysctl(path)
			must(t, err)
			if got != v {
				t.Errorf("%s = %s, want %s", path, got, v)
			}
		}
		// Inside, the veth's end has IPv6 off; loopback keeps it.
		want = map[string]string{PeerName: "1", "lo": "0"}
		got := map[string]string{}
		must(t, a.ns.Do(func() error {
			for dev := range want {
				v, err := readSysctl("ipv6/conf/" + dev + "/disable_ipv6")
				if err != nil {
					return err
				}
				got[dev] = v
			}
			return nil
		}))
		if !maps.Equal(got, want) {
			t.Errorf("inside: disable_ipv6 = %v, want %v", got, want)
		}
	})

	// The redirect targets listen on a's gateway, which exists only now.
	// The config naming their ports rewrites the base chains of the table
	// in use, as a server restarted with a new config does.
	redirTCP := serveWith(t, nil, net.JoinHostPort(a.cfg.Addrs.Gateway.String(), "0"), remoteIP)
	redirUDP := serveUDP(t, net.JoinHostPort(a.cfg.Addrs.Gateway.String(), "0"))
	drops, group := watchDrops(t)
	closedUDP := closedUDPPort(t, inetHost)
	fw, err = NewFirewall(FirewallConfig{
		HostTCPPorts: []uint16{allowedLn},
		HostUDPPorts: []uint16{closedUDP},
		Redirects:    []Redirect{{Proto: "udp", Port: 53, ToPort: redirUDP}, {Proto: "tcp", Port: 80, ToPort: redirTCP}},
		LogGroup:     group,
	})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // idempotent
		if err := fw.EnsureBase(ctx); err != nil {
			t.Fatalf("EnsureBase with redirects and logging: %v", err)
		}
	}
	if chains := ourChains(t); !slices.Contains(chains, sandboxChain+a.cfg.hostName()) ||
		!slices.Contains(chains, chainPrerouting) || !slices.Contains(chains, chainPostrouting) {
		t.Errorf("chains after rewriting the base = %v", chains)
	}

	// The targets are real: the host reaches the test internet's, and
	// each sandbox its own listener on its own address.
	for _, addr := range []string{ap(inetAddr, inetPort), ap(metaAddr, inetPort)} {
		if err := dial(nil, addr); err != nil {
			t.Errorf("host to %s: %v", addr, err)
		}
	}
	for _, s := range sbs {
		if err := dial(s.ns, ap(s.cfg.Addrs.Sandbox, s.port)); err != nil {
			t.Errorf("sandbox to its own %s: %v", ap(s.cfg.Addrs.Sandbox, s.port), err)
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
	t.Run("host to sandbox", func(t *testing.T) {
		// Only replies: the host's SYN is dropped (a timeout, where a
		// closed port would be refused), while the answers of host
		// listeners a sandbox may reach (TCP, and the redirected UDP and
		// TCP) and an ICMP error about its datagram still come back.
		for _, s := range sbs {
			var ne net.Error
			if err := dial(nil, ap(s.cfg.Addrs.Sandbox, s.port)); !errors.As(err, &ne) || !ne.Timeout() {
				t.Errorf("host to %s: %v, want a timeout (dropped in output)", ap(s.cfg.Addrs.Sandbox, s.port), err)
			}
		}
		// A datagram is refused by the output chain before it leaves.
		if _, err := askUDP(nil, ap(a.cfg.Addrs.Sandbox, 9)); !errors.Is(err, unix.EPERM) {
			t.Errorf("udp from the host to %s: %v, want EPERM", ap(a.cfg.Addrs.Sandbox, 9), err)
		}
		run(t, a, []check{{"allowed host port", ap(inetHost, allowedLn), true}})
		if got, err := askUDP(a.ns, ap(inetAddr, 53)); err != nil || got != a.cfg.Addrs.Sandbox.String() {
			t.Errorf("redirected udp: answer %q (%v), want %s", got, err, a.cfg.Addrs.Sandbox)
		}
		if got, err := fetch(a.ns, ap(inetAddr, 80)); err != nil || got != a.cfg.Addrs.Sandbox.String() {
			t.Errorf("redirected tcp: answer %q (%v), want %s", got, err, a.cfg.Addrs.Sandbox)
		}
		if _, err := askUDP(a.ns, ap(inetHost, closedUDP)); !errors.Is(err, unix.ECONNREFUSED) {
			t.Errorf("udp to the closed host port %d: %v, want ECONNREFUSED (the host's ICMP error)", closedUDP, err)
		}
	})
	t.Run("deny-all default", func(t *testing.T) {
		for _, s := range []struct{ s, o *sandbox }{{a, b}, {b, a}} {
			run(t, s.s, append(blocked(s.s, s.o),
				check{"internet", ap(inetAddr, inetPort), false},
				check{"allowed host port", ap(inetHost, allowedLn), true},
			))
		}
	})
	t.Run("allow rule", func(t *testing.T) {
		if err := fw.SetRules(ctx, a.cfg.hostName(), SandboxRules{{Prefix: netip.PrefixFrom(inetAddr, 32), Accept: true}}); err != nil {
			t.Fatal(err)
		}
		run(t, a, []check{{"internet", ap(inetAddr, inetPort), true}})
		run(t, b, []check{{"internet from the other sandbox", ap(inetAddr, inetPort), false}})
		// Allowing everything opens neither the fixed denials nor the host.
		if err := fw.SetRules(ctx, a.cfg.hostName(), SandboxRules{{Prefix: netip.MustParsePrefix("0.0.0.0/0"), Accept: true}}); err != nil {
			t.Fatal(err)
		}
		run(t, a, append(blocked(a, b), check{"internet", ap(inetAddr, inetPort), true}))
		if err := fw.SetRules(ctx, a.cfg.hostName(), nil); err != nil {
			t.Fatal(err)
		}
		run(t, a, []check{{"internet after reset", ap(inetAddr, inetPort), false}})
		// The first matching rule decides: an accept before a drop that
		// covers it opens its prefix (E2B's allowOut over denyOut), one
		// after it does not.
		inet, all := netip.PrefixFrom(inetAddr, 32), netip.MustParsePrefix("0.0.0.0/0")
		for _, o := range []struct {
			name  string
			rules SandboxRules
			open  bool
		}{
			{"accept before a covering drop", SandboxRules{{Prefix: inet, Accept: true}, {Prefix: all}}, true},
			{"accept after a covering drop", SandboxRules{{Prefix: all}, {Prefix: inet, Accept: true}}, false},
		} {
			if err := fw.SetRules(ctx, a.cfg.hostName(), o.rules); err != nil {
				t.Fatal(err)
			}
			run(t, a, []check{{o.name, ap(inetAddr, inetPort), o.open}})
		}
		if err := fw.SetRules(ctx, a.cfg.hostName(), nil); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("redirect", func(t *testing.T) {
		src := a.cfg.Addrs.Sandbox.String()
		// Whatever the address, the host's listener gets it, from the
		// sandbox, and the answer comes back from the address asked.
		for _, dst := range []netip.Addr{inetAddr, netip.MustParseAddr("203.0.113.9")} {
			if got, err := askUDP(a.ns, ap(dst, 53)); err != nil || got != src {
				t.Errorf("udp to %s: listener saw %q (%v), want %q", ap(dst, 53), got, err, src)
			}
		}
		if got, err := fetch(a.ns, ap(inetAddr, 80)); err != nil || got != src {
			t.Errorf("tcp to %s: listener saw %q (%v), want %q", ap(inetAddr, 80), got, err, src)
		}
		// The targets themselves are reached only through the redirects.
		gw := a.cfg.Addrs.Gateway
		if err := dial(a.ns, ap(gw, redirTCP)); err == nil {
			t.Errorf("tcp to %s, not redirected: reachable, want blocked", ap(gw, redirTCP))
		}
		if got, err := askUDP(a.ns, ap(gw, redirUDP)); err == nil {
			t.Errorf("udp to %s, not redirected: answered %q, want blocked", ap(gw, redirUDP), got)
		}
		// Other ports are not redirected.
		run(t, a, []check{{"internet, port 81", ap(inetAddr, 81), false}})
	})
	t.Run("masquerade", func(t *testing.T) {
		err := inet.Do(func() error {
			_, err := netlink.RouteGet(net.IP(a.cfg.Addrs.Sandbox.AsSlice()))
			return err
		})
		if err == nil {
			t.Fatalf("the test internet has a route to %s; the check proves nothing", a.cfg.Addrs.Sandbox)
		}
		if err := fw.SetRules(ctx, a.cfg.hostName(), SandboxRules{{Prefix: netip.MustParsePrefix("198.18.0.0/24"), Accept: true}}); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := fw.SetRules(ctx, a.cfg.hostName(), nil); err != nil {
				t.Error(err)
			}
		}()
		if got, err := fetch(a.ns, ap(inetAddr, whoPort)); err != nil || got != inetHost.String() {
			t.Errorf("internet saw %q (%v), want the host's address %s", got, err, inetHost)
		}
	})
	t.Run("drop log", func(t *testing.T) {
		for len(drops) > 0 { // earlier tests'
			<-drops
		}
		host, src := a.cfg.hostName(), a.cfg.Addrs.Sandbox
		// Ports no earlier test probed, so that no late drop of theirs
		// stands in for one of these.
		probe := func(reason, proto string, dst netip.Addr, port uint16) Drop {
			return Drop{HostIf: host, Reason: reason, Proto: proto, Src: src, Dst: dst, DstPort: port}
		}
		tcpProbes := []Drop{
			probe(DropBlocked, "tcp", metaAddr, 7101),
			probe(DropSandbox, "tcp", b.cfg.Addrs.Sandbox, 7102),
			probe(DropHost, "tcp", inetHost, 7103),
			probe(DropHost, "tcp", a.cfg.Addrs.Gateway, redirTCP),
			probe(DropDefault, "tcp", inetAddr, 7104),
		}
		udpProbe := probe(DropDefault, "udp", inetAddr, 7105)
		v6Probe := Drop{HostIf: host, Reason: DropIPv6, Proto: "udp",
			Src: netip.MustParseAddr("fe80::2"), Dst: netip.MustParseAddr("ff02::1"), DstPort: 7106}

		var wg sync.WaitGroup
		for _, p := range tcpProbes {
			wg.Go(func() {
				if err := dial(a.ns, ap(p.Dst, p.DstPort)); err == nil {
					t.Errorf("%s (%s) reachable", p.Reason, ap(p.Dst, p.DstPort))
				}
			})
		}
		wg.Go(func() {
			if _, err := askUDP(a.ns, ap(udpProbe.Dst, udpProbe.DstPort)); err == nil {
				t.Errorf("udp to %s answered", ap(udpProbe.Dst, udpProbe.DstPort))
			}
		})
		// IPv6 is off at both ends. A packet socket sends it anyway, and
		// the host end takes it in for as long as the test needs.
		disable := "ipv6/conf/" + host + "/disable_ipv6"
		must(t, WriteSysctl(disable, "0"))
		defer func() { must(t, WriteSysctl(disable, "1")) }()
		must(t, sendIPv6(a.ns, ipv6UDP(v6Probe.Src, v6Probe.Dst, 40000, v6Probe.DstPort, []byte("probe"))))
		wg.Wait()

		want := append(tcpProbes, udpProbe, v6Probe)
		var seen []Drop
		deadline := time.After(5 * time.Second)
		for len(want) > 0 {
			select {
			case d := <-drops:
				if d.Time.IsZero() {
					t.Errorf("drop without a time: %+v", d)
				}
				d.Time = time.Time{}
				seen = append(seen, d)
				if i := slices.Index(want, d); i >= 0 {
					want = slices.Delete(want, i, i+1)
				}
			case <-deadline:
				t.Fatalf("drops not logged:\n%v\nlogged:\n%v", want, seen)
			}
		}
	})
	t.Run("restore leases", func(t *testing.T) {
		leases, err := HostVeths()
		if err != nil {
			t.Fatal(err)
		}
		// Only this test's: sandboxes a stopped server left running keep
		// their veths (and addresses of the default pool).
		mine := map[string]VethAddrs{}
		for _, s := range sbs {
			if a, ok := leases[s.cfg.SandboxID]; ok {
				mine[s.cfg.SandboxID] = a
			}
		}
		p2, _ := NewPool(isolationTestPrefix)
		if err := p2.Restore(mine); err != nil {
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

func TestNewFirewallRedirects(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    []Redirect
		ok   bool
	}{
		{"tcp and udp on one port", []Redirect{{"udp", 53, 5353}, {"tcp", 53, 5353}}, true},
		{"sctp", []Redirect{{"sctp", 53, 5353}}, false},
		{"port 0", []Redirect{{"udp", 0, 5353}}, false},
		{"to port 0", []Redirect{{"udp", 53, 0}}, false},
		{"to itself", []Redirect{{"udp", 53, 53}}, false},
		{"twice", []Redirect{{"tcp", 80, 8080}, {"tcp", 80, 8081}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewFirewall(FirewallConfig{Redirects: tc.r})
			if (err == nil) != tc.ok {
				t.Errorf("NewFirewall(%v): %v, want ok %v", tc.r, err, tc.ok)
			}
		})
	}
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
		if err := DeleteLink(inetLink); err != nil {
			t.Errorf("deleting %s: %v", inetLink, err)
		}
	})
	host, err := netlink.LinkByName(inetLink)
	if err != nil {
		t.Fatal(err)
	}
	// Replies to the sandboxes are forwarded from this link: per-interface
	// forwarding, which goes away with the link.
	if err := WriteSysctl("ipv4/conf/"+inetLink+"/forwarding", "1"); err != nil {
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
		// No route back to the pool (none beyond the link): the host
		// masquerades what it forwards, so the answers go to its address.
		if err := netlink.LinkSetUp(eth); err != nil {
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
	return serveWith(t, ns, addr, func(net.Addr) string { return tag })
}

// remoteIP greets a peer with its own address as the listener sees it.
func remoteIP(a net.Addr) string { return netip.MustParseAddrPort(a.String()).Addr().String() }

// serveWith is serve with a greeting made from the peer's address.
func serveWith(t *testing.T, ns *Namespace, addr string, greet func(remote net.Addr) string) uint16 {
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
			io.WriteString(c, greet(c.RemoteAddr()))
			c.Close()
		}
	}()
	return uint16(ln.Addr().(*net.TCPAddr).Port)
}

// dial connects to addr from ns (the host if nil) and reads a greeting.
func dial(ns *Namespace, addr string) error {
	_, err := fetch(ns, addr)
	return err
}

// fetch connects to addr from ns (the host if nil) and returns the
// greeting.
func fetch(ns *Namespace, addr string) (string, error) {
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
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(700 * time.Millisecond))
	b, err := io.ReadAll(c)
	if err != nil {
		return "", err
	}
	if len(b) == 0 {
		return "", errors.New("no greeting")
	}
	return string(b), nil
}

// serveUDP listens for UDP on addr on the host, answers each datagram with
// the sender's address, and returns the port.
func serveUDP(t *testing.T, addr string) uint16 {
	t.Helper()
	pc, err := net.ListenPacket("udp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 512)
		for {
			_, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo([]byte(remoteIP(from)), from)
		}
	}()
	return uint16(pc.LocalAddr().(*net.UDPAddr).Port)
}

// closedUDPPort returns a UDP port on addr that nothing listens on.
func closedUDPPort(t *testing.T, addr netip.Addr) uint16 {
	t.Helper()
	pc, err := net.ListenPacket("udp4", ap(addr, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	return uint16(pc.LocalAddr().(*net.UDPAddr).Port)
}

// askUDP sends a datagram to addr from inside ns (the host if nil) and
// returns the answer, which a connected socket takes only from addr.
func askUDP(ns *Namespace, addr string) (string, error) {
	var c net.Conn
	open := func() (err error) {
		c, err = net.Dial("udp4", addr)
		return err
	}
	var err error
	if ns != nil {
		err = ns.Do(open)
	} else {
		err = open()
	}
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(700 * time.Millisecond))
	if _, err := c.Write([]byte("ping")); err != nil {
		return "", err
	}
	b := make([]byte, 512)
	n, err := c.Read(b)
	if err != nil {
		return "", err
	}
	return string(b[:n]), nil
}

// sendIPv6 sends an IPv6 packet to a multicast destination out of the
// sandbox's eth0 with a packet socket, which needs no IPv6 in the sandbox.
func sendIPv6(ns *Namespace, pkt []byte) error {
	return ns.Do(func() error {
		eth, err := net.InterfaceByName(PeerName)
		if err != nil {
			return err
		}
		proto := int(binary.BigEndian.Uint16(binary.NativeEndian.AppendUint16(nil, unix.ETH_P_IPV6))) // htons
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, proto)
		if err != nil {
			return fmt.Errorf("opening packet socket: %w", err)
		}
		defer unix.Close(fd)
		// 33:33 and the group's last four bytes (RFC 2464).
		to := &unix.SockaddrLinklayer{Protocol: uint16(proto), Ifindex: eth.Index, Halen: 6,
			Addr: [8]byte{0x33, 0x33, pkt[36], pkt[37], pkt[38], pkt[39]}}
		if err := unix.Sendto(fd, pkt, 0, to); err != nil {
			return fmt.Errorf("sending IPv6 packet: %w", err)
		}
		return nil
	})
}

// watchDrops binds a drop log group of the test's own and reads it into
// the channel (dropping what does not fit) until the test ends.
func watchDrops(t *testing.T) (<-chan Drop, uint16) {
	t.Helper()
	l, group := openDropLog(t, 4242)
	drops := make(chan Drop, 1024)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- l.Read(ctx, func(d Drop) {
			select {
			case drops <- d:
			default:
			}
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("reading drop log: %v", err)
		}
	})
	return drops, group
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

// readSysctl returns /proc/sys/net/<path> in the calling thread's network
// namespace, without its newline.
func readSysctl(path string) (string, error) {
	b, err := os.ReadFile("/proc/sys/net/" + path)
	return strings.TrimSpace(string(b)), err
}
