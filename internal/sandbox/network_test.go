package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agent-sandbox/agent-sandbox/internal/egress"
	"github.com/agent-sandbox/agent-sandbox/internal/network"
)

// fakeNetwork records what the manager asks of the gateway.
type fakeNetwork struct {
	mu        sync.Mutex
	attached  map[string]attachment
	updates   map[string][]egress.Rules
	attachErr error
}

type attachment struct {
	link  network.Link
	rules egress.Rules
	bw    network.Bandwidth
}

func newFakeNetwork() *fakeNetwork {
	return &fakeNetwork{attached: map[string]attachment{}, updates: map[string][]egress.Rules{}}
}

func (n *fakeNetwork) Attach(_ context.Context, id string, link network.Link, rules egress.Rules, bw network.Bandwidth) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.attachErr != nil {
		return n.attachErr
	}
	n.attached[id] = attachment{link, rules, bw}
	return nil
}

func (n *fakeNetwork) Update(_ context.Context, id string, rules egress.Rules) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.attached[id]; !ok {
		return fmt.Errorf("sandbox %s: not attached", id)
	}
	n.updates[id] = append(n.updates[id], rules)
	return nil
}

func (n *fakeNetwork) Detach(id string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.attached, id)
}

func (n *fakeNetwork) Events(id string, _ uint64, _ int) ([]egress.Event, uint64, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.attached[id]; !ok {
		return nil, 0, fmt.Errorf("sandbox %s: not attached", id)
	}
	return []egress.Event{{Seq: 1, Kind: egress.EventDNS, Name: id}}, 1, nil
}

func (n *fakeNetwork) get(id string) (attachment, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	a, ok := n.attached[id]
	return a, ok
}

func newNetworkEnv(t *testing.T) (*env, *fakeNetwork) {
	net := newFakeNetwork()
	e := newEnv(t, func(c *Config) {
		c.Network = net
		c.MaxBandwidth = network.Bandwidth{Down: 100e6, Up: 100e6}
	})
	e.fake.GiveLinks()
	return e, net
}

