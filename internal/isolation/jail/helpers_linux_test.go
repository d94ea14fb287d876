package jail

import (
	"cmp"
	"context"
	"encoding/base64"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/agent-sandbox/agent-sandbox/gen/process"
	"github.com/agent-sandbox/agent-sandbox/gen/process/processconnect"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/disk"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/isolationtest"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/jail/jailtest"
	"github.com/agent-sandbox/agent-sandbox/internal/network"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
)

func TestMain(m *testing.M) {
	ExitIfInit()
	if filepath.Base(os.Args[0]) == "probe" {
		os.Exit(probeMain(os.Args[1:]))
	}
	var err error
	scratch, err = os.MkdirTemp("", "jailtest")
	if err != nil {
		panic(err)
	}
	code := m.Run()
	jailtest.Release(filepath.Join(scratch, "run"), testCgroupParent)
	if err := os.RemoveAll(scratch); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}

var testCgroupParent = fmt.Sprintf("agent-sandbox-test-%d", os.Getpid())

func newTestBackend(t testing.TB, mod func(*Config)) *Backend {
	t.Helper()
	testenv.RequireRoot(t)
	cfg := Config{
		StateDir:     filepath.Join(scratch, "sandboxes"),
		RunDir:       filepath.Join(scratch, "run"),
		Log:          slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})),
		CgroupParent: testCgroupParent,
	}
	if mod != nil {
		mod(&cfg)
	}
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var idSeq int

// The quotas testSpec gives where res leaves them zero (the manager fills
// them in a server).
const (
	testCPUCount = 2
	testMemoryMB = 512
	testDiskMB   = 1024
)

func testSpec(t testing.TB, res isolation.Resources) isolation.Spec {
	idSeq++
	res.CPUCount = cmp.Or(res.CPUCount, testCPUCount)
	res.MemoryMB = cmp.Or(res.MemoryMB, testMemoryMB)
	res.DiskSizeMB = cmp.Or(res.DiskSizeMB, testDiskMB)
	return isolation.Spec{
		ID:        fmt.Sprintf("t%d-%d", os.Getpid(), idSeq),
		RootFS:    testRootfs(t),
		EnvdPath:  testEnvd(t),
		Hostname:  "sbx-test",
		Resources: res,
	}
}

// startSandbox starts spec, waits for envd as the manager does, and stops
// the sandbox when the test ends.
func startSandbox(t *testing.T, b *Backend, spec isolation.Spec) *Instance {
	t.Helper()
	return isolationtest.Start(t, b, spec, 20*time.Second, nil).(*Instance)
}

type result struct {
	stdout, stderr string
	exit           int
}

// run runs a command through envd's process API as user.
func run(t *testing.T, inst isolation.Instance, user string, name string, args ...string) result {
	t.Helper()
	return runAs(t, inst, user, "", name, args...)
}

// runWithToken runs a command as root, presenting envd's access token.
func runWithToken(t *testing.T, inst isolation.Instance, token string, name string, args ...string) result {
	t.Helper()
	return runAs(t, inst, "root", token, name, args...)
}

func runAs(t *testing.T, inst isolation.Instance, user, token string, name string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := processconnect.NewProcessClient(envdHTTPClient(inst), "http://envd", connect.WithProtoJSON())
	req := connect.NewRequest(&process.StartRequest{Process: &process.ProcessConfig{Cmd: name, Args: args}})
	req.Header().Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":")))
	if token != "" {
		req.Header().Set("X-Access-Token", token)
	}
	stream, err := client.Start(ctx, req)
	if err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	defer stream.Close()
	var res result
	var out, errb strings.Builder
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if d := ev.GetData(); d != nil {
			out.Write(d.GetStdout())
			errb.Write(d.GetStderr())
		}
		if e := ev.GetEnd(); e != nil {
			res.exit = int(e.GetExitCode())
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("running %s: %v", name, err)
	}
	res.stdout, res.stderr = out.String(), errb.String()
	return res
}

// sh runs a shell command as root and fails the test unless it exits 0.
func sh(t *testing.T, inst isolation.Instance, script string) string {
	t.Helper()
	r := run(t, inst, "root", "/bin/sh", "-c", script)
	if r.exit != 0 {
		t.Fatalf("%q exited %d: %s%s", script, r.exit, r.stdout, r.stderr)
	}
	return r.stdout
}

func envdHTTPClient(inst isolation.Instance) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return inst.Dial(ctx, isolation.EnvdPort)
		},
	}}
}

// assertGone checks that nothing of sandbox id is left on the host.
func assertGone(t *testing.T, b *Backend, id string) {
	t.Helper()
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mi), id) {
		t.Errorf("mountinfo still mentions %s", id)
	}
	if _, err := os.Lstat(filepath.Join(network.Dir(b.cfg.RunDir), id)); err == nil {
		t.Errorf("netns file of %s left", id)
	}
	for _, d := range jailtest.CgroupParentDirs(b.cfg.CgroupParent) {
		if _, err := os.Lstat(filepath.Join(d, id)); err == nil {
			t.Errorf("cgroup %s/%s left", d, id)
		}
	}
	if _, err := os.Lstat(b.dir(id)); err == nil {
		t.Errorf("sandbox dir of %s left", id)
	}
	deadline := time.Now().Add(3 * time.Second)
	for {
		loops, _ := disk.LoopsBackedBy(filepath.Join(b.dir(id), diskFile))
		if len(loops) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("loop devices still attached: %v", loops)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if ids, _ := b.Leftovers(nil); containsStr(ids, id) {
		t.Errorf("Leftovers still lists %s", id)
	}
}

func containsStr(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func killPid(pid int) error { return unix.Kill(pid, unix.SIGKILL) }

func fmtSscanf(s, format string, args ...any) (int, error) { return fmt.Sscanf(s, format, args...) }
