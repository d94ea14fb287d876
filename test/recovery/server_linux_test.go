package recovery

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/client"
	"github.com/agent-sandbox/agent-sandbox/internal/cgroup"
	"github.com/agent-sandbox/agent-sandbox/internal/hostlock"
	"github.com/agent-sandbox/agent-sandbox/internal/template"
)

// addressPool is the test servers' own, away from the default pool (where
// a stopped server's sandboxes may still run) and the other tests' pools.
var addressPool = netip.MustParsePrefix("10.244.0.0/24")

// buildServer builds agent-sandbox, envd and codeinterp from this tree into
// a temporary directory (serve finds the other two beside itself).
func buildServer(t *testing.T) string {
	t.Helper()
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	dir := t.TempDir()
	// The flags of `make build`, so that its build cache serves this one.
	cmd := exec.Command("go", "build", "-trimpath", "-o", dir+"/", "./cmd/...")
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(gomod)))
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the server: %v\n%s", err, out)
	}
	return filepath.Join(dir, "agent-sandbox")
}

// dataDirWithBase makes the server's data directory and seeds it with hard
// links to the base template the SDK suite built (as make bench-smoke does),
// so that serve does not debootstrap it again; without one, serve builds it
// (minutes). The directory sits beside the SDK suite's, on its filesystem.
func dataDirWithBase(t *testing.T) string {
	t.Helper()
	sdkDir := cmp.Or(os.Getenv("AGENT_SANDBOX_TEST_DATA_DIR"), "/var/lib/agent-sandbox-sdk-test")
	dir, err := os.MkdirTemp(filepath.Dir(sdkDir), "agent-sandbox-recovery-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if ms := mountsMentioning(t, dir); len(ms) > 0 {
			t.Errorf("left mounted, so %s is not removed: %v", dir, ms)
			return
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Error(err)
		}
	})
	base := filepath.Join(sdkDir, "templates", template.BaseName, template.Base().Hash())
	if _, err := os.Stat(filepath.Join(base, "template.json")); err != nil {
		t.Logf("no prebuilt base template (%v): serve builds it, which takes minutes", err)
		return dir
	}
	dst := filepath.Join(dir, "templates", template.BaseName)
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-al", base, dst+"/").CombinedOutput(); err != nil {
		t.Logf("linking the base template from %s failed (%v: %s): serve builds it, which takes minutes", base, err, out)
		os.RemoveAll(dst)
	}
	return dir
}

// serverProc is one agent-sandbox serve process at a time on the test's
// data dir, started and ended by PID.
type serverProc struct {
	t       *testing.T
	bin     string
	backend string // serve --backend
	dataDir string
	apiKey  string
	listen  string
	starts  int
	made    []string // the IDs of the sandboxes create made
	stopped bool     // stop saw the last server exit

	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	log  string        // the current process's output file
}

// newServer prepares a server on backend, built from this tree, with a data
// dir of its own; the caller starts it. Should the test end before stop,
// or fail (a sandbox may run on), teardown removes what is left.
func newServer(t *testing.T, backend string) *serverProc {
	s := &serverProc{t: t, bin: buildServer(t), backend: backend, dataDir: dataDirWithBase(t), apiKey: "e2b_" + randomHex(t, 20)}
	t.Cleanup(func() {
		if !s.stopped || t.Failed() {
			s.teardown()
		}
	})
	return s
}

// create creates a sandbox with opts and remembers it for teardown.
func (s *serverProc) create(opts client.CreateOptions) *client.Sandbox {
	s.t.Helper()
	sb, err := s.client().CreateSandbox(s.t.Context(), opts)
	if err != nil {
		s.t.Fatalf("creating sandbox %d: %v", len(s.made), err)
	}
	s.made = append(s.made, sb.ID)
	return sb
}

// startTimeout covers a serve that must build the base template first.
const startTimeout = 20 * time.Minute

