package security

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/agent-sandbox/agent-sandbox/gen/process"
	"github.com/agent-sandbox/agent-sandbox/gen/process/processconnect"
	"github.com/agent-sandbox/agent-sandbox/internal/cgroup"
	"github.com/agent-sandbox/agent-sandbox/internal/egress"
	"github.com/agent-sandbox/agent-sandbox/internal/gateway"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
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

// The test Internet: one site in a range a sandbox may be allowed to reach
// by address (for the spoofing cases), and the metadata address.
var (
	siteIP   = netip.MustParseAddr("198.18.7.10")
	siteCIDR = "198.18.7.0/24"
	metadata = netip.MustParseAddr("169.254.169.254")
)

// Sandbox limits, small so that the bombs finish quickly.
const (
	memoryMB = 256
	diskMB   = 256
	connCap  = 256 // conntrack entries per sandbox
)

// sandboxSecret is in the template's /etc/shadow: what a sandbox's own
// files hold, as opposed to the host's.
const sandboxSecret = "sandbox-shadow-file"

type harness struct {
	t        *testing.T
	m        *sandbox.Manager
	in       *inet.Internet
	rootfs   string // the template, a host directory
	stateDir string // where the sandboxes' disk images live
	runDir   string // the backend's RunDir
	cgParent string
	hostPort string // a host listener on every host address, the API port's stand-in
	// marker is a host file with unique content that no sandbox may read
	// or write; markerData is that content.
	marker, markerData string
	// userns: the sandboxes run in user namespaces.
	userns bool
	// leak is a pipe the test process holds without close-on-exec, as the
	// server held fd 251 it had inherited: os/exec passes it to init, and
	// nothing of it may reach a sandbox. leakIno is its inode.
	leak    [2]int
	leakIno uint64
	st      *store.Store
}

// either is what a case expects with user namespaces, or without.
func (h *harness) either(userns, without string) string {
	if h.userns {
		return userns
	}
	return without
}

// eitherUser is what a case expects as user, or as root.
func (h *harness) eitherUser(as, asUser, asRoot string) string {
	if as == "user" {
		return asUser
	}
	return asRoot
}

