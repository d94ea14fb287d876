// Package isolationtest runs commands in a real sandbox of any backend
// through envd's process API, for the backends' tests. It is imported
// only by tests, so it never ships in a binary.
package isolationtest

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/agent-sandbox/agent-sandbox/gen/process"
	"github.com/agent-sandbox/agent-sandbox/gen/process/processconnect"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
)

// Result is how a command ended.
type Result struct {
	Stdout, Stderr string
	Exit           int
}

// Run runs name with args through envd as user, presenting token if it
// is set, and fails the test if envd cannot run it.
func Run(t testing.TB, inst isolation.Instance, user, token, name string, args ...string) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := RunContext(ctx, inst, user, token, name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// RunContext is Run for a command that may not return: it reports what
// went wrong instead of failing the test.
func RunContext(ctx context.Context, inst isolation.Instance, user, token, name string, args ...string) (Result, error) {
	client := processconnect.NewProcessClient(EnvdClient(inst), "http://envd", connect.WithProtoJSON())
	req := connect.NewRequest(&process.StartRequest{Process: &process.ProcessConfig{Cmd: name, Args: args}})
	req.Header().Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":")))
	if token != "" {
		req.Header().Set("X-Access-Token", token)
	}
	stream, err := client.Start(ctx, req)
	if err != nil {
		return Result{}, fmt.Errorf("starting %s: %w", name, err)
	}
	defer stream.Close()
	var res Result
	var out, errb strings.Builder
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if d := ev.GetData(); d != nil {
			out.Write(d.GetStdout())
			errb.Write(d.GetStderr())
		}
		if e := ev.GetEnd(); e != nil {
			res.Exit = int(e.GetExitCode())
		}
	}
	res.Stdout, res.Stderr = out.String(), errb.String()
	if err := stream.Err(); err != nil {
		return res, fmt.Errorf("running %s: %w", name, err)
	}
	return res, nil
}

// Sh runs a shell command as root (with token, if set) and fails the
// test unless it exits 0.
func Sh(t testing.TB, inst isolation.Instance, token, script string) string {
	t.Helper()
	r := Run(t, inst, "root", token, "/bin/sh", "-c", script)
	if r.Exit != 0 {
		t.Fatalf("%q exited %d: %s%s", script, r.Exit, r.Stdout, r.Stderr)
	}
	return r.Stdout
}

// EnvdClient is an HTTP client whose every connection goes to the
// sandbox's envd through Instance.Dial, as the server's do.
func EnvdClient(inst isolation.Instance) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return inst.Dial(ctx, isolation.EnvdPort)
		},
	}}
}

// Start starts spec on b within timeout, waits for envd as the manager
// does, and stops the sandbox when the test ends. When envd does not
// answer, the test fails with detail(inst) (what the backend can say of
// the sandbox: its log, its console), if detail is set.
func Start(t testing.TB, b isolation.Backend, spec isolation.Spec, timeout time.Duration, detail func(isolation.Instance) string) isolation.Instance {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	t0 := time.Now()
	inst, err := b.Start(ctx, spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := inst.Stop(context.Background()); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	t1 := time.Now()
	if err := isolation.WaitEnvd(ctx, inst); err != nil {
		more := ""
		if detail != nil {
			more = detail(inst)
		}
		t.Fatalf("waiting for envd: %v%s", err, more)
	}
	t.Logf("Start took %v, envd ready %v later", t1.Sub(t0), time.Since(t1))
	return inst
}