// start starts serve and waits for GET /health to answer 204. serve refuses
// to start while another holds the host lock (a root test or a server), so
// it waits for the lock and tries again.
func (s *serverProc) start() {
	t := s.t
	t.Helper()
	deadline := time.Now().Add(startTimeout)
	for {
		waitHostLock(t)
		s.spawn()
		err := s.waitHealthy(deadline)
		if err == nil {
			return
		}
		out, _ := os.ReadFile(s.log)
		if errors.Is(err, errExited) && strings.Contains(string(out), hostlock.ErrHeld.Error()) && time.Now().Before(deadline) {
			t.Logf("serve found the host lock taken; waiting for it: %s", lastLine(out))
			continue
		}
		if s.running() {
			s.kill9()
		}
		t.Fatalf("serve (pid %d): %v\n--- its output ---\n%s", s.cmd.Process.Pid, err, tail(out, 64<<10))
	}
}

var errExited = errors.New("serve exited")

// waitHostLock returns once nobody holds the host lock, which serve takes.
func waitHostLock(t *testing.T) {
	t.Helper()
	owner := "go test " + t.Name() + ", waiting to start serve"
	release, err := hostlock.Acquire(hostlock.Path, owner, false)
	if errors.Is(err, hostlock.ErrHeld) {
		t.Logf("waiting for the host lock: %v", err)
		release, err = hostlock.Acquire(hostlock.Path, owner, true)
	}
	if err != nil {
		t.Fatal(err)
	}
	release()
}

func (s *serverProc) spawn() {
	t := s.t
	t.Helper()
	if s.listen == "" {
		s.listen = freeAddr(t)
	}
	s.starts++
	s.log = filepath.Join(t.TempDir(), fmt.Sprintf("serve-%d.log", s.starts))
	out, err := os.Create(s.log)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	s.cmd = exec.Command(s.bin, "serve", "--listen", s.listen, "--data-dir", s.dataDir, "--api-key", s.apiKey,
		"--backend", s.backend, "--address-pool", addressPool.String(), "--warm-pool", "none")
	s.cmd.Stdout, s.cmd.Stderr = out, out
	// Should the test binary die, the server goes too (and gives back the
	// host lock); its sandboxes stay, in the data dir, as on any stop.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("starting serve: %v", err)
	}
	s.done = make(chan struct{})
	go func() {
		_ = s.cmd.Wait()
		close(s.done)
	}()
	t.Logf("started serve, pid %d, on %s (output %s)", s.cmd.Process.Pid, s.listen, s.log)
}

func (s *serverProc) waitHealthy(deadline time.Time) error {
	hc := &http.Client{Timeout: time.Second}
	for {
		select {
		case <-s.done:
			return fmt.Errorf("%w before it was healthy: %v", errExited, s.cmd.ProcessState)
		default:
		}
		if res, err := hc.Get("http://" + s.listen + "/health"); err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusNoContent {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not healthy after %v", startTimeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *serverProc) running() bool {
	if s.done == nil {
		return false
	}
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// kill9 sends the server SIGKILL by its PID and waits for it to die.
func (s *serverProc) kill9() {
	s.t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		s.t.Fatalf("SIGKILL to serve (pid %d): %v", s.cmd.Process.Pid, err)
	}
	<-s.done
}

// stop ends the server as an operator does (SIGTERM) and checks it exits
// cleanly; past a grace period it is killed.
func (s *serverProc) stop() {
	t := s.t
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM to serve (pid %d): %v", s.cmd.Process.Pid, err)
	}
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		s.kill9()
		t.Fatalf("serve (pid %d) did not stop within 30 s of SIGTERM", s.cmd.Process.Pid)
	}
	s.stopped = true
	if !s.cmd.ProcessState.Success() {
		out, _ := os.ReadFile(s.log)
		t.Errorf("serve (pid %d) ended with %v\n--- its output ---\n%s", s.cmd.Process.Pid, s.cmd.ProcessState, tail(out, 16<<10))
	}
}

