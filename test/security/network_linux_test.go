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
	link := h.link(sb)
	nb := h.link(neighbour)
	hostPort := h.hostPort
	// Positive controls: a TCP connection the sandbox may make, out through
	// the host (its rules allow the site's range) or on its own loopback.
	site := func(port int) control {
		return control{args: []string{"connect", net.JoinHostPort(siteIP.String(), strconv.Itoa(port))}, want: "ok connected", ok: is("ok connected")}
	}
	ownEnvd := control{args: []string{"connect", "127.0.0.1:" + strconv.Itoa(sandbox.EnvdPort)}, want: "ok connected", ok: is("ok connected")}
	p := hostPort
	ipv6Want := fmt.Sprintf("ok addrs=[] [::1]:%s=ECONNREFUSED [fe80::1%%eth0]:%s=ENETUNREACH [ff02::2%%eth0]:%s=ENETUNREACH", p, p, p)

	for _, u := range users {
		for _, c := range []struct {
			attack, expected string
			controls         []control
			args             []string
			contained        func(string) bool
		}{
			{"TCP to a host port on the gateway address", "timeout (dropped by the host firewall)",
				[]control{site(7)}, []string{"tcp", net.JoinHostPort(link.Gateway.String(), hostPort)}, is("timeout")},
			{"TCP to a host port on the host's uplink address", "timeout (dropped)",
				[]control{site(7)}, []string{"tcp", net.JoinHostPort(h.in.HostAddr.String(), hostPort)}, is("timeout")},
			{"TCP to the host port on 127.0.0.1", "ECONNREFUSED: the sandbox's own loopback",
				[]control{ownEnvd}, []string{"tcp", "127.0.0.1:" + hostPort}, is("ECONNREFUSED")},
			{"TCP to the neighbour sandbox's envd", "timeout (dropped)",
				[]control{site(7)}, []string{"tcp", net.JoinHostPort(nb.Address.String(), strconv.Itoa(sandbox.EnvdPort))}, is("timeout")},
			{"TCP to 169.254.169.254:8080 (metadata)", "timeout (dropped; the same port of the site connects)",
				[]control{site(8080)}, []string{"tcp", net.JoinHostPort(metadata.String(), "8080")}, is("timeout")},
			{"HTTP GET http://169.254.169.254/ (metadata)", "403 from the egress proxy, naming the rule",
				[]control{{args: []string{"get", "http://site.test/"}, want: "ok site=site.test …", ok: okPrefix}},
				[]string{"get", "http://169.254.169.254/"},
				func(s string) bool {
					return strings.HasPrefix(s, "status 403: agent-sandbox: egress to 169.254.169.254 denied (rule private:link-local")
				}},
			{"IPv6: own addresses; TCP to [::1], [fe80::1%eth0], [ff02::2%eth0]",
				"no IPv6 address; ::1 ECONNREFUSED (the sandbox's own); no IPv6 route out (ENETUNREACH)",
				[]control{ownEnvd}, []string{"ipv6", hostPort}, is(ipv6Want)},
		} {
			got, obs, ok := h.probed(sb, u, c.controls, c.args...)
			tb.add(t, outcome{attack: c.attack, as: u, expected: c.expected, observed: obs, contained: ok && c.contained(got)})
		}
	}

	// Spoofing: what arrives at the test Internet's spoofPort. The control
	// is a genuine datagram, which must arrive.
	rx := listenUDP(t, h)
	nonce := randomHex(4)
	dst := net.JoinHostPort(siteIP.String(), strconv.Itoa(spoofPort))
	genuine := func(u string) (bool, string) {
		payload := "genuine-" + u + "-" + nonce
		got := h.probe(sb, u, "udp", dst, payload)
		if !waitFor(rx, payload, 3*time.Second) {
			return false, fmt.Sprintf("POSITIVE CONTROL FAILED: a genuine datagram from %s never arrived (%s)", u, got)
		}
		return true, "control: a genuine one arrived"
	}
	rawWant, rawExpected := h.either("EPERM", "ok sent 3 forged datagrams"),
		h.either("EPERM (no CAP_NET_RAW over the sandbox's network)", "sent; dropped by the host (rp_filter strict)")
	for _, src := range []struct{ what, addr string }{
		{"the neighbour's address", nb.Address.String()},
		{"a public address", "203.0.113.7"},
		{"the test Internet's own address", siteIP.String()},
	} {
		ok, ctl := genuine("root")
		payload := "forged-" + src.addr + "-" + nonce
		got := h.probe(sb, "root", "spoof", src.addr, dst, payload)
		arrived := waitFor(rx, payload, 2*time.Second)
		tb.add(t, outcome{attack: "UDP with a forged source (" + src.what + ") to the test Internet", as: "root",
			expected: rawExpected + "; never arrives",
			observed: fmt.Sprintf("%s; arrived=%v; %s", got, arrived, ctl), contained: ok && got == rawWant && !arrived})
	}
	ok, ctl := genuine("user")
	got := h.probe(sb, "user", "spoof", "203.0.113.7", dst, "user-"+nonce)
	arrived := waitFor(rx, "user-"+nonce, 2*time.Second)
	tb.add(t, outcome{attack: "UDP with a forged source over a raw socket", as: "user", expected: "EPERM (no CAP_NET_RAW); never arrives",
		observed: fmt.Sprintf("%s; arrived=%v; %s", got, arrived, ctl), contained: ok && got == "EPERM" && !arrived})

	// ARP and NDP: claim the gateway's, the neighbour's and the test
	// Internet's addresses; the host must not take them for the attacker's
	// MAC. The control: the host does hold the attacker's own address at
	// that MAC, so the check below would see a poisoned entry.
	mac := strings.TrimPrefix(h.probe(sb, "root", "mac"), "ok ")
	ownEntry := func() (bool, string) {
		h.probe(sb, "root", "connect", net.JoinHostPort(siteIP.String(), "7")) // an exchange, for the host's entry
		if len(neighboursWith(t, netlink.FAMILY_V4, link.Address, mac)) == 0 {
			return false, fmt.Sprintf("POSITIVE CONTROL FAILED: no host neighbour entry %s at the sandbox's MAC %q", link.Address, mac)
		}
		return true, fmt.Sprintf("control: the host maps %s to %s", link.Address, mac)
	}
	const packetRefused = "EAFNOSUPPORT (AF_PACKET refused by the jail's seccomp filter)"
	farEnd := h.in.HostAddr.Next()
	for _, target := range []struct {
		what string
		a    netip.Addr
	}{
		{"the gateway", link.Gateway}, {"the neighbour sandbox", nb.Address}, {"the test Internet's router", farEnd},
	} {
		ok, ctl := ownEntry()
		got := h.probe(sb, "root", "arp-spoof", target.a.String())
		time.Sleep(200 * time.Millisecond)
		bad := neighboursWith(t, netlink.FAMILY_V4, target.a, mac)
		tb.add(t, outcome{attack: "ARP spoof: claim " + target.what + " (" + target.a.String() + ")", as: "root",
			expected: packetRefused + "; no host neighbour entry maps it to the attacker",
			observed: fmt.Sprintf("%s; poisoned entries: %v; %s", got, bad, ctl), contained: ok && got == "EAFNOSUPPORT" && len(bad) == 0})
	}
	got = h.probe(sb, "user", "arp-spoof", link.Gateway.String())
	ok, ctl = ownEntry()
	tb.add(t, outcome{attack: "ARP spoof: claim the gateway", as: "user", expected: packetRefused,
		observed: got + "; " + ctl, contained: ok && got == "EAFNOSUPPORT"})

	for _, target := range []netip.Addr{netip.MustParseAddr("fe80::1"), netip.MustParseAddr("fe80::2")} {
		ok, ctl := ownEntry()
		got := h.probe(sb, "root", "ndp-spoof", target.String())
		time.Sleep(200 * time.Millisecond)
		bad := neighboursWith(t, netlink.FAMILY_V6, netip.Addr{}, mac)
		tb.add(t, outcome{attack: "NDP spoof: unsolicited NA for " + target.String(), as: "root",
			expected: packetRefused + "; no host neighbour entry for the attacker",
			observed: fmt.Sprintf("%s; entries with its MAC: %v; %s", got, bad, ctl), contained: ok && got == "EAFNOSUPPORT" && len(bad) == 0})
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
