package api

import (
	"encoding/json"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agent-sandbox/agent-sandbox/internal/egress"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
)

func networkUpdates(want ...sandbox.NetworkUpdate) func(*testing.T, *fakeSandboxes) {
	return func(t *testing.T, f *fakeSandboxes) {
		t.Helper()
		if d := cmp.Diff(want, f.networkUpdates); d != "" {
			t.Errorf("network updates (-want +got):\n%s", d)
		}
	}
}

func TestUpdateNetwork(t *testing.T) {
	off := false
	runCases(t, fakeWith(running("isb1")), []apiCase{
		{name: "replaces lists and internet access", method: "PUT", target: "/sandboxes/isb1/network",
			body:   `{"allowOut":["example.com","1.2.3.0/24"],"denyOut":["*.evil.test"],"allow_internet_access":false}`,
			status: 204, wantEmpty: true,
			check: networkUpdates(sandbox.NetworkUpdate{
				AllowOut: []string{"example.com", "1.2.3.0/24"}, DenyOut: []string{"*.evil.test"}, AllowInternetAccess: &off,
			})},
		{name: "empty body clears", method: "PUT", target: "/sandboxes/isb1/network",
			status: 204, check: networkUpdates(sandbox.NetworkUpdate{})},
		{name: "empty rules and proxy accepted", method: "PUT", target: "/sandboxes/isb1/network",
			body: `{"rules":{},"egressProxy":null}`, status: 204,
			check: networkUpdates(sandbox.NetworkUpdate{Rules: json.RawMessage(`{}`)})},
		{name: "header rules passed on", method: "PUT", target: "/sandboxes/isb1/network",
			body:   `{"allowOut":["example.com"],"rules":{"example.com":[{"transform":{"headers":{"a":"b"}}}]}}`,
			status: 204, wantEmpty: true,
			check: networkUpdates(sandbox.NetworkUpdate{AllowOut: []string{"example.com"},
				Rules: json.RawMessage(`{"example.com":[{"transform":{"headers":{"a":"b"}}}]}`)})},
		{name: "egress proxy refused", method: "PUT", target: "/sandboxes/isb1/network",
			body: `{"egressProxy":{"address":"proxy:1080"}}`, status: 400, check: networkUpdates()},
		{name: "wrong type", method: "PUT", target: "/sandboxes/isb1/network", body: `{"allowOut":"x"}`,
			status: 400, wantJSON: `{"code":400,"message":"malformed JSON body: field allowOut: expected an array, got string"}`},
		{name: "unknown sandbox", method: "PUT", target: "/sandboxes/nope/network", body: `{}`,
			status: 404, wantJSON: notFoundBody},
		{name: "needs a key", method: "PUT", target: "/sandboxes/isb1/network", body: `{}`,
			header: map[string]string{"X-API-Key": ""}, status: 401},
	})
}

func TestEgressAudit(t *testing.T) {
	at := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	fake := func() *fakeSandboxes {
		f := newFake(running("isb1"))
		f.events = []egress.Event{
			{Seq: 1, Time: at, Kind: egress.EventDNS, Name: "pypi.org", Type: "A",
				Addrs: []netip.Addr{netip.MustParseAddr("198.18.0.10")}, Allowed: true, Rule: "ceiling:pypi.org"},
			{Seq: 2, Time: at, Kind: "firewall", Proto: "udp", Addrs: []netip.Addr{netip.MustParseAddr("198.18.0.2")},
				Port: 9999, Rule: "firewall:default"},
		}
		return f
	}
	runCases(t, fake, []apiCase{
		{name: "all", method: "GET", target: "/sandboxes/isb1/network/audit", status: 200, wantJSON: `{"events":[
			{"seq":1,"time":"2026-12-02T10:00:00Z","kind":"dns","name":"pypi.org","type":"A","addrs":["198.18.0.10"],"allowed":true,"rule":"ceiling:pypi.org"},
			{"seq":2,"time":"2026-12-02T10:00:00Z","kind":"firewall","proto":"udp","addrs":["198.18.0.2"],"port":9999,"allowed":false,"rule":"firewall:default"}
			],"next":2}`},
		{name: "after and limit", method: "GET", target: "/sandboxes/isb1/network/audit?after=1&limit=1", status: 200,
			wantJSON: `{"events":[{"seq":2,"time":"2026-12-02T10:00:00Z","kind":"firewall","proto":"udp","addrs":["198.18.0.2"],"port":9999,"allowed":false,"rule":"firewall:default"}],"next":2}`},
		{name: "nothing new", method: "GET", target: "/sandboxes/isb1/network/audit?after=2", status: 200,
			wantJSON: `{"events":[],"next":2}`},
		{name: "bad after", method: "GET", target: "/sandboxes/isb1/network/audit?after=-1", status: 400,
			wantJSON: `{"code":400,"message":"after must be a non-negative integer, got \"-1\""}`},
		{name: "bad limit", method: "GET", target: "/sandboxes/isb1/network/audit?limit=0", status: 400},
		{name: "unknown sandbox", method: "GET", target: "/sandboxes/nope/network/audit", status: 404, wantJSON: notFoundBody},
	})
}
