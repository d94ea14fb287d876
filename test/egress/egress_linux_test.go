package egress

import (
	"context"
	"fmt"
	"log/slog"
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
	"github.com/agent-sandbox/agent-sandbox/internal/gateway"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/jail"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/jail/jailtest"
	"github.com/agent-sandbox/agent-sandbox/internal/network"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
	"github.com/agent-sandbox/agent-sandbox/internal/template"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
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
	m        *sandbox.Manager
	in       *inet.Internet
	hostPort string // a host listener standing in for the API port, on every host address
}

func newHarness(t *testing.T) *harness {
	testenv.RequireRoot(t)
	testenv.LockFirewall(t)
	ctx := context.Background()
	in := inet.Start(t, inet.Config{
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
	})

	dir := t.TempDir()
	rootfs := filepath.Join(dir, "rootfs")
	if err := jailtest.BuildRootfs(rootfs); err != nil {
		t.Fatalf("building rootfs: %v", err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := jailtest.AddBinary(rootfs, self, "usr/bin/probe", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rootfs, caFile), in.CACert, 0o644); err != nil {
		t.Fatal(err)
	}

	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
	pool, err := network.NewPool(netip.MustParsePrefix("10.248.0.0/24"))
	if err != nil {
		t.Fatal(err)
	}
	fw, err := network.NewFirewall(network.FirewallConfig{
		Redirects: gateway.Redirects(gateway.DefaultDNSPort, gateway.DefaultProxyPort),
		LogGroup:  dropLogGroup,
	})
	if err != nil {
		t.Fatal(err)
	}
	reserved, err := network.HostPrefixes()
	if err != nil {
		t.Fatal(err)
	}
	c := ceiling
	for _, p := range append(reserved, pool.Prefix()) {
		c.ReservedCIDRs = append(c.ReservedCIDRs, p.String())
	}
	gw, err := gateway.New(gateway.Config{
		Ceiling: c, Upstream: &egress.Cache{Upstream: &egress.NetUpstream{Addr: in.DNS.String()}}, Firewall: fw, Log: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	dl, err := network.OpenDropLog(dropLogGroup)
	if err != nil {
		t.Fatalf("opening the drop log: %v", err)
	}
	dropsCtx, stopDrops := context.WithCancel(ctx)
	dropsDone := make(chan struct{})
	go func() {
		defer close(dropsDone)
		if err := gw.RecordDrops(dropsCtx, dl); err != nil {
			t.Errorf("reading the drop log: %v", err)
		}
	}()
	t.Cleanup(func() {
		stopDrops()
		<-dropsDone
		dl.Close()
		gw.Close()
	})

	runDir := filepath.Join(dir, "run")
	cgParent := fmt.Sprintf("agent-sandbox-egresstest-%d", os.Getpid())
	backend, err := jail.New(jail.Config{
		StateDir: filepath.Join(dir, "sandboxes"), RunDir: runDir, CgroupParent: cgParent, Log: log,
		Network: jailtest.Network(t, runDir, pool, fw),
	})
	if err != nil {
		t.Fatal(err)
	}
	jailtest.CleanupRunDir(t, runDir, cgParent)
	st, err := store.Open(ctx, filepath.Join(dir, "db.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	envd, err := jailtest.BuildEnvd(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := sandbox.New(sandbox.Config{
		Store: st, Backend: backend, Log: log, Network: gw,
		Templates: templates{"probe": {Name: "probe", ID: "probe-00000000000", RootFS: rootfs, User: "user", Workdir: "/home/user"}},
		EnvdPath:  envd,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })

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
	return &harness{t: t, m: m, in: in, hostPort: port}
}

// create starts a sandbox with the given network config and
// allow_internet_access; it is killed when the test ends.
func (h *harness) create(network string, allowInternet *bool) store.Sandbox {
	h.t.Helper()
	req := sandbox.CreateRequest{Template: "probe", Timeout: 10 * time.Minute, Secure: true, AllowInternetAccess: allowInternet}
	if network != "" {
		req.Network = []byte(network)
	}
	sb, err := h.m.Create(context.Background(), req)
	if err != nil {
		h.t.Fatalf("creating sandbox (network %s): %v", network, err)
	}
	h.t.Cleanup(func() { _ = h.m.Kill(context.Background(), sb.ID) })
	return sb
}

// probe runs /usr/bin/probe in sb as root and returns its one line.
func (h *harness) probe(sb store.Sandbox, args ...string) string {
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
		out.Write(ev.GetData().GetStdout())
		out.Write(ev.GetData().GetStderr())
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

// templates is a fixed template set.
type templates map[string]*template.Template

func (ts templates) Lookup(ref string) (*template.Template, error) {
	if t, ok := ts[ref]; ok {
		return t, nil
	}
	return nil, template.ErrNotFound
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
