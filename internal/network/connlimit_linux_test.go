package network

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
)

// TestConnLimit floods the host's conntrack table from one sandbox, with
// UDP to many ports of the test internet (forwarded) and DNS queries (to
// the gateway, by the redirect): the sandbox's entries stop at the cap, its
// next connection is dropped while a neighbour's goes through, and once its
// entries are gone (as when they expire) it connects again.
func TestConnLimit(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.LockFirewall(t)
	ctx := context.Background()
	existed := tableListed(t)
	runDir := t.TempDir()
	t.Cleanup(func() { _ = unix.Unmount(Dir(runDir), unix.MNT_DETACH) })
	inet := newNamespace(t, runDir, "inet")
	setupInternet(t, inet)
	inetUDP := serveUDPIn(t, inet, net.JoinHostPort(inetAddr.String(), "0"))

	const limit = 40
	pool, err := NewPool(netip.MustParsePrefix("10.253.0.0/24"))
	if err != nil {
		t.Fatal(err)
	}
	// The DNS redirect's target listens on a gateway, which exists once
	// the veths do; the base is rewritten with it then.
	cfg := FirewallConfig{MaxConnsPerSandbox: limit}
	fw, err := NewFirewall(cfg)
	if err != nil {
		t.Fatal(err)
	}
	must(t, fw.EnsureBase(ctx))
	if !existed {
		t.Cleanup(func() {
			if err := fw.Delete(context.Background()); err != nil {
				t.Errorf("deleting firewall: %v", err)
			}
		})
	}
	var sbs [2]struct {
		ns  *Namespace
		cfg VethConfig
	}
	for i := range sbs {
		id := fmt.Sprintf("connlimit-test-%d-%d", os.Getpid(), i)
		ns := newNamespace(t, runDir, id)
		addrs, err := pool.Allocate(id)
		if err != nil {
			t.Fatal(err)
		}
		vc := VethConfig{SandboxID: id, Addrs: addrs, Firewall: fw}
		if err := ns.AttachVeth(ctx, vc); err != nil {
			t.Fatalf("AttachVeth: %v", err)
		}
		t.Cleanup(func() {
			if err := DetachVeth(context.Background(), vc); err != nil {
				t.Errorf("DetachVeth: %v", err)
			}
		})
		must(t, fw.SetRules(ctx, vc.hostName(), SandboxRules{{Prefix: netip.PrefixFrom(inetAddr, 32), Accept: true}}))
		sbs[i].ns, sbs[i].cfg = ns, vc
	}
	flooder, neighbour := sbs[0], sbs[1]
	dns := serveUDP(t, net.JoinHostPort(flooder.cfg.Addrs.Gateway.String(), "0"))
	cfg.Redirects = []Redirect{{Proto: "udp", Port: 53, ToPort: dns}}
	if fw, err = NewFirewall(cfg); err != nil {
		t.Fatal(err)
	}
	must(t, fw.EnsureBase(ctx))

	// Positive controls before the flood: both sandboxes reach the test
	// internet, and the flooder's DNS query reaches the gateway.
	for _, s := range sbs {
		if _, err := askUDP(s.ns, ap(inetAddr, inetUDP)); err != nil {
			t.Fatalf("control: %s to the test internet: %v", s.cfg.SandboxID, err)
		}
	}
	if _, err := askUDP(flooder.ns, "192.0.2.53:53"); err != nil {
		t.Fatalf("control: DNS from the flooder: %v", err)
	}

	// The flood: a datagram to each of 300 ports of the test internet, and
	// 300 DNS queries, each from a new source port: 600 connections.
	must(t, flooder.ns.Do(func() error {
		for i := range 300 {
			for _, dst := range []string{ap(inetAddr, uint16(20000+i)), "192.0.2.53:53"} {
				c, err := net.Dial("udp4", dst)
				if err != nil {
					return err
				}
				c.Write([]byte("flood"))
				c.Close()
			}
		}
		return nil
	}))
	n := conntrackFrom(t, flooder.cfg.Addrs.Sandbox)
	t.Logf("conntrack entries of the flooder after 600 new connections: %d (cap %d)", n, limit)
	if n > limit || n < limit-2 {
		t.Errorf("the flooder holds %d conntrack entries, want the cap %d (at most, and the flood must reach it)", n, limit)
	}
	if _, err := askUDP(flooder.ns, ap(inetAddr, inetUDP)); err == nil {
		t.Error("the flooder opened a new connection beyond its cap")
	}
	if _, err := askUDP(flooder.ns, "192.0.2.53:53"); err == nil {
		t.Error("the flooder's DNS query went through beyond its cap")
	}
	if _, err := askUDP(neighbour.ns, ap(inetAddr, inetUDP)); err != nil {
		t.Errorf("the neighbour cannot connect while the flooder is capped: %v", err)
	}

	// Its entries released (what their expiry does, 30 s later), the
	// flooder connects again.
	f := &netlink.ConntrackFilter{}
	must(t, f.AddIP(netlink.ConntrackOrigSrcIP, net.IP(flooder.cfg.Addrs.Sandbox.AsSlice())))
	if _, err := netlink.ConntrackDeleteFilters(netlink.ConntrackTable, unix.AF_INET, f); err != nil {
		t.Fatal(err)
	}
	if _, err := askUDP(flooder.ns, ap(inetAddr, inetUDP)); err != nil {
		t.Errorf("the flooder after its entries were released: %v", err)
	}
}

// conntrackFrom counts the host's conntrack entries from src.
func conntrackFrom(t *testing.T, src netip.Addr) int {
	t.Helper()
	flows, err := netlink.ConntrackTableList(netlink.ConntrackTable, unix.AF_INET)
	if err != nil {
		t.Fatalf("listing conntrack: %v", err)
	}
	n := 0
	for _, f := range flows {
		if a, ok := netip.AddrFromSlice(f.Forward.SrcIP); ok && a.Unmap() == src {
			n++
		}
	}
	return n
}

// serveUDPIn is serveUDP inside ns.
func serveUDPIn(t *testing.T, ns *Namespace, addr string) uint16 {
	t.Helper()
	var port uint16
	must(t, ns.Do(func() error {
		port = serveUDP(t, addr)
		return nil
	}))
	return port
}
