package security

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
)

// spoofPort is where the test Internet listens for the spoofing cases.
const spoofPort = 9999

func testNetwork(t *testing.T, h *harness, tb *table, sb, neighbour store.Sandbox) {
	link := h.backendState(sb)
	nb := h.backendState(neighbour)
	hostPort := h.hostPort
	dropped := func(s string) bool { return !strings.HasPrefix(s, "ok") }

	for _, u := range users {
		for _, c := range []struct {
			attack, expected string
			args             []string
			contained        func(string) bool
		}{
			{"TCP to a host port on the gateway address", "dropped by the host firewall (timeout)",
				[]string{"tcp", net.JoinHostPort(link.Gateway.String(), hostPort)}, dropped},
			{"TCP to a host port on the host's uplink address", "dropped (timeout)",
				[]string{"tcp", net.JoinHostPort(h.in.HostAddr.String(), hostPort)}, dropped},
			{"TCP to the host port on 127.0.0.1", "ECONNREFUSED: the sandbox's own loopback",
				[]string{"tcp", "127.0.0.1:" + hostPort}, func(s string) bool { return s == "ECONNREFUSED" }},
			{"TCP to the neighbour sandbox's envd", "dropped (timeout)",
				[]string{"tcp", net.JoinHostPort(nb.Address.String(), strconv.Itoa(sandbox.EnvdPort))}, dropped},
			{"TCP to 169.254.169.254:8080 (metadata)", "dropped (timeout)",
				[]string{"tcp", net.JoinHostPort(metadata.String(), "8080")}, dropped},
			{"HTTP GET http://169.254.169.254/ (metadata)", "403 from the egress proxy",
				[]string{"get", "http://169.254.169.254/"}, func(s string) bool { return strings.Contains(s, "status 403") }},
			{"IPv6: own addresses; TCP to [::1], [fe80::1%eth0], [ff02::2%eth0]", "no IPv6 address; ::1 is the sandbox's own; no IPv6 route out",
				[]string{"ipv6", hostPort}, func(s string) bool {
					return strings.HasPrefix(s, "ok addrs=[] ") && !strings.Contains(s, "connected")
				}},
		} {
			got := h.probe(sb, u, c.args...)
			tb.add(t, outcome{attack: c.attack, as: u, expected: c.expected, observed: got, contained: c.contained(got)})
		}
	}

	// Spoofing: what arrives at the test Internet's spoofPort.
	rx := listenUDP(t, h)
	nonce := randomHex(4)
	dst := net.JoinHostPort(siteIP.String(), strconv.Itoa(spoofPort))
	control := h.probe(sb, "root", "udp", dst, "genuine-"+nonce)
	if !waitFor(rx, "genuine-"+nonce, 3*time.Second) {
		t.Fatalf("control: a genuine datagram to %s never arrived (%s); the spoofing cases would prove nothing", dst, control)
	}
	for _, src := range []struct{ what, addr string }{
		{"the neighbour's address", nb.Address.String()},
		{"a public address", "203.0.113.7"},
		{"the test Internet's own address", siteIP.String()},
	} {
		payload := "forged-" + src.addr + "-" + nonce
		got := h.probe(sb, "root", "spoof", src.addr, dst, payload)
		arrived := waitFor(rx, payload, 2*time.Second)
		tb.add(t, outcome{attack: "UDP with a forged source (" + src.what + ") to the test Internet", as: "root",
			expected: "sent, but dropped by the host (rp_filter strict); never arrives",
			observed: fmt.Sprintf("%s; arrived=%v (a genuine one did)", got, arrived), contained: !arrived})
	}
	got := h.probe(sb, "user", "spoof", "203.0.113.7", dst, "user-"+nonce)
	tb.add(t, outcome{attack: "UDP with a forged source over a raw socket", as: "user", expected: "EPERM (no CAP_NET_RAW)",
		observed: got, contained: got == "EPERM"})

	// ARP: claim the gateway's, the neighbour's and the test Internet's
	// link addresses; the host must not take them for the attacker's MAC.
	farEnd := h.in.HostAddr.Next()
	for _, target := range []struct {
		what string
		a    netip.Addr
	}{
		{"the gateway", link.Gateway}, {"the neighbour sandbox", nb.Address}, {"the test Internet's router", farEnd},
	} {
		got := h.probe(sb, "root", "arp-spoof", target.a.String())
		mac, _ := strings.CutPrefix(got, "ok sent mac=")
		time.Sleep(200 * time.Millisecond)
		bad := neighboursWith(t, netlink.FAMILY_V4, target.a, mac)
		tb.add(t, outcome{attack: "ARP spoof: claim " + target.what + " (" + target.a.String() + ")", as: "root",
			expected: h.either("EPERM (no CAP_NET_RAW on the host)", "sent; ") + "host neighbour tables never map it to the attacker",
			observed: fmt.Sprintf("%s; poisoned entries: %v", got, bad), contained: h.rawSent(got) && len(bad) == 0})
	}
	got = h.probe(sb, "user", "arp-spoof", link.Gateway.String())
	tb.add(t, outcome{attack: "ARP spoof: claim the gateway", as: "user", expected: "EPERM (no CAP_NET_RAW)",
		observed: got, contained: got == "EPERM"})

	for _, target := range []netip.Addr{netip.MustParseAddr("fe80::1"), netip.MustParseAddr("fe80::2")} {
		got := h.probe(sb, "root", "ndp-spoof", target.String())
		mac, _ := strings.CutPrefix(got, "ok sent mac=")
		time.Sleep(200 * time.Millisecond)
		bad := neighboursWith(t, netlink.FAMILY_V6, netip.Addr{}, mac)
		tb.add(t, outcome{attack: "NDP spoof: unsolicited NA for " + target.String(), as: "root",
			expected: h.either("EPERM (no CAP_NET_RAW on the host)", "ignored (IPv6 off on the host end)") + "; no host neighbour entry for the attacker",
			observed: fmt.Sprintf("%s; entries with its MAC: %v", got, bad), contained: h.rawSent(got) && len(bad) == 0})
	}
	// The neighbour is still reachable from the host after all that.
	if code, err := h.health(neighbour); err != nil || code/100 != 2 {
		t.Errorf("the neighbour's envd after the spoofing: %d %v", code, err)
	}
}

