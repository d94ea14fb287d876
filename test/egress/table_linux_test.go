package egress

import (
	"context"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/egress"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox/sandboxtest"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
)

// TestEgress is the network issue's acceptance table: real sandboxes of
// each backend behind the host firewall, DNS filter and proxy, against a
// test Internet. The table is the same for both: what a sandbox reaches
// is decided on the host, outside it.
func TestEgress(t *testing.T) {
	for _, backend := range sandboxtest.Backends {
		t.Run(backend, func(t *testing.T) { testEgress(t, newHarness(t, backend)) })
	}
}

func testEgress(t *testing.T, h *harness) {

	// Default policy: the operator's allowlist, no rules of the sandbox's own.
	def := h.create("", nil)
	neighbour := h.create("", nil)
	t.Run("default policy", func(t *testing.T) {
		h.t = t
		if got := h.probe(neighbour, "dns", "allowed.test"); !strings.HasPrefix(got, "ok") {
			t.Fatalf("the neighbour cannot resolve an allowed name: %s", got)
		}
		h.check(def, []expect{
			{name: "allowed name resolves", args: []string{"dns", "allowed.test"}, want: "ok " + allowedIP.String(),
				audit: dnsEvent("allowed.test", true)},
			{name: "allowed name over HTTP", args: []string{"get", "http://allowed.test/"}, want: "ok site=allowed.test",
				audit: proxyEvent("allowed.test", allowedIP, true)},
			{name: "allowed name over HTTPS", args: []string{"get", "https://allowed.test/"}, want: "ok site=allowed.test",
				audit: func(e egress.Event) bool { return proxyEvent("allowed.test", allowedIP, true)(e) && e.Port == 443 }},
			{name: "name not on the list fails at DNS", args: []string{"dns", "other.test"}, want: "fail",
				audit: dnsEvent("other.test", false)},
			{name: "its address over HTTP (Host other.test)", args: []string{"get", "http://other.test/", otherIP.String()},
				want: "fail status 403", audit: proxyEvent("other.test", netip.Addr{}, false)},
			{name: "its address over HTTPS (SNI other.test)", args: []string{"get", "https://other.test/", otherIP.String()},
				want: "fail", audit: func(e egress.Event) bool { return proxyEvent("other.test", netip.Addr{}, false)(e) && e.Port == 443 }},
			{name: "its address by IP over HTTP", args: []string{"get", "http://" + otherIP.String() + "/"},
				want: "fail status 403", audit: func(e egress.Event) bool {
					return e.Kind == egress.EventProxy && !e.Allowed && slices.Contains(e.Addrs, otherIP)
				}},
			{name: "its address by IP, another port", args: []string{"tcp", ap(otherIP, 7)}, want: "fail",
				audit: dropEvent("tcp", otherIP, "default")},
			{name: "wildcard matches a subdomain", args: []string{"get", "http://a.wild.test/"}, want: "ok site=a.wild.test",
				audit: dnsEvent("a.wild.test", true)},
			{name: "wildcard does not match the bare domain", args: []string{"dns", "wild.test"}, want: "fail",
				audit: dnsEvent("wild.test", false)},
			{name: "allowed name resolving to a private address", args: []string{"dns", "rebind.test"}, want: "fail",
				audit: answerRemoved("rebind.test", privateIP)},
			{name: "... and through the proxy", args: []string{"get", "http://rebind.test/", allowedIP.String()}, want: "fail status 403",
				audit: proxyEvent("rebind.test", netip.Addr{}, false)},
			{name: "allowed name resolving to a host address", args: []string{"dns", "hostaddr.test"}, want: "fail",
				audit: answerRemoved("hostaddr.test", hostEnd)},
			{name: "UDP out", args: []string{"udp", ap(allowedIP, 7)}, want: "fail",
				audit: dropEvent("udp", allowedIP, "default")},
			{name: "DNS to another server is answered by the filter", args: []string{"dnsat", ap(allowedIP, 53), "other.test"},
				want: "fail"},
			icmpOut(h),
			{name: "the host's API port", args: []string{"tcp", hostEnd.String() + ":" + h.hostPort}, want: "fail",
				audit: dropEvent("tcp", hostEnd, "host")},
			{name: "the host's API port on the gateway", args: []string{"tcp", gatewayOf(h, def) + ":" + h.hostPort}, want: "fail",
				audit: func(e egress.Event) bool { return e.Kind == egress.EventFirewall && e.Rule == "firewall:host" }},
			{name: "another sandbox", args: []string{"tcp", addressOf(h, neighbour) + ":" + strconv.Itoa(sandbox.EnvdPort)}, want: "fail",
				audit: func(e egress.Event) bool { return e.Kind == egress.EventFirewall && e.Rule == "firewall:sandbox" }},
			{name: "the metadata address", args: []string{"tcp", ap(metadata, 8080)}, want: "fail",
				audit: dropEvent("tcp", metadata, "blocked")},
			{name: "the metadata address over HTTP", args: []string{"get", "http://169.254.169.254/"}, want: "fail status 403",
				audit: func(e egress.Event) bool {
					return e.Kind == egress.EventProxy && !e.Allowed && slices.Contains(e.Addrs, metadata)
				}},
		})
		if q := h.in.Queries(); slices.Contains(q, "other.test") || slices.Contains(q, "wild.test") {
			t.Errorf("denied names reached the upstream DNS: %v", q)
		}
	})

	t.Run("per-sandbox rules", func(t *testing.T) {
		h.t = t
		sb := h.create(`{"allowOut":["extra.test","*.wild.test","198.18.2.0/24"],"denyOut":["a.wild.test","allowed.test"]}`, nil)
		h.check(sb, []expect{
			{name: "allowOut widens to a domain", args: []string{"get", "https://extra.test/"}, want: "ok site=extra.test",
				audit: proxyEvent("extra.test", extraIP, true)},
			{name: "allowOut beats denyOut", args: []string{"get", "http://a.wild.test/"}, want: "ok site=a.wild.test",
				audit: func(e egress.Event) bool { return dnsEvent("a.wild.test", true)(e) && e.Rule == "allowOut:*.wild.test" }},
			{name: "denyOut denies a name no allow entry names", args: []string{"dns", "allowed.test"}, want: "fail",
				audit: func(e egress.Event) bool {
					return dnsEvent("allowed.test", false)(e) && e.Rule == "denyOut:allowed.test"
				}},
			{name: "... through the proxy too", args: []string{"get", "http://allowed.test/", allowedIP.String()}, want: "fail status 403",
				audit: proxyEvent("allowed.test", netip.Addr{}, false)},
			{name: "the rest of the wildcard", args: []string{"get", "http://b.wild.test/"}, want: "ok site=b.wild.test"},
			{name: "a CIDR rule opens other ports", args: []string{"tcp", ap(directIP, 7)}, want: "ok"},
			{name: "... and UDP", args: []string{"udp", ap(directIP, 7)}, want: "ok"},
			{name: "outside the CIDR stays closed", args: []string{"tcp", ap(otherIP, 7)}, want: "fail",
				audit: dropEvent("tcp", otherIP, "default")},
		})
	})

	// E2B documents allowOut [host] with denyOut [ALL_TRAFFIC] as "only
	// this host": allowOut wins over denyOut.
	t.Run("only this host", func(t *testing.T) {
		h.t = t
		sb := h.create(`{"allowOut":["extra.test"],"denyOut":["0.0.0.0/0"]}`, nil)
		h.check(sb, []expect{
			{name: "the name resolves", args: []string{"dns", "extra.test"}, want: "ok " + extraIP.String(),
				audit: func(e egress.Event) bool { return dnsEvent("extra.test", true)(e) && e.Rule == "allowOut:extra.test" }},
			{name: "over HTTP", args: []string{"get", "http://extra.test/"}, want: "ok site=extra.test",
				audit: func(e egress.Event) bool { return proxyEvent("extra.test", extraIP, true)(e) && e.Port == 80 }},
			{name: "over HTTPS", args: []string{"get", "https://extra.test/"}, want: "ok site=extra.test",
				audit: func(e egress.Event) bool { return proxyEvent("extra.test", extraIP, true)(e) && e.Port == 443 }},
			{name: "a name the ceiling allows gets no address", args: []string{"dns", "allowed.test"}, want: "fail",
				audit: func(e egress.Event) bool {
					return answerRemoved("allowed.test", allowedIP)(e) && e.Rule == "denyOut:0.0.0.0/0"
				}},
			{name: "... nor over HTTP at its address", args: []string{"get", "http://allowed.test/", allowedIP.String()}, want: "fail status 403",
				audit: func(e egress.Event) bool {
					return proxyEvent("allowed.test", allowedIP, false)(e) && e.Rule == "denyOut:0.0.0.0/0"
				}},
			{name: "... nor over HTTPS", args: []string{"get", "https://allowed.test/", allowedIP.String()}, want: "fail",
				audit: func(e egress.Event) bool { return proxyEvent("allowed.test", allowedIP, false)(e) && e.Port == 443 }},
			{name: "another name", args: []string{"dns", "other.test"}, want: "fail", audit: dnsEvent("other.test", false)},
			{name: "another address over HTTP", args: []string{"get", "http://" + otherIP.String() + "/"}, want: "fail status 403"},
			{name: "the host's address on another port", args: []string{"tcp", ap(extraIP, 7)}, want: "fail",
				audit: dropEvent("tcp", extraIP, "denied")},
			{name: "UDP", args: []string{"udp", ap(directIP, 7)}, want: "fail", audit: dropEvent("udp", directIP, "denied")},
		})
	})

	t.Run("header rules", func(t *testing.T) { h.t = t; testHeaderRules(t, h) })

	t.Run("allow_internet_access false", func(t *testing.T) {
		h.t = t
		off := false
		sb := h.create("", &off)
		h.check(sb, []expect{
			{name: "allowlisted name fails at DNS", args: []string{"dns", "allowed.test"}, want: "fail",
				audit: func(e egress.Event) bool {
					return dnsEvent("allowed.test", false)(e) && e.Rule == egress.RuleInternetOff
				}},
			{name: "and through the proxy", args: []string{"get", "http://allowed.test/", allowedIP.String()}, want: "fail status 403",
				audit: proxyEvent("allowed.test", netip.Addr{}, false)},
			{name: "and by address", args: []string{"tcp", ap(allowedIP, 7)}, want: "fail",
				audit: dropEvent("tcp", allowedIP, "default")},
		})
	})

	t.Run("live PUT network", func(t *testing.T) {
		h.t = t
		ctx := context.Background()
		sb := h.create("", nil)
		h.check(sb, []expect{{name: "before", args: []string{"get", "http://allowed.test/"}, want: "ok site=allowed.test"}})
		if err := h.m.UpdateNetwork(ctx, sb.ID, sandbox.NetworkUpdate{DenyOut: []string{"allowed.test"}, AllowOut: []string{"198.18.2.0/24"}}); err != nil {
			t.Fatal(err)
		}
		h.check(sb, []expect{
			{name: "denied after the update", args: []string{"dns", "allowed.test"}, want: "fail",
				audit: func(e egress.Event) bool {
					return dnsEvent("allowed.test", false)(e) && e.Rule == "denyOut:allowed.test"
				}},
			{name: "proxy too", args: []string{"get", "http://allowed.test/", allowedIP.String()}, want: "fail status 403"},
			{name: "new CIDR rule", args: []string{"tcp", ap(directIP, 7)}, want: "ok"},
		})
		if err := h.m.UpdateNetwork(ctx, sb.ID, sandbox.NetworkUpdate{}); err != nil {
			t.Fatal(err)
		}
		h.check(sb, []expect{
			{name: "allowed again after clearing", args: []string{"get", "http://allowed.test/"}, want: "ok site=allowed.test"},
			{name: "CIDR rule gone", args: []string{"tcp", ap(directIP, 7)}, want: "fail"},
		})
	})

	t.Run("bandwidth", func(t *testing.T) { h.t = t; testBandwidth(t, h) })
	// The figures compare the proxy with the direct path on the host's
	// own stack; in an emulated VM they would time the emulator, and
	// cost half a minute of CI.
	if h.s.Backend == sandboxtest.Jail {
		t.Run("figures", func(t *testing.T) { h.t = t; testFigures(t, h) })
	}
}

// icmpOut is the ICMP row: the firewall drops the echo; under gVisor,
// whose host networking has no ICMP sockets, it never leaves the sandbox.
func icmpOut(h *harness) expect {
	if h.s.Backend == sandboxtest.Gvisor {
		return expect{name: "ICMP out (no ICMP sockets in gVisor)", args: []string{"ping", allowedIP.String()},
			want: "fail listen ip4:icmp 0.0.0.0: socket: address family not supported by protocol"}
	}
	return expect{name: "ICMP out", args: []string{"ping", allowedIP.String()}, want: "fail",
		audit: dropEvent("icmp", allowedIP, "default")}
}

// gatewayOf and addressOf are a sandbox's link addresses, from its
// backend's state in its record.
func gatewayOf(h *harness, sb store.Sandbox) string { gw, _ := h.link(sb); return gw.String() }
func addressOf(h *harness, sb store.Sandbox) string { _, a := h.link(sb); return a.String() }

func (h *harness) link(sb store.Sandbox) (gateway, address netip.Addr) {
	h.t.Helper()
	gateway, address, err := h.s.Link(sb)
	if err != nil {
		h.t.Fatal(err)
	}
	return gateway, address
}