// teardown runs when the test stopped half-way or failed: a server
// (restarted if it is down, so that it adopts or cleans up what is left)
// kills every sandbox of the data dir, and stops.
func (s *serverProc) teardown() {
	t := s.t
	if len(s.made) == 0 && !s.running() {
		return
	}
	if !s.running() {
		t.Logf("cleaning up: restarting serve so that it reconciles %v", s.made)
		s.start()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := s.client()
	left, _, err := c.ListSandboxes(ctx, client.ListOptions{})
	if err != nil {
		t.Errorf("cleaning up: %v", err)
	}
	for _, sb := range left {
		if err := c.KillSandbox(ctx, sb.ID); err != nil {
			t.Errorf("cleaning up: killing %s: %v", sb.ID, err)
		}
	}
	s.stop()
}

// logLine returns the first line of the current server's output that
// contains every one of texts.
func (s *serverProc) logLine(texts ...string) string {
	out, _ := os.ReadFile(s.log)
	for line := range strings.Lines(string(out)) {
		if !slices.ContainsFunc(texts, func(text string) bool { return !strings.Contains(line, text) }) {
			return strings.TrimSpace(line)
		}
	}
	return fmt.Sprintf("(no line with %q)", texts)
}

func (s *serverProc) client() *client.Client {
	url := "http://" + s.listen
	c, err := client.New(client.Config{APIURL: url, SandboxURL: url, Domain: s.listen, APIKey: s.apiKey})
	if err != nil {
		s.t.Fatal(err)
	}
	return c
}

// ended returns why sandbox id ended, as GET /sandboxes/{id} says: 404,
// "… (it ended at <time>: <reason>)". It waits up to within for a sandbox
// that still runs to end.
func (s *serverProc) ended(id string, within time.Duration) (string, error) {
	t0 := time.Now()
	deadline := t0.Add(within)
	for {
		_, err := s.client().GetSandbox(s.t.Context(), id)
		if err == nil && time.Now().Before(deadline) {
			time.Sleep(250 * time.Millisecond)
			continue
		}
		if err == nil {
			return "", fmt.Errorf("GET /sandboxes/%s: still running after %v", id, within)
		}
		var apiErr *client.APIError
		if !errors.As(err, &apiErr) || apiErr.Status != http.StatusNotFound {
			return "", fmt.Errorf("GET /sandboxes/%s: %w, want a 404 saying why it ended", id, err)
		}
		m := endedMessage.FindStringSubmatch(apiErr.Message)
		if m == nil {
			return "", fmt.Errorf("GET /sandboxes/%s: 404 %q says no end", id, apiErr.Message)
		}
		s.t.Logf("GET /sandboxes/%s, after %v: %s", id, time.Since(t0).Round(time.Millisecond), apiErr)
		return m[1], nil
	}
}

var endedMessage = regexp.MustCompile(`\(it ended at \S+: (.*)\)$`)

// metric is one sample of GET /sandboxes/{id}/metrics.
type metric struct {
	Timestamp  time.Time `json:"timestamp"`
	CPUCount   int       `json:"cpuCount"`
	CPUUsedPct float64   `json:"cpuUsedPct"`
	MemUsed    uint64    `json:"memUsed"`
	MemTotal   uint64    `json:"memTotal"`
	DiskUsed   uint64    `json:"diskUsed"`
	DiskTotal  uint64    `json:"diskTotal"`
}

// checkMetrics keeps sb's CPUs busy for a while and checks that GET
// /sandboxes/{id}/metrics then has a sample of that time whose numbers
// fit: the sandbox's CPUs and memory, CPU used (the busy loop is the
// control that it is measured), memory used within the limit of its host
// cgroup (the jail's, or QEMU's), disk used within its disk.
func (s *serverProc) checkMetrics(be backend, sb *client.Sandbox) {
	t := s.t
	t.Helper()
	info, err := s.client().GetSandbox(t.Context(), sb.ID)
	if err != nil {
		t.Fatalf("GET /sandboxes/%s: %v", sb.ID, err)
	}
	busy := time.Now()
	run(t, sb, "for i in $(seq "+strconv.Itoa(info.CPUCount)+"); do setsid timeout 8 sh -c 'while :; do :; done' </dev/null >/dev/null 2>&1 & done")
	var m metric
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Second) {
		var ms []metric
		s.api(http.MethodGet, "/sandboxes/"+sb.ID+"/metrics", "", http.StatusOK, &ms)
		if i := slices.IndexFunc(ms, func(m metric) bool { return m.Timestamp.After(busy.Add(2 * time.Second)) }); i >= 0 {
			m = ms[i]
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("sandbox %s: no metrics sample in the 30 s after %s: %+v", sb.ID, busy.Format(time.RFC3339), ms)
			return
		}
	}
	t.Logf("sandbox %s, busy since %s: metrics sample %+v", sb.ID, busy.Format(time.TimeOnly), m)
	cg, err := cgroup.Load(be.cgroup(sb.ID))
	if err != nil {
		t.Fatalf("sandbox %s: %v", sb.ID, err)
	}
	cs, err := cg.Stats()
	if err != nil {
		t.Fatalf("sandbox %s: cgroup %s: %v", sb.ID, be.cgroup(sb.ID), err)
	}
	mb := uint64(1 << 20)
	for _, c := range []struct {
		what string
		ok   bool
	}{
		{fmt.Sprintf("cpuCount %d, the sandbox's %d", m.CPUCount, info.CPUCount), m.CPUCount == info.CPUCount},
		{fmt.Sprintf("cpuUsedPct %.1f of a busy sandbox, in (0, 100]", m.CPUUsedPct), m.CPUUsedPct > 0 && m.CPUUsedPct <= 105},
		{fmt.Sprintf("memTotal %d, the sandbox's %d MiB", m.MemTotal, info.MemoryMB), m.MemTotal == uint64(info.MemoryMB)*mb},
		{fmt.Sprintf("memUsed %d, within the limit %d of cgroup %s", m.MemUsed, cs.MemoryLimit, be.cgroup(sb.ID)), m.MemUsed > 0 && m.MemUsed <= cs.MemoryLimit},
		{fmt.Sprintf("diskUsed %d of diskTotal %d, within the sandbox's %d MiB", m.DiskUsed, m.DiskTotal, info.DiskSizeMB),
			m.DiskUsed > 0 && m.DiskUsed <= m.DiskTotal && m.DiskTotal > uint64(info.DiskSizeMB)*mb/2 && m.DiskTotal <= uint64(info.DiskSizeMB)*mb},
	} {
		if !c.ok {
			t.Errorf("sandbox %s: metrics: %s", sb.ID, c.what)
		}
	}
}