// newHarness starts a sandbox manager over the jail with user namespaces
// on or off; on a host that cannot have them, the test skips and says why.
// Template build steps (RunStep) may reach site.test only. opts change the
// manager's configuration.
func newHarness(t *testing.T, userns jail.UsernsMode, opts ...func(*sandbox.Config)) *harness {
	testenv.RequireRoot(t)
	testenv.LockFirewall(t)
	ctx := context.Background()
	in := inet.Start(t, inet.Config{
		Sites: map[string][]netip.Addr{"site.test": {siteIP}},
		Extra: []netip.Addr{metadata},
	})

	dir := t.TempDir()
	h := &harness{t: t, in: in, rootfs: filepath.Join(dir, "rootfs"), stateDir: filepath.Join(dir, "sandboxes"), userns: userns == jail.UsernsOn}
	// Before any sandbox starts: what init inherits.
	if err := unix.Pipe2(h.leak[:], 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(h.leak[0]); unix.Close(h.leak[1]) })
	var pst unix.Stat_t
	if err := unix.Fstat(h.leak[0], &pst); err != nil {
		t.Fatal(err)
	}
	h.leakIno = pst.Ino
	h.marker = filepath.Join(dir, "host-marker")
	h.markerData = "host-marker-" + randomHex(8)
	if err := os.WriteFile(h.marker, []byte(h.markerData), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := jailtest.BuildRootfs(h.rootfs); err != nil {
		t.Fatalf("building rootfs: %v", err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := jailtest.AddBinary(h.rootfs, self, "usr/bin/probe", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(h.rootfs, "etc/shadow"), []byte(sandboxSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	pool, err := network.NewPool(netip.MustParsePrefix("10.246.0.0/24"))
	if err != nil {
		t.Fatal(err)
	}
	fw, err := network.NewFirewall(network.FirewallConfig{
		Redirects:          gateway.Redirects(gateway.DefaultDNSPort, gateway.DefaultProxyPort),
		MaxConnsPerSandbox: connCap,
	})
	if err != nil {
		t.Fatal(err)
	}
	reserved, err := network.HostPrefixes()
	if err != nil {
		t.Fatal(err)
	}
	c := egress.Ceiling{AllowDomains: []string{"site.test"}, SandboxMayWiden: true}
	builds := egress.Ceiling{AllowDomains: []string{"site.test"}}
	for _, p := range append(reserved, pool.Prefix()) {
		c.ReservedCIDRs = append(c.ReservedCIDRs, p.String())
		builds.ReservedCIDRs = append(builds.ReservedCIDRs, p.String())
	}
	gw, err := gateway.New(gateway.Config{
		Ceiling: c, Upstream: &egress.Cache{Upstream: &egress.NetUpstream{Addr: in.DNS.String()}}, Firewall: fw, Log: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gw.Close() })
	buildGw, err := gateway.New(gateway.Config{
		Ceiling: builds, Upstream: &egress.Cache{Upstream: &egress.NetUpstream{Addr: in.DNS.String()}}, Firewall: fw, Log: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { buildGw.Close() })

	runDir := filepath.Join(dir, "run")
	h.runDir = runDir
	h.cgParent = fmt.Sprintf("agent-sandbox-securitytest-%d", os.Getpid())
	backend, err := jail.New(jail.Config{
		StateDir: h.stateDir, RunDir: runDir, CgroupParent: h.cgParent, Log: log,
		Network: jailtest.Network(t, runDir, pool, fw), Userns: userns,
	})
	if userns == jail.UsernsOn {
		testenv.Require(t, err == nil, fmt.Sprintf("this host cannot run sandboxes in user namespaces: %v", err))
	}
	if err != nil {
		t.Fatal(err)
	}
	jailtest.CleanupRunDir(t, runDir, h.cgParent)
	st, err := store.Open(ctx, filepath.Join(dir, "db.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	envd, err := jailtest.BuildEnvd(dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg := sandbox.Config{
		Store: st, Backend: backend, Log: log, Network: gw,
		Templates:     templates{"probe": {Name: "probe", ID: "probe-00000000000", RootFS: h.rootfs, User: "user", Workdir: "/home/user"}},
		EnvdPath:      envd,
		DefaultMemory: memoryMB,
		DefaultDisk:   diskMB,
		BuildNetwork:  buildGw,
		StepResources: isolation.Resources{MemoryMB: memoryMB, DiskSizeMB: diskMB},
	}
	for _, o := range opts {
		o(&cfg)
	}
	h.st = st
	h.m, err = sandbox.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.m.Close() })

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
	_, h.hostPort, _ = net.SplitHostPort(ln.Addr().String())
	return h
}

// create starts a sandbox with the given network config; it is killed when
// the test ends.
func (h *harness) create(network string) store.Sandbox {
	h.t.Helper()
	req := sandbox.CreateRequest{Template: "probe", Timeout: 10 * time.Minute, Secure: true}
	if network != "" {
		req.Network = []byte(network)
	}
	sb, err := h.m.Create(context.Background(), req)
	if err != nil {
		h.t.Fatalf("creating sandbox: %v", err)
	}
	h.t.Cleanup(func() { _ = h.m.Kill(context.Background(), sb.ID) })
	return sb
}

// result is how a process in a sandbox ended and what it printed.
type result struct {
	out    string // stdout and stderr, trimmed
	exit   int
	status string // envd's end status, "exit status 1", "signal: killed", …
	err    error  // the stream's error, if it broke
}

// run runs /usr/bin/probe ARGS in sb as user ("user" or "root").
func (h *harness) run(sb store.Sandbox, user string, args ...string) result {
	return h.runStream(sb, user, nil, args...)
}

// runStream is run that hands each piece of output to onOut as it comes
// (and then does not keep it).
func (h *harness) runStream(sb store.Sandbox, user string, onOut func([]byte), args ...string) result {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pc := processconnect.NewProcessClient(h.client(sb), "http://envd", connect.WithProtoJSON())
	req := connect.NewRequest(&process.StartRequest{Process: &process.ProcessConfig{Cmd: "/usr/bin/probe", Args: args}})
	req.Header().Set("X-Access-Token", sb.EnvdAccessToken)
	req.Header().Set("Authorization", basicAuth(user))
	stream, err := pc.Start(ctx, req)
	if err != nil {
		return result{err: err, exit: -1}
	}
	defer stream.Close()
	var out bytes.Buffer
	r := result{exit: -1}
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		for _, b := range [][]byte{ev.GetData().GetStdout(), ev.GetData().GetStderr()} {
			if onOut != nil {
				onOut(b)
			} else {
				out.Write(b)
			}
		}
		if end := ev.GetEnd(); end != nil {
			r.exit, r.status = int(end.GetExitCode()), end.GetStatus()
		}
	}
	r.err = stream.Err()
	r.out = strings.TrimSpace(out.String())
	return r
}

// probe runs /usr/bin/probe and returns its last line of output, or what
// went wrong running it.
func (h *harness) probe(sb store.Sandbox, user string, args ...string) string {
	r := h.run(sb, user, args...)
	if r.err != nil {
		return "running the probe: " + r.err.Error()
	}
	lines := strings.Split(r.out, "\n")
	return lines[len(lines)-1]
}

// control is a positive control: a probe step that must get what ok
// accepts (want says what that is), run in the same probe process just
// before the attack, so that a probe that is broken, missing or pointed at
// the wrong thing never counts as "blocked".
type control struct {
	args []string
	want string
	ok   func(string) bool
}

// is accepts exactly want.
func is(want string) func(string) bool { return func(s string) bool { return s == want } }

// okPrefix accepts what starts with "ok".
func okPrefix(s string) bool { return strings.HasPrefix(s, "ok") }

// probed runs controls and then the attack ARGS in one probe process in sb
// as user. It returns the attack's result, the observed text for the table
// (each control's result, then the attack's) and whether every control
// got what it must.
func (h *harness) probed(sb store.Sandbox, user string, controls []control, args ...string) (got, observed string, controlsOK bool) {
	pair := []string{"pair"}
	for _, c := range controls {
		pair = append(append(pair, c.args...), "--")
	}
	r := h.run(sb, user, append(pair, args...)...)
	if r.err != nil {
		return "", "running the probe: " + r.err.Error(), false
	}
	lines := strings.Split(r.out, "\n")
	if len(lines) != len(controls)+1 {
		return "", fmt.Sprintf("the probe printed %q (exit %d), not %d results", r.out, r.exit, len(controls)+1), false
	}
	got = lines[len(lines)-1]
	failed, passed := []string{got}, []string(nil)
	for i, c := range controls {
		res := strings.TrimPrefix(lines[i], "control: ")
		if c.ok(res) {
			passed = append(passed, fmt.Sprintf("control %s: %s", strings.Join(c.args, " "), res))
			continue
		}
		failed = append(failed, fmt.Sprintf("POSITIVE CONTROL FAILED: %s got %q, want %s", strings.Join(c.args, " "), res, c.want))
	}
	// The attack's result first, then failed controls: the table cuts
	// long observations.
	return got, strings.Join(append(failed, passed...), "; "), len(failed) == 1
}

func basicAuth(user string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"))
}

// client reaches envd in sb through the manager.
func (h *harness) client(sb store.Sandbox) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return h.m.Dial(ctx, sb.ID, sandbox.EnvdPort)
		},
	}}
}

