package egress

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/agent-sandbox/agent-sandbox/gen/process"
	"github.com/agent-sandbox/agent-sandbox/gen/process/processconnect"
	"github.com/agent-sandbox/agent-sandbox/internal/egress"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/jail"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox/sandboxtest"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
	"github.com/agent-sandbox/agent-sandbox/internal/template"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv/inet"
)

// TestMain lets the test binary serve as the jail's init and, copied into
// the sandboxes, as /usr/bin/probe.
func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == "probe" {
		os.Exit(probeMain(os.Args[1:]))
	}
	jail.ExitIfInit()
	os.Exit(m.Run())
}

// The test Internet. Its link is fixed so that a name can point at the
// host's own end of it.
var (
	inetLink = netip.MustParsePrefix("198.19.251.0/30")
	hostEnd  = netip.MustParseAddr("198.19.251.1")

	allowedIP = netip.MustParseAddr("198.18.1.10")
	wildAIP   = netip.MustParseAddr("198.18.1.11")
	otherIP   = netip.MustParseAddr("198.18.1.12")
	extraIP   = netip.MustParseAddr("198.18.1.13")
	wildBIP   = netip.MustParseAddr("198.18.1.14")
	directIP  = netip.MustParseAddr("198.18.2.10") // reached by CIDR rule
	privateIP = netip.MustParseAddr("172.31.255.1")
	metadata  = netip.MustParseAddr("169.254.169.254")
)

// ceiling is the operator policy under test: an allowlist of names, which
// sandboxes may widen.
var ceiling = egress.Ceiling{
	AllowDomains:    []string{"allowed.test", "*.wild.test", "rebind.test", "hostaddr.test"},
	SandboxMayWiden: true,
}

// dropLogGroup differs from the server's so a running server does not
// hold it.
const dropLogGroup = 7320

type harness struct {
	t        *testing.T
	s        *sandboxtest.Stack
	m        *sandbox.Manager
	in       *inet.Internet
	hostPort string // a host listener standing in for the API port, on every host address
}

// newHarness starts a sandbox manager on backend behind the egress
// gateway, with the test Internet as its upstream; sandboxes may be created
// from the probe template and from tmpls.
func newHarness(t *testing.T, backend string, tmpls ...*template.Template) *harness {
	s := sandboxtest.Start(t, sandboxtest.Config{
		Backend: backend, Name: "egresstest", Pool: netip.MustParsePrefix("10.248.0.0/24"),
		Ceiling: &ceiling, DropLogGroup: dropLogGroup, Probe: true, Templates: tmpls,
		Internet: &inet.Config{
			Link: inetLink,
			Sites: map[string][]netip.Addr{
				"allowed.test": {allowedIP},
				"a.wild.test":  {wildAIP},
				"b.wild.test":  {wildBIP},
				"other.test":   {otherIP},
				"extra.test":   {extraIP},
				"direct.test":  {directIP},
				"rebind.test":  {privateIP},
			},
			Names: map[string][]netip.Addr{"hostaddr.test": {hostEnd}},
			Extra: []netip.Addr{metadata},
		},
	})

	// Something listening on every host address: the API port stands in.
	ln, err := net.Listen("tcp", ":0")
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
			c.Write([]byte("host"))
			c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return &harness{t: t, s: s, m: s.Manager, in: s.Internet, hostPort: port}
}

// create starts a sandbox with the given network config and
// allow_internet_access; it is killed when the test ends.
func (h *harness) create(network string, allowInternet *bool) store.Sandbox {
	h.t.Helper()
	req := sandbox.CreateRequest{AllowInternetAccess: allowInternet}
	if network != "" {
		req.Network = []byte(network)
	}
	return h.createReq(req)
}

// createReq starts a probe sandbox as req says; it is killed when the
// test ends.
func (h *harness) createReq(req sandbox.CreateRequest) store.Sandbox {
	h.t.Helper()
	req.Template, req.Timeout, req.Secure = "probe", 10*time.Minute, true
	sb, err := h.m.Create(context.Background(), req)
	if err != nil {
		h.t.Fatalf("creating sandbox (network %s): %v", req.Network, err)
	}
	h.t.Cleanup(func() { _ = h.m.Kill(context.Background(), sb.ID) })
	return sb
}

// probe runs /usr/bin/probe in sb as root and returns its one line.
func (h *harness) probe(sb store.Sandbox, args ...string) string {
	h.t.Helper()
	return h.probeStream(sb, nil, args...)
}

