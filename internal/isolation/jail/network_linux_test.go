package jail

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/jail/jailtest"
	"github.com/agent-sandbox/agent-sandbox/internal/network"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
)

// testPoolPrefix is away from DefaultPoolPrefix, so that a server running
// on the same host never shares an address with the test.
var testPoolPrefix = netip.MustParsePrefix("10.201.255.0/24")

// newNetworkBackend returns a backend with networking and its address
// pool; the firewall table is deleted when the test ends unless it was
// there before.
func newNetworkBackend(t *testing.T) (*Backend, *network.Pool) {
	t.Helper()
	testenv.RequireRoot(t)
	pool, err := network.NewPool(testPoolPrefix)
	if err != nil {
		t.Fatal(err)
	}
	host := jailtest.FirewalledNetwork(t, filepath.Join(scratch, "run"), pool)
	return newTestBackend(t, func(c *Config) { c.Network = host }), pool
}

func TestNetwork(t *testing.T) {
	b, pool := newNetworkBackend(t)
	spec := testSpec(t, isolation.Resources{})
	inst := startSandbox(t, b, spec)
	gw, addr := inst.state.Gateway, inst.state.Address
	if !testPoolPrefix.Contains(gw) || addr != gw.Next() {
		t.Fatalf("lease in state: gateway %s, address %s; want a /30 of %s", gw, addr, testPoolPrefix)
	}
	host := network.VethName(spec.ID)

	t.Run("eth0 and default route", func(t *testing.T) {
		err := inst.ns.Do(func() error {
			l, err := netlink.LinkByName(network.PeerName)
			if err != nil {
				return err
			}
			addrs, err := netlink.AddrList(l, netlink.FAMILY_V4)
			if err != nil {
				return err
			}
			if len(addrs) != 1 || !addrs[0].IP.Equal(net.IP(addr.AsSlice())) {
				t.Errorf("%s addresses %v, want %s", network.PeerName, addrs, addr)
			}
			routes, err := netlink.RouteList(l, netlink.FAMILY_V4)
			if err != nil {
				return err
			}
			if !slices.ContainsFunc(routes, func(r netlink.Route) bool {
				return (r.Dst == nil || r.Dst.IP.IsUnspecified()) && r.Gw.Equal(net.IP(gw.AsSlice()))
			}) {
				t.Errorf("no default route via %s in %v", gw, routes)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
	t.Run("sandbox unreachable from the host", func(t *testing.T) {
		// The listener answers on the sandbox's address (reached from
		// inside its namespace), but the host opens no connection to it
		// over the veth: the firewall drops the SYN.
		sh(t, inst, "/usr/bin/probe listen 0.0.0.0:7003 from-sandbox >/dev/null 2>&1 &")
		target := netip.AddrPortFrom(addr, 7003).String()
		var c net.Conn
		var err error
		for range 100 {
			if c, err = inst.ns.Dial(context.Background(), "tcp", target); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("from inside the sandbox to %s: %v", target, err)
		}
		c.Close()
		var ne net.Error
		if c, err := net.DialTimeout("tcp", target, time.Second); !errors.As(err, &ne) || !ne.Timeout() {
			if c != nil {
				c.Close()
			}
			t.Errorf("host to %s: %v, want a timeout (dropped)", target, err)
		}
	})
	t.Run("envd on the loopback only", func(t *testing.T) {
		c, err := inst.Dial(context.Background(), isolation.EnvdPort)
		if err != nil {
			t.Fatalf("envd on 127.0.0.1: %v", err)
		}
		c.Close()
		if c, err := inst.ns.Dial(context.Background(), "tcp", netip.AddrPortFrom(addr, isolation.EnvdPort).String()); !errors.Is(err, unix.ECONNREFUSED) {
			if c != nil {
				c.Close()
			}
			t.Errorf("envd on the sandbox's address %s: %v, want refused", addr, err)
		}
	})
	t.Run("host unreachable from the sandbox", func(t *testing.T) {
		ln, err := net.Listen("tcp", net.JoinHostPort(gw.String(), "0"))
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		port := ln.Addr().(*net.TCPAddr).Port
		accepted := make(chan struct{}, 1)
		go func() {
			if c, err := ln.Accept(); err == nil {
				c.Close()
				accepted <- struct{}{}
			}
		}()
		// A dropped SYN leaves connect hanging; a refused or accepted one
		// ends it.
		r := run(t, inst, "root", "/bin/bash", "-c", "(echo > /dev/tcp/"+gw.String()+"/"+strconv.Itoa(port)+") 2>/dev/null & p=$!; sleep 2; "+
			"if kill -0 $p 2>/dev/null; then kill $p; echo blocked; else wait $p; echo exit=$?; fi")
		if out := r.stdout + r.stderr; strings.TrimSpace(out) != "blocked" {
			t.Errorf("connecting to the host's %s:%d from the sandbox: %q, want it dropped", gw, port, out)
		}
		select {
		case <-accepted:
			t.Error("the host listener accepted a connection from the sandbox")
		default:
		}
	})

	if err := inst.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	assertNoVeth(t, host)
	// The lease is free again.
	if err := pool.Restore(map[string]network.VethAddrs{"probe-lease": {Gateway: gw, Sandbox: addr}}); err != nil {
		t.Errorf("after Stop, the lease is still held: %v", err)
	}
	pool.Release("probe-lease")

	// Cleanup finds the veth by the id alone.
	spec2 := testSpec(t, isolation.Resources{})
	inst2 := startSandbox(t, b, spec2)
	for range 2 {
		if err := b.Cleanup(context.Background(), spec2.ID, nil); err != nil {
			t.Fatal(err)
		}
	}
	<-inst2.Done()
	assertNoVeth(t, network.VethName(spec2.ID))
	assertGone(t, b, spec2.ID)
}

// assertNoVeth checks that the host veth and its firewall chain are gone.
func assertNoVeth(t *testing.T, host string) {
	t.Helper()
	if _, err := netlink.LinkByName(host); !errors.As(err, new(netlink.LinkNotFoundError)) {
		t.Errorf("veth %s: %v, want it gone", host, err)
	}
	_, chains, err := network.FirewallChains()
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range chains {
		if strings.HasSuffix(ch, host) {
			t.Errorf("firewall chain %s left", ch)
		}
	}
}
