package sandbox

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/agent-sandbox/agent-sandbox/gen/process"
	"github.com/agent-sandbox/agent-sandbox/gen/process/processconnect"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/jail"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/jail/jailtest"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
)

// TestMain lets the test binary serve as the jail's re-executed init and
// as the probe of TestHostBoundary.
func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == "probe" {
		os.Exit(probeMain(os.Args[1:]))
	}
	jail.ExitIfInit()
	os.Exit(m.Run())
}

// TestJail drives a real jail sandbox through the manager: create, run a
// command through Dial, pause/resume with a process kept, adoption by a
// new manager, and kill.
func TestJail(t *testing.T) {
	ctx := context.Background()
	cfg, backend, st := jailConfig(t, nil)
	newManager := func() *Manager {
		m, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Start(ctx); err != nil {
			t.Fatal(err)
		}
		return m
	}
	m := newManager()
	defer func() { m.Close() }()

	t0 := time.Now()
	sb, err := m.Create(ctx, CreateRequest{
		Template: "tiny", Timeout: time.Minute, Secure: true,
		EnvVars: map[string]string{"FOO": "bar"},
	})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Logf("Create took %v", time.Since(t0))
	t.Cleanup(func() { _ = backend.Cleanup(context.Background(), sb.ID, nil) })

	out, code := runIn(t, m, sb, "/bin/sh", "-c", `echo hi; echo "$FOO"; pwd; id -u`)
	if code != 0 || out != "hi\nbar\n/home/user\n1000\n" {
		t.Errorf("command: exit %d, output %q", code, out)
	}

	// A process survives pause and resume with its pid.
	pid := startIn(t, m, sb, "/bin/sleep", "3600")
	if err := m.Pause(ctx, sb.ID, true); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	if _, err := m.Dial(ctx, sb.ID, EnvdPort); err == nil {
		t.Error("Dial succeeded while paused")
	}
	if _, resumed, err := m.Connect(ctx, sb.ID, time.Minute, false); err != nil || !resumed {
		t.Fatalf("Connect = %v, %v", resumed, err)
	}
	if pids := listPids(t, m, sb); !slices.Contains(pids, pid) {
		t.Errorf("sleep pid %d gone after resume; processes %v", pid, pids)
	}

	// A new manager adopts the running sandbox.
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	m = newManager()
	if pids := listPids(t, m, sb); !slices.Contains(pids, pid) {
		t.Errorf("sleep pid %d gone after adoption; processes %v", pid, pids)
	}

	inst := live(t, m, sb.ID)
	if err := m.Kill(ctx, sb.ID); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	// Kill returns once nothing in the sandbox runs; the rest of its
	// teardown follows in the background.
	select {
	case <-inst.Done():
	default:
		t.Error("the sandbox's init runs after Kill returned")
	}
	if _, err := m.Dial(ctx, sb.ID, EnvdPort); err == nil {
		t.Error("Dial succeeded after kill")
	}
	if r, _ := st.GetSandbox(ctx, sb.ID); r.State != store.StateKilled {
		t.Errorf("state after kill %s", r.State)
	}
	waitFor(t, 10*time.Second, "the sandbox torn down after kill", func() bool {
		ids, _ := backend.Leftovers(nil)
		return !slices.Contains(ids, sb.ID)
	})
	if mi, _ := os.ReadFile("/proc/self/mountinfo"); bytes.Contains(mi, []byte(sb.ID)) {
		t.Error("mounts of the sandbox left after kill")
	}
}

// live returns the instance of live sandbox id.
func live(t *testing.T, m *Manager, id string) isolation.Instance {
	t.Helper()
	sb, err := m.lookup(id)
	if err != nil {
		t.Fatal(err)
	}
	return sb.instance()
}

