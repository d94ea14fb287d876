package servertest

import (
	"bufio"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/client"
	"github.com/agent-sandbox/agent-sandbox/internal/hostlock"
	"github.com/agent-sandbox/agent-sandbox/internal/template"
)

// Build builds agent-sandbox, envd and codeinterp from this tree into a
// temporary directory (serve finds the other two beside itself) and
// returns the server's path.
func Build(t *testing.T) string {
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

// DataDirWithBase makes a server's data directory and seeds it with hard
// links to the base template the SDK suite built (as make bench-smoke
// does), so that serve does not debootstrap it again; without one, serve
// builds it (minutes). The directory sits beside the SDK suite's
// ($AGENT_SANDBOX_TEST_DATA_DIR), on its filesystem, and is removed when
// the test ends unless something is still mounted in it.
func DataDirWithBase(t *testing.T) string {
	t.Helper()
	sdkDir := cmp.Or(os.Getenv("AGENT_SANDBOX_TEST_DATA_DIR"), "/var/lib/agent-sandbox-sdk-test")
	dir, err := os.MkdirTemp(filepath.Dir(sdkDir), "agent-sandbox-servertest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if ms := MountsMentioning(t, dir); len(ms) > 0 {
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

// MountsMentioning returns the host mounts whose mount point or source
// contains s.
func MountsMentioning(t *testing.T, s string) []string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var ms []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.Contains(sc.Text(), s) {
			ms = append(ms, sc.Text())
		}
	}
	return ms
}

// WaitHostLock returns once nobody holds the host lock, which serve takes.
func WaitHostLock(t *testing.T) {
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

// Server is one agent-sandbox serve process at a time on the test's data
// dir, started and ended by PID.
type Server struct {
	t       *testing.T
	bin     string
	flags   []string // serve's flags besides --listen, --data-dir, --api-key
	DataDir string
	APIKey  string
	Listen  string // kept across restarts, as a client's configuration would be
	// Wrap is a command serve runs under, its arguments followed by
	// serve's (e.g. one entering a stand-in host's namespaces); it must
	// exec serve, so that the PID started is serve's. Empty: none.
	Wrap []string
	// Made are the IDs of the sandboxes Create made, killed by the
	// teardown of a failed test.
	Made    []string
	starts  int
	stopped bool // Stop saw the last server exit

	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	log  string        // the current process's output file
}

// New prepares a server built from this tree, with a data dir of its own
// and serve's flags besides --listen, --data-dir and --api-key; the caller
// starts it. Should the test end before Stop, or fail (a sandbox may run
// on), teardown removes what is left.
func New(t *testing.T, flags ...string) *Server {
	s := &Server{t: t, bin: Build(t), flags: flags, DataDir: DataDirWithBase(t), APIKey: "e2b_" + RandomHex(t, 20), Listen: FreeAddr(t)}
	t.Cleanup(func() {
		left := s.sandboxesLeft()
		if s.stopped && len(left) > 0 {
			t.Logf("serve stopped with sandboxes %v still on the host; its warnings and errors:\n%s", left, s.complaints())
		}
		if !s.stopped || t.Failed() || len(left) > 0 {
			s.teardown(left)
		}
	})
	return s
}

// backendStateDirs are the data dir's directories in which a backend keeps
// a directory per sandbox on the host (internal/server's backend configs).
var backendStateDirs = []string{"sandboxes", "gvisor", "vms"}

// sandboxesLeft returns the sandboxes whose backend state is still in the
// data dir: running ones a stopped server leaves for the next to adopt,
// or ones whose teardown did not finish.
func (s *Server) sandboxesLeft() []string {
	var left []string
	for _, d := range backendStateDirs {
		entries, _ := os.ReadDir(filepath.Join(s.DataDir, d))
		for _, e := range entries {
			// Dot entries are a backend's own (gvisor's .lib, .probe).
			if !strings.HasPrefix(e.Name(), ".") {
				left = append(left, d+"/"+e.Name())
			}
		}
	}
	return left
}

// complaints returns the current server output's lines at level WARN or
// ERROR.
func (s *Server) complaints() string {
	var b strings.Builder
	for line := range strings.Lines(string(s.Output())) {
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
			b.WriteString(line)
		}
	}
	return b.String()
}

// Create creates a sandbox with opts and remembers it for teardown.
func (s *Server) Create(opts client.CreateOptions) *client.Sandbox {
	s.t.Helper()
	sb, err := s.Client().CreateSandbox(s.t.Context(), opts)
	if err != nil {
		s.t.Fatalf("creating sandbox %d: %v", len(s.Made), err)
	}
	s.Made = append(s.Made, sb.ID)
	return sb
}

// startTimeout covers a serve that must build the base template first.
const startTimeout = 20 * time.Minute

// Start starts serve and waits for GET /health to answer 204. serve
// refuses to start while another holds the host lock (a root test or a
// server), so it waits for the lock and tries again.
func (s *Server) Start() {
	t := s.t
	t.Helper()
	deadline := time.Now().Add(startTimeout)
	for {
		WaitHostLock(t)
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
		if s.Running() {
			s.Kill9()
		}
		t.Fatalf("serve (pid %d): %v\n--- its output ---\n%s", s.cmd.Process.Pid, err, Tail(out, 64<<10))
	}
}

var errExited = errors.New("serve exited")

func (s *Server) spawn() {
	t := s.t
	t.Helper()
	s.starts++
	s.log = filepath.Join(t.TempDir(), fmt.Sprintf("serve-%d.log", s.starts))
	out, err := os.Create(s.log)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	args := slices.Concat(s.Wrap, []string{s.bin, "serve", "--listen", s.Listen, "--data-dir", s.DataDir, "--api-key", s.APIKey}, s.flags)
	s.cmd = exec.Command(args[0], args[1:]...)
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
	t.Logf("started serve, pid %d, on %s (output %s)", s.cmd.Process.Pid, s.Listen, s.log)
}

func (s *Server) waitHealthy(deadline time.Time) error {
	hc := &http.Client{Timeout: time.Second}
	for {
		select {
		case <-s.done:
			return fmt.Errorf("%w before it was healthy: %v", errExited, s.cmd.ProcessState)
		default:
		}
		if res, err := hc.Get("http://" + s.Listen + "/health"); err == nil {
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

// Running says whether the last server started is still up.
func (s *Server) Running() bool {
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

// Kill9 sends the server SIGKILL by its PID and waits for it to die.
func (s *Server) Kill9() {
	s.t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		s.t.Fatalf("SIGKILL to serve (pid %d): %v", s.cmd.Process.Pid, err)
	}
	<-s.done
}

// Stop ends the server as an operator does (SIGTERM) and checks it exits
// cleanly; past a grace period it is killed.
func (s *Server) Stop() {
	t := s.t
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM to serve (pid %d): %v", s.cmd.Process.Pid, err)
	}
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		s.Kill9()
		t.Fatalf("serve (pid %d) did not stop within 30 s of SIGTERM", s.cmd.Process.Pid)
	}
	s.stopped = true
	if !s.cmd.ProcessState.Success() {
		out, _ := os.ReadFile(s.log)
		t.Errorf("serve (pid %d) ended with %v\n--- its output ---\n%s", s.cmd.Process.Pid, s.cmd.ProcessState, Tail(out, 16<<10))
	}
}

// teardown runs when the test stopped half-way or failed, or sandboxes
// are left on the host: a server (restarted if it is down, so that it
// adopts or cleans up what is left) kills every sandbox of the data dir,
// and stops.
func (s *Server) teardown(onHost []string) {
	t := s.t
	if len(s.Made) == 0 && len(onHost) == 0 && !s.Running() {
		return
	}
	if !s.Running() {
		t.Logf("cleaning up: restarting serve so that it reconciles %v", slices.Concat(s.Made, onHost))
		s.Start()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := s.Client()
	left, _, err := c.ListSandboxes(ctx, client.ListOptions{})
	if err != nil {
		t.Errorf("cleaning up: %v", err)
	}
	for _, sb := range left {
		if err := c.KillSandbox(ctx, sb.ID); err != nil {
			t.Errorf("cleaning up: killing %s: %v", sb.ID, err)
		}
	}
	s.Stop()
}

// Output is what the current server process wrote so far.
func (s *Server) Output() []byte {
	out, _ := os.ReadFile(s.log)
	return out
}

// LogLine returns the first line of the current server's output that
// contains every one of texts.
func (s *Server) LogLine(texts ...string) string {
	for line := range strings.Lines(string(s.Output())) {
		if !slices.ContainsFunc(texts, func(text string) bool { return !strings.Contains(line, text) }) {
			return strings.TrimSpace(line)
		}
	}
	return fmt.Sprintf("(no line with %q)", texts)
}

// Client is an E2B client of the server, with its API key.
func (s *Server) Client() *client.Client {
	url := "http://" + s.Listen
	c, err := client.New(client.Config{APIURL: url, SandboxURL: url, Domain: s.Listen, APIKey: s.APIKey})
	if err != nil {
		s.t.Fatal(err)
	}
	return c
}

// FreeAddr returns a loopback address nothing listens on now.
func FreeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// RandomHex is n random bytes in hex.
func RandomHex(t *testing.T, n int) string {
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

// Tail is the last n bytes of b.
func Tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