// run runs a shell command as root in sb and returns its output; it fails
// the test unless the command exits 0.
func run(t *testing.T, sb *client.Sandbox, cmd string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var out, errOut strings.Builder
	code, err := sb.Run(ctx, cmd, client.RunOptions{User: "root", Stdout: &out, Stderr: &errOut})
	if err != nil || code != 0 {
		t.Fatalf("sandbox %s: %q: exit %d, %v: %s%s", sb.ID, cmd, code, err, out.String(), errOut.String())
	}
	return out.String()
}

// procStartTime returns field 22 of /proc/<pid>/stat inside sb: with the
// pid, it names one process.
func procStartTime(t *testing.T, sb *client.Sandbox, pid string) string {
	t.Helper()
	stat := run(t, sb, "cat /proc/"+pid+"/stat")
	f := strings.Fields(stat[strings.LastIndexByte(stat, ')')+1:])
	if len(f) < 20 {
		t.Fatalf("sandbox %s: /proc/%s/stat: %q", sb.ID, pid, stat)
	}
	return f[19]
}

// listed returns the IDs of the running sandboxes tagged tag, sorted.
func listed(t *testing.T, c *client.Client, tag string) []string {
	t.Helper()
	infos, _, err := c.ListSandboxes(t.Context(), client.ListOptions{Metadata: map[string]string{"recoveryTest": tag}})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, in := range infos {
		if in.State != client.StateRunning {
			t.Errorf("sandbox %s is %s, want running", in.ID, in.State)
		}
		out = append(out, in.ID)
	}
	slices.Sort(out)
	return out
}

// freeAddr returns a loopback address nothing listens on now; it is kept
// across restarts, as a client's configuration would be.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
