package security

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
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
	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/jail"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox/sandboxtest"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
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

// setup is what a run's sandboxes are: a backend and, for the jail,
// whether they run in user namespaces.
type setup struct {
	backend string
	userns  jail.UsernsMode // the jail's; "" for the vm
}

func (s setup) String() string {
	if s.backend == sandboxtest.Jail {
		return "jail userns " + string(s.userns)
	}
	return s.backend
}

type harness struct {
	t        *testing.T
	s        *sandboxtest.Stack
	m        *sandbox.Manager
	in       *inet.Internet
	setup    setup
	hostPort string // a host listener on every host address, the API port's stand-in
	// marker is a host file with unique content that no sandbox may read
	// or write; markerData is that content.
	marker, markerData string
	// leak is a pipe the test process holds without close-on-exec, as the
	// server held fd 251 it had inherited: os/exec passes it to init, and
	// nothing of it may reach a sandbox. leakIno is its inode.
	leak    [2]int
	leakIno uint64
}

// vm reports whether the sandboxes are VMs.
func (h *harness) vm() bool { return h.setup.backend == sandboxtest.VM }

// gvisor reports whether the sandboxes are gVisor's.
func (h *harness) gvisor() bool { return h.setup.backend == sandboxtest.Gvisor }

// orGvisor is what a case expects under gVisor, whose kernel answers
// some attacks otherwise than Linux does, or else.
func (h *harness) orGvisor(other, gvisor string) string {
	if h.gvisor() {
		return gvisor
	}
	return other
}

// by is what a case expects in a jail with user namespaces, in one
// without, and in a VM (its own kernel, whose root holds the bounding
// set's capabilities over it, in no user namespace).
func (h *harness) by(userns, without, vm string) string {
	switch {
	case h.vm():
		return vm
	case h.setup.userns == jail.UsernsOn:
		return userns
	}
	return without
}

// orVM is what a case expects in a jail, or in a VM.
func (h *harness) orVM(jail, vm string) string {
	if h.vm() {
		return vm
	}
	return jail
}

// either is what a jail case expects with user namespaces, or without.
func (h *harness) either(userns, without string) string {
	if h.setup.userns == jail.UsernsOn {
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

// newHarness starts a sandbox manager on the backend of setup; on a host
// that cannot run it, the test skips and says why (fails under CI=true).
// Template build steps (RunStep) may reach site.test only. opts change
// the manager's configuration.
func newHarness(t *testing.T, su setup, opts ...func(*sandbox.Config)) *harness {
	h := &harness{t: t, setup: su}
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
	h.s = sandboxtest.Start(t, sandboxtest.Config{
		Backend: su.backend, Userns: su.userns, Name: "securitytest", Pool: netip.MustParsePrefix("10.246.0.0/24"),
		Internet: &inet.Config{
			Sites: map[string][]netip.Addr{"site.test": {siteIP}},
			Extra: []netip.Addr{metadata},
		},
		Ceiling:            &egress.Ceiling{AllowDomains: []string{"site.test"}, SandboxMayWiden: true},
		BuildCeiling:       &egress.Ceiling{AllowDomains: []string{"site.test"}},
		MaxConnsPerSandbox: connCap,
		Probe:              true,
		ProbeFiles:         []sandboxtest.File{{Path: "etc/shadow", Data: []byte(sandboxSecret + "\n"), Mode: 0o600}},
		Resources:          isolation.Resources{MemoryMB: memoryMB, DiskSizeMB: diskMB},
		LogLevel:           slog.LevelWarn,
		Manager: func(c *sandbox.Config) {
			for _, o := range opts {
				o(c)
			}
		},
	})
	h.m, h.in = h.s.Manager, h.s.Internet
	// Beside the stack's files, whose paths the leak cases look for.
	h.marker = filepath.Join(h.s.Dir, "host-marker")
	h.markerData = "host-marker-" + randomHex(8)
	if err := os.WriteFile(h.marker, []byte(h.markerData), 0o644); err != nil {
		t.Fatal(err)
	}

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

// link is a sandbox's network link.
type link struct{ Gateway, Address netip.Addr }

// link is sb's link, from its backend's state.
func (h *harness) link(sb store.Sandbox) link {
	h.t.Helper()
	gw, addr, err := h.s.Link(sb)
	if err != nil {
		h.t.Fatal(err)
	}
	return link{gw, addr}
}

// cgroupFile reads a file of the host cgroup of sb's processes (the
// jail's sandbox group, the VM's QEMU group) in the v1 hierarchy of
// controller (or in the unified one).
func (h *harness) cgroupFile(sb store.Sandbox, controller, file string) string {
	name, err := h.s.Cgroup(sb)
	if err != nil {
		return "error: " + err.Error()
	}
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

// endedWhy waits up to 30 s for sb to end by itself and returns the
// manager's error for it, which says when and why it ended.
func (h *harness) endedWhy(sb store.Sandbox) string {
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := h.m.Get(context.Background(), sb.ID)
		if err != nil || time.Now().After(deadline) {
			return fmt.Sprintf("the manager: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// envdRSS is the resident memory of envd in sb, in bytes (0 if not
// found): read from the host in the jail, and in a VM or gVisor, where
// envd's memory is the guest's or the sentry's, by the probe as root.
func (h *harness) envdRSS(sb store.Sandbox) int64 {
	if h.vm() || h.gvisor() {
		var n int64
		fmt.Sscanf(h.probe(sb, "root", "rss", "envd"), "ok %d", &n)
		return n
	}
	name, err := h.s.Cgroup(sb)
	if err != nil {
		return 0
	}
	cg, err := cgroup.Load(name)
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

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