// udpRx records what the test Internet received on spoofPort.
type udpRx struct {
	mu   sync.Mutex
	got  []string // guarded by mu: payload and source address
	cond chan struct{}
}

func listenUDP(t *testing.T, h *harness) *udpRx {
	var pc net.PacketConn
	err := h.in.NS.Do(func() error {
		var err error
		pc, err = net.ListenPacket("udp4", net.JoinHostPort(siteIP.String(), strconv.Itoa(spoofPort)))
		return err
	})
	if err != nil {
		t.Fatalf("listening in the test Internet: %v", err)
	}
	t.Cleanup(func() { pc.Close() })
	rx := &udpRx{cond: make(chan struct{}, 1)}
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			rx.mu.Lock()
			rx.got = append(rx.got, string(buf[:n])+" from "+from.String())
			rx.mu.Unlock()
			select {
			case rx.cond <- struct{}{}:
			default:
			}
		}
	}()
	return rx
}

// waitFor reports whether a datagram holding payload arrives within d.
func waitFor(rx *udpRx, payload string, d time.Duration) bool {
	deadline := time.After(d)
	for {
		rx.mu.Lock()
		found := slices.ContainsFunc(rx.got, func(s string) bool { return strings.HasPrefix(s, payload+" ") })
		rx.mu.Unlock()
		if found {
			return true
		}
		select {
		case <-rx.cond:
		case <-deadline:
			return false
		}
	}
}

// neighboursWith lists the host's neighbour entries of family that map a
// (any address when a is zero) to mac.
func neighboursWith(t *testing.T, family int, a netip.Addr, mac string) []string {
	if mac == "" {
		return nil
	}
	ns, err := netlink.NeighList(0, family)
	if err != nil {
		t.Fatalf("listing neighbours: %v", err)
	}
	var bad []string
	for _, n := range ns {
		ip, _ := netip.AddrFromSlice(n.IP)
		if n.HardwareAddr.String() == mac && (!a.IsValid() || ip.Unmap() == a) {
			bad = append(bad, fmt.Sprintf("%s lladdr %s dev %d", ip, mac, n.LinkIndex))
		}
	}
	return bad
}