// TestJailKilledLeftover: a server that crashed after a kill recorded and
// halted the sandbox, before its teardown in the background, leaves the
// sandbox's network, cgroup and disk, which the next start cleans up.
func TestJailKilledLeftover(t *testing.T) {
	ctx := context.Background()
	cfg, backend, st := jailConfig(t, nil)
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	sb, err := m.Create(ctx, CreateRequest{Template: "tiny", Timeout: time.Minute})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() { _ = backend.Cleanup(context.Background(), sb.ID, nil) })
	// What Kill does before it returns, and then the crash.
	if err := st.SetState(ctx, sb.ID, store.StateKilled, store.ReasonKilled); err != nil {
		t.Fatal(err)
	}
	s, err := m.lookup(sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.state = store.StateKilled // so that its watch leaves its death alone
	s.mu.Unlock()
	if err := s.instance().(isolation.Halter).Halt(ctx); err != nil {
		t.Fatalf("Halt: %v", err)
	}
	crash(m)
	if ids, _ := backend.Leftovers(nil); !slices.Contains(ids, sb.ID) {
		t.Fatalf("leftovers after the crash: %v, want %s among them", ids, sb.ID)
	}

	m, err = New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if ids, _ := backend.Leftovers(nil); slices.Contains(ids, sb.ID) {
		t.Errorf("leftovers after the restart: %v", ids)
	}
	if mi, _ := os.ReadFile("/proc/self/mountinfo"); bytes.Contains(mi, []byte(sb.ID)) {
		t.Error("mounts of the sandbox left after the restart")
	}
	if r, _ := st.GetSandbox(ctx, sb.ID); r.State != store.StateKilled || r.Reason != store.ReasonKilled {
		t.Errorf("record after the restart: %s (%q), want killed as the kill recorded it", r.State, r.Reason)
	}
}

// processClient talks to envd in sb through m.Dial.
func processClient(m *Manager, sb store.Sandbox) processconnect.ProcessClient {
	return processClientVia(func(ctx context.Context, port int) (net.Conn, error) { return m.Dial(ctx, sb.ID, port) })
}

// processClientVia talks to envd over connections from dial.
func processClientVia(dial func(ctx context.Context, port int) (net.Conn, error)) processconnect.ProcessClient {
	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dial(ctx, EnvdPort)
		},
	}}
	return processconnect.NewProcessClient(hc, "http://envd", connect.WithProtoJSON())
}

func withToken[T any](sb store.Sandbox, msg *T) *connect.Request[T] {
	return withTokenOf(sb.EnvdAccessToken, msg)
}

func withTokenOf[T any](token string, msg *T) *connect.Request[T] {
	req := connect.NewRequest(msg)
	req.Header().Set("X-Access-Token", token)
	return req
}

// runIn runs a command as the default user and returns its stdout and exit code.
func runIn(t *testing.T, m *Manager, sb store.Sandbox, cmd string, args ...string) (string, int) {
	t.Helper()
	return runVia(t, processClient(m, sb), sb.EnvdAccessToken, cmd, args...)
}

// runVia runs a command through client, presenting token.
func runVia(t *testing.T, client processconnect.ProcessClient, token string, cmd string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stream, err := client.Start(ctx, withTokenOf(token, &process.StartRequest{Process: &process.ProcessConfig{Cmd: cmd, Args: args}}))
	if err != nil {
		t.Fatalf("starting %s: %v", cmd, err)
	}
	defer stream.Close()
	var out strings.Builder
	code := -1
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		out.Write(ev.GetData().GetStdout())
		if e := ev.GetEnd(); e != nil {
			code = int(e.GetExitCode())
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("running %s: %v", cmd, err)
	}
	return out.String(), code
}

// startIn starts a command, returns its pid and leaves it running.
func startIn(t *testing.T, m *Manager, sb store.Sandbox, cmd string, args ...string) uint32 {
	t.Helper()
	stream, err := processClient(m, sb).Start(context.Background(), withToken(sb, &process.StartRequest{Process: &process.ProcessConfig{Cmd: cmd, Args: args}}))
	if err != nil {
		t.Fatalf("starting %s: %v", cmd, err)
	}
	defer stream.Close()
	if !stream.Receive() {
		t.Fatalf("starting %s: %v", cmd, stream.Err())
	}
	pid := stream.Msg().GetEvent().GetStart().GetPid()
	if pid == 0 {
		t.Fatalf("starting %s: first event %v", cmd, stream.Msg())
	}
	return pid
}

func listPids(t *testing.T, m *Manager, sb store.Sandbox) []uint32 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := processClient(m, sb).List(ctx, withToken(sb, &process.ListRequest{}))
	if err != nil {
		t.Fatalf("listing processes: %v", err)
	}
	var pids []uint32
	for _, p := range resp.Msg.GetProcesses() {
		pids = append(pids, p.GetPid())
	}
	return pids
}

func testEnvd(t *testing.T, dir string) string {
	t.Helper()
	p, err := jailtest.BuildEnvd(dir)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