// health asks envd in sb for GET /health and returns its status code.
func (h *harness) health(sb store.Sandbox) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://envd/health", nil)
	resp, err := h.client(sb).Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// getFile is GET /files?path=P as user; it returns the status and body.
func (h *harness) getFile(sb store.Sandbox, user, path string) (int, string, error) {
	q := url.Values{"path": {path}, "username": {user}}
	req, _ := http.NewRequest(http.MethodGet, "http://envd/files?"+q.Encode(), nil)
	req.Header.Set("X-Access-Token", sb.EnvdAccessToken)
	resp, err := h.client(sb).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b), err
}

// putFile is POST /files?path=P (octet-stream) as user.
func (h *harness) putFile(sb store.Sandbox, user, path, data string) (int, string, error) {
	q := url.Values{"path": {path}, "username": {user}}
	req, _ := http.NewRequest(http.MethodPost, "http://envd/files?"+q.Encode(), strings.NewReader(data))
	req.Header.Set("X-Access-Token", sb.EnvdAccessToken)
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := h.client(sb).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, strings.TrimSpace(string(b)), err
}

// backendState is the jail's record of sb.
func (h *harness) backendState(sb store.Sandbox) (st struct {
	InitPid          int    `json:"init_pid"`
	Cgroup           string `json:"cgroup"`
	Gateway, Address netip.Addr
}) {
	h.t.Helper()
	if err := json.Unmarshal(sb.BackendState, &st); err != nil || st.Cgroup == "" {
		h.t.Fatalf("reading the state of sandbox %s from %s: %v", sb.ID, sb.BackendState, err)
	}
	return st
}

// cgroupFile reads a file of sb's cgroup in the v1 hierarchy of controller
// (or in the unified one).
func (h *harness) cgroupFile(sb store.Sandbox, controller, file string) string {
	name := h.backendState(sb).Cgroup
	p := filepath.Join(cgroup.Root, controller, name, file)
	if mode, _ := cgroup.Detect(); mode == cgroup.V2 {
		p = filepath.Join(cgroup.Root, name, file)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return "error: " + err.Error()
	}
	return strings.TrimSpace(string(b))
}

// envdRSS is the resident memory of envd in sb, in bytes (0 if not found).
func (h *harness) envdRSS(sb store.Sandbox) int64 {
	cg, err := cgroup.Load(h.backendState(sb).Cgroup)
	if err != nil {
		return 0
	}
	pids, _ := cg.Procs()
	for _, pid := range pids {
		if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(comm)) == "envd" {
			return rssOf(strconv.Itoa(pid))
		}
	}
	return 0
}

// rssOf reads VmRSS of /proc/<pid>/status in bytes.
func rssOf(pid string) int64 {
	f, err := os.Open("/proc/" + pid + "/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// templates is a fixed template set.
type templates map[string]*template.Template

func (ts templates) Lookup(ref string) (*template.Template, error) {
	if t, ok := ts[ref]; ok {
		return t, nil
	}
	return nil, template.ErrNotFound
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
