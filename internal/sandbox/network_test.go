package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agent-sandbox/agent-sandbox/internal/egress"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
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

// EgressCA is a stand-in certificate naming the sandbox.
func (n *fakeNetwork) EgressCA(id string) ([]byte, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.attached[id]; !ok {
		return nil, fmt.Errorf("sandbox %s: not attached", id)
	}
	return []byte(fakeCA(id)), nil
}

func fakeCA(id string) string {
	return "-----BEGIN CERTIFICATE-----\nCA of " + id + "\n-----END CERTIFICATE-----\n"
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
		{`{"rules":{"a.test":[{"transform":{"headers":{"x":"${e2b.secrets.key}"}}}]}}`, `Value for header "x" in rule for domain "a.test" names an E2B secret`},
		{`{"rules":{"1.2.3.4":[]}}`, `Rule domain "1.2.3.4" is not a valid domain name.`},
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
	// Nothing applies header rules without the gateway: refused, not
	// dropped, and no CA is installed.
	_, err := e.m.Create(context.Background(), CreateRequest{Template: "base", Timeout: time.Minute,
		Network: []byte(`{"rules":{"a.test":[{"transform":{"headers":{"X-Key":"k"}}}]}}`)})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "network.rules needs the egress proxy") {
		t.Errorf("Create with rules = %v, want ErrInvalid", err)
	}
	if err := e.m.UpdateNetwork(context.Background(), sb.ID, NetworkUpdate{Rules: []byte(`{"a.test":[{"transform":{"headers":{"X-Key":"k"}}}]}`)}); !errors.Is(err, ErrInvalid) {
		t.Errorf("UpdateNetwork with rules = %v, want ErrInvalid", err)
	}
	if len(e.envd.fileOps) != 0 {
		t.Errorf("files touched in a sandbox without a gateway: %v", e.envd.fileOps)
	}
}

// TestEgressCAInstalled: before /init the sandbox gets its egress proxy's
// CA, into the template's trust stores (or one made for it) and a file of
// its own, and /init the env vars that point Node and requests at them;
// the template's and the request's values win.
func TestEgressCAInstalled(t *testing.T) {
	e, _ := newNetworkEnv(t)
	first := e.create(t, CreateRequest{Timeout: time.Minute, EnvVars: map[string]string{"NODE_EXTRA_CA_CERTS": "/mine.pem"}})
	e.envd.mu.Lock()
	if got := string(e.envd.files[egressCAFile]); got != fakeCA(first.ID) {
		t.Errorf("%s = %q", egressCAFile, got)
	}
	if got, want := string(e.envd.files[caBundles[0]]), egressCAMarker+fakeCA(first.ID); got != want {
		t.Errorf("%s made for the CA = %q, want %q", caBundles[0], got, want)
	}
	env := e.envd.inits[len(e.envd.inits)-1].EnvVars
	if env["NODE_EXTRA_CA_CERTS"] != "/mine.pem" || env["REQUESTS_CA_BUNDLE"] != "" {
		t.Errorf("env without a system trust store: %v", env)
	}
	for _, op := range e.envd.fileOps {
		if !strings.HasSuffix(op, " root") {
			t.Errorf("/files request not as root: %s", op)
		}
	}
	// A template with a trust store: the block is appended (and replaced
	// when it is installed again: TestWithEgressCA).
	e.envd.files = map[string][]byte{caBundles[1]: []byte("ROOTS")}
	e.envd.mu.Unlock()
	second := e.create(t, CreateRequest{Timeout: time.Minute})
	e.envd.mu.Lock()
	defer e.envd.mu.Unlock()
	if got, want := string(e.envd.files[caBundles[1]]), "ROOTS\n"+egressCAMarker+fakeCA(second.ID); got != want {
		t.Errorf("%s = %q, want %q", caBundles[1], got, want)
	}
	if _, made := e.envd.files[caBundles[0]]; made {
		t.Errorf("%s made beside the template's trust store", caBundles[0])
	}
	env = e.envd.inits[len(e.envd.inits)-1].EnvVars
	if env["NODE_EXTRA_CA_CERTS"] != egressCAFile || env["REQUESTS_CA_BUNDLE"] != caBundles[1] {
		t.Errorf("env with a system trust store: %v", env)
	}
}