func TestNetworkAttachAndDetach(t *testing.T) {
	e, net := newNetworkEnv(t)
	off := false
	sb := e.create(t, CreateRequest{
		Timeout: time.Minute, AllowInternetAccess: &off,
		Network: []byte(`{"allowOut":["a.test"],"denyOut":["10.0.0.0/8"],"bandwidth":{"downMbit":10},"allowPublicTraffic":true}`),
	})
	a, ok := net.get(sb.ID)
	if !ok {
		t.Fatal("sandbox not attached to the network")
	}
	if !a.link.Gateway.IsValid() || a.link.HostIf == "" {
		t.Errorf("attached with link %+v", a.link)
	}
	if !a.rules.InternetOff || !cmp.Equal(a.rules.AllowOut(), []string{"a.test"}) || !cmp.Equal(a.rules.DenyOut(), []string{"10.0.0.0/8"}) {
		t.Errorf("attached with rules off=%v allow=%v deny=%v", a.rules.InternetOff, a.rules.AllowOut(), a.rules.DenyOut())
	}
	if a.bw != (network.Bandwidth{Down: 10e6, Up: 100e6}) {
		t.Errorf("bandwidth %+v, want down 10 Mbit/s and the server's 100 up", a.bw)
	}
	ev, _, err := e.m.EgressEvents(sb.ID, 0, 10)
	if err != nil || len(ev) != 1 || ev[0].Name != sb.ID {
		t.Errorf("EgressEvents = %v, %v", ev, err)
	}

	// A restarted manager attaches the adopted sandbox again.
	e.m.Close()
	net.Detach(sb.ID)
	e.m = e.start(t)
	if _, ok := net.get(sb.ID); !ok {
		t.Error("adopted sandbox not attached again")
	}

	if err := e.m.Kill(context.Background(), sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, ok := net.get(sb.ID); ok {
		t.Error("killed sandbox still attached")
	}
}

func TestNetworkAttachFails(t *testing.T) {
	e, net := newNetworkEnv(t)
	net.attachErr = errors.New("port in use")
	_, err := e.m.Create(context.Background(), CreateRequest{Template: "base", Timeout: time.Minute})
	if err == nil {
		t.Fatal("Create succeeded without a network gateway")
	}
	if running := e.fake.Running(); len(running) != 0 {
		t.Errorf("sandboxes left running: %v", running)
	}
}

func TestNetworkCreateInvalid(t *testing.T) {
	e, _ := newNetworkEnv(t)
	for _, tc := range []struct{ network, msg string }{
		{`{"allowOut":["not a rule!"]}`, `network.allowOut[0] "not a rule!": `},
		{`{"rules":{"a.test":[{"transform":{"headers":{"x":"y"}}}]}}`, "network.rules (egress header injection) is not supported by this server"},
		{`{"egressProxy":{"address":"p:1080"}}`, "network.egressProxy (a SOCKS5 egress proxy) is not supported by this server"},
		{`{"bandwidth":{"downMbit":1000}}`, "network.bandwidth.downMbit cannot be greater than 100 (the server's limit)"},
		{`{"bandwidth":{"upMbit":-1}}`, "network.bandwidth.upMbit must be at least 0.1"},
		{`{"bandwidth":"fast"}`, "network.bandwidth: "},
	} {
		_, err := e.m.Create(context.Background(), CreateRequest{Template: "base", Timeout: time.Minute, Network: []byte(tc.network)})
		if !errors.Is(err, ErrInvalid) || len(err.Error()) < len(tc.msg) || err.Error()[:len(tc.msg)] != tc.msg {
			t.Errorf("network %s: Create = %v, want ErrInvalid starting %q", tc.network, err, tc.msg)
		}
	}
	if running := e.fake.Running(); len(running) != 0 {
		t.Errorf("sandboxes started for invalid requests: %v", running)
	}
}

func TestUpdateNetwork(t *testing.T) {
	e, net := newNetworkEnv(t)
	ctx := context.Background()
	sb := e.create(t, CreateRequest{Timeout: time.Minute,
		Network: []byte(`{"allowOut":["a.test"],"maskRequestHost":"x:${PORT}","allowPublicTraffic":false}`)})

	off := false
	if err := e.m.UpdateNetwork(ctx, sb.ID, NetworkUpdate{DenyOut: []string{"b.test"}, AllowInternetAccess: &off}); err != nil {
		t.Fatal(err)
	}
	ups := net.updates[sb.ID]
	if len(ups) != 1 || !ups[0].InternetOff || ups[0].AllowOut() != nil || !cmp.Equal(ups[0].DenyOut(), []string{"b.test"}) {
		t.Errorf("gateway updates %+v", ups)
	}
	rec, err := e.store.GetSandbox(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	var stored map[string]any
	if err := json.Unmarshal(rec.Network, &stored); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"denyOut": []any{"b.test"}, "maskRequestHost": "x:${PORT}", "allowPublicTraffic": false}
	if d := cmp.Diff(want, stored); d != "" {
		t.Errorf("stored network config (-want +got):\n%s", d)
	}
	if rec.AllowInternetAccess == nil || *rec.AllowInternetAccess {
		t.Errorf("stored allow_internet_access %v", rec.AllowInternetAccess)
	}

	if err := e.m.UpdateNetwork(ctx, sb.ID, NetworkUpdate{AllowOut: []string{"bad entry!"}}); !errors.Is(err, ErrInvalid) {
		t.Errorf("bad rule: %v, want ErrInvalid", err)
	}
	if err := e.m.UpdateNetwork(ctx, "nope", NetworkUpdate{}); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown sandbox: %v, want ErrNotFound", err)
	}
	if len(net.updates[sb.ID]) != 1 {
		t.Errorf("a refused update reached the gateway: %+v", net.updates[sb.ID])
	}
}

func TestEgressEventsWithoutNetwork(t *testing.T) {
	e := newEnv(t, nil)
	sb := e.create(t, CreateRequest{Timeout: time.Minute})
	if _, _, err := e.m.EgressEvents(sb.ID, 0, 10); !errors.Is(err, ErrNoAudit) {
		t.Errorf("EgressEvents = %v, want ErrNoAudit", err)
	}
}

func TestTemplateBandwidth(t *testing.T) {
	e, net := newNetworkEnv(t)
	tmpls := fakeTemplates{}
	for name, tm := range testTemplates {
		c := *tm
		tmpls[name] = &c
	}
	tmpls["base"].Spec.BandwidthMbit = 20
	slow := *tmpls["base"]
	slow.Name, slow.ID, slow.Spec.BandwidthMbit = "huge", "huge-0123456789ab", 500
	tmpls["huge"] = &slow
	e.cfg.Templates = tmpls
	e.m.Close()
	e.m = e.start(t)

	for _, tc := range []struct {
		template, network string
		want              network.Bandwidth
	}{
		{"base", "", network.Bandwidth{Down: 20e6, Up: 20e6}},
		{"base", `{"bandwidth":{"upMbit":50}}`, network.Bandwidth{Down: 20e6, Up: 50e6}},
		{"huge", "", network.Bandwidth{Down: 100e6, Up: 100e6}}, // bounded by the server
	} {
		req := CreateRequest{Template: tc.template, Timeout: time.Minute}
		if tc.network != "" {
			req.Network = []byte(tc.network)
		}
		sb := e.create(t, req)
		if a, _ := net.get(sb.ID); a.bw != tc.want {
			t.Errorf("template %s, network %s: bandwidth %+v, want %+v", tc.template, tc.network, a.bw, tc.want)
		}
	}
}