// probeStream is probe that hands each piece of output to onOut too, as
// it comes.
func (h *harness) probeStream(sb store.Sandbox, onOut func([]byte), args ...string) string {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	hc := &httpClientForSandbox{m: h.m, id: sb.ID}
	pc := processconnect.NewProcessClient(hc.client(), "http://envd", connect.WithProtoJSON())
	req := connect.NewRequest(&process.StartRequest{Process: &process.ProcessConfig{Cmd: "/usr/bin/probe", Args: args}})
	req.Header().Set("X-Access-Token", sb.EnvdAccessToken)
	req.Header().Set("Authorization", "Basic cm9vdDo=") // user root
	stream, err := pc.Start(ctx, req)
	if err != nil {
		h.t.Fatalf("probe %v: %v", args, err)
	}
	defer stream.Close()
	var out strings.Builder
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		for _, b := range [][]byte{ev.GetData().GetStdout(), ev.GetData().GetStderr()} {
			if onOut != nil && len(b) > 0 {
				onOut(b)
			}
			out.Write(b)
		}
	}
	if err := stream.Err(); err != nil {
		h.t.Fatalf("probe %v: %v", args, err)
	}
	return strings.TrimSpace(out.String())
}

// events returns sb's audit trail.
func (h *harness) events(sb store.Sandbox) []egress.Event {
	h.t.Helper()
	ev, _, err := h.m.EgressEvents(sb.ID, 0, 10000)
	if err != nil {
		h.t.Fatalf("reading the audit trail: %v", err)
	}
	return ev
}

// expect is one probe and what its line must start with.
type expect struct {
	name  string
	args  []string
	want  string // prefix of the probe's line: "ok …" or "fail"
	audit func(e egress.Event) bool
}

func (h *harness) check(sb store.Sandbox, cases []expect) {
	h.t.Helper()
	for _, c := range cases {
		got := h.probe(sb, c.args...)
		if !strings.HasPrefix(got, c.want) {
			h.t.Errorf("%s: probe %v = %q, want %q…", c.name, c.args, got, c.want)
		} else {
			h.t.Logf("%s: %s", c.name, got)
		}
	}
	// Firewall drops arrive through NFLOG asynchronously.
	deadline := time.Now().Add(3 * time.Second)
	for {
		ev := h.events(sb)
		var missing []string
		for _, c := range cases {
			if c.audit != nil && !slices.ContainsFunc(ev, c.audit) {
				missing = append(missing, c.name)
			}
		}
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			h.t.Errorf("audit trail lacks the decisions of %v; it holds:\n%s", missing, formatEvents(ev))
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func formatEvents(ev []egress.Event) string {
	var b strings.Builder
	for _, e := range ev {
		fmt.Fprintf(&b, "  %d %s proto=%s name=%s addrs=%v port=%d allowed=%v rule=%q\n",
			e.Seq, e.Kind, e.Proto, e.Name, e.Addrs, e.Port, e.Allowed, e.Rule)
	}
	return b.String()
}

// Audit matchers.
func dnsEvent(name string, allowed bool) func(egress.Event) bool {
	return func(e egress.Event) bool { return e.Kind == egress.EventDNS && e.Name == name && e.Allowed == allowed }
}

func answerRemoved(name string, a netip.Addr) func(egress.Event) bool {
	return func(e egress.Event) bool {
		return e.Kind == egress.EventDNSAnswer && e.Name == name && slices.Contains(e.Addrs, a) && !e.Allowed
	}
}

func proxyEvent(name string, a netip.Addr, allowed bool) func(egress.Event) bool {
	return func(e egress.Event) bool {
		return e.Kind == egress.EventProxy && e.Name == name && e.Allowed == allowed &&
			(!a.IsValid() || slices.Contains(e.Addrs, a))
	}
}

func dropEvent(proto string, a netip.Addr, rule string) func(egress.Event) bool {
	return func(e egress.Event) bool {
		return e.Kind == egress.EventFirewall && e.Proto == proto && slices.Contains(e.Addrs, a) && e.Rule == "firewall:"+rule
	}
}

func ap(a netip.Addr, port int) string { return net.JoinHostPort(a.String(), strconv.Itoa(port)) }

func ms(values []float64) (p50 float64) {
	sort.Float64s(values)
	return values[len(values)/2]
}

// httpClientForSandbox reaches envd in a sandbox through the manager.
type httpClientForSandbox struct {
	m  *sandbox.Manager
	id string
}

func (c *httpClientForSandbox) client() *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return c.m.Dial(ctx, c.id, sandbox.EnvdPort)
		},
	}}
}