func TestWithEgressCA(t *testing.T) {
	ca := "-----BEGIN CERTIFICATE-----\nNEW\n-----END CERTIFICATE-----\n"
	old := egressCAMarker + "-----BEGIN CERTIFICATE-----\nOLD\n-----END CERTIFICATE-----\n"
	for _, tc := range []struct{ bundle, want string }{
		{"", egressCAMarker + ca},
		{"A\n", "A\n" + egressCAMarker + ca},
		{"A", "A\n" + egressCAMarker + ca},
		{"A\n" + old + "B\n", "A\nB\n" + egressCAMarker + ca},
		{"A\n" + old, "A\n" + egressCAMarker + ca},
	} {
		if got := string(withEgressCA([]byte(tc.bundle), []byte(ca))); got != tc.want {
			t.Errorf("withEgressCA(%q) = %q, want %q", tc.bundle, got, tc.want)
		}
	}
}

// TestNetworkRulesStored: header rules reach the gateway, and are stored
// and echoed as E2B keeps them (domains in lower case); an update
// replaces or clears them with the lists.
func TestNetworkRulesStored(t *testing.T) {
	e, net := newNetworkEnv(t)
	ctx := context.Background()
	sb := e.create(t, CreateRequest{Timeout: time.Minute,
		Network: []byte(`{"allowOut":["API.test"],"rules":{"API.test":[{"transform":{"headers":{"X-Key":"k1"}}}]},"maskRequestHost":"m"}`)})
	a, _ := net.get(sb.ID)
	if !a.rules.HasHeaderRules() {
		t.Error("attached without the header rules")
	}
	stored := func() string {
		t.Helper()
		rec, err := e.store.GetSandbox(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		return string(rec.Network)
	}
	if got, want := stored(), `{"allowOut":["API.test"],"maskRequestHost":"m","rules":{"api.test":[{"transform":{"headers":{"X-Key":"k1"}}}]}}`; got != want {
		t.Errorf("stored %s, want %s", got, want)
	}
	if err := e.m.UpdateNetwork(ctx, sb.ID, NetworkUpdate{Rules: []byte(`{"*.B.test":[{"transform":{"headers":{"X-Key":"k2"}}}]}`)}); err != nil {
		t.Fatal(err)
	}
	if got, want := stored(), `{"maskRequestHost":"m","rules":{"*.b.test":[{"transform":{"headers":{"X-Key":"k2"}}}]}}`; got != want {
		t.Errorf("stored after update %s, want %s", got, want)
	}
	if err := e.m.UpdateNetwork(ctx, sb.ID, NetworkUpdate{Rules: []byte(`{"a.test":[{"transform":{"headers":{"Host":"x"}}}]}`)}); !errors.Is(err, ErrInvalid) {
		t.Errorf("a rule setting Host: %v, want ErrInvalid", err)
	}
	if err := e.m.UpdateNetwork(ctx, sb.ID, NetworkUpdate{}); err != nil {
		t.Fatal(err)
	}
	if got, want := stored(), `{"maskRequestHost":"m"}`; got != want {
		t.Errorf("stored after clearing %s, want %s", got, want)
	}
	ups := net.updates[sb.ID]
	if len(ups) != 2 || !ups[0].HasHeaderRules() || ups[1].HasHeaderRules() {
		t.Errorf("gateway updates %+v", ups)
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

// TestEgressCAInstalledAtPoolFill: a warm pool member behind a gateway gets
// its egress CA when it boots, so the create that takes it touches no file
// in it, and its /init still carries the env vars that point at the CA.
func TestEgressCAInstalledAtPoolFill(t *testing.T) {
	fake := isolation.NewFake()
	fake.GiveLinks()
	e := newEnvOn(t, fake, func(c *Config) {
		c.Network = newFakeNetwork()
		c.MaxBandwidth = network.Bandwidth{Down: 100e6, Up: 100e6}
		c.WarmPools = map[string]PoolSize{"base": {Min: 1, Max: 1}}
		c.MaxSandboxes = 1 // no refill after the take: its files would mix with the take's
	})
	e.waitReady(t, 1)
	e.envd.mu.Lock()
	member := fake.Running()[0]
	if got := string(e.envd.files[egressCAFile]); got != fakeCA(member) {
		t.Errorf("%s of the member = %q, want its CA", egressCAFile, got)
	}
	filled := len(e.envd.fileOps)
	e.envd.mu.Unlock()

	sb := e.create(t, CreateRequest{Timeout: time.Minute})
	e.envd.mu.Lock()
	defer e.envd.mu.Unlock()
	if sb.ID != member {
		t.Fatalf("created %s, want the pool member %s", sb.ID, member)
	}
	if ops := e.envd.fileOps[filled:]; len(ops) != 0 {
		t.Errorf("the take touched files: %v", ops)
	}
	env := e.envd.inits[len(e.envd.inits)-1].EnvVars
	if env["NODE_EXTRA_CA_CERTS"] != egressCAFile {
		t.Errorf("/init env of the taken member: %v", env)
	}
}
