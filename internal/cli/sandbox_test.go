package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/client"
)

// setup starts a fake server with sandboxes sb1 (newest) and sb2, and
// points the environment at it the way serve's printout would: only
// E2B_API_URL and E2B_API_KEY.
func setup(t *testing.T) *fakeServer {
	t.Helper()
	clearEnv(t)
	f, ts := newFakeServer(t)
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f.add("sb1", "base", "running", start)
	f.add("sb2", "tmpl2", "paused", start.Add(-time.Hour))
	t.Setenv("E2B_API_URL", ts.URL)
	t.Setenv("E2B_API_KEY", testKey)
	return f
}

func TestSandboxList(t *testing.T) {
	f := setup(t)
	res := runCLI(t, "", "sandbox", "list")
	if res.err != nil {
		t.Fatal(res.err)
	}
	want := `ID   TEMPLATE  STATE    STARTED               ENDS                  CPU  MEM
sb1  base      running  2026-01-02T03:04:05Z  2026-01-02T03:09:05Z  2    512MiB
sb2  tmpl2     paused   2026-01-02T02:04:05Z  2026-01-02T02:09:05Z  2    512MiB
`
	if res.stdout != want {
		t.Errorf("sandbox list:\n%s\nwant:\n%s", res.stdout, want)
	}

	res = runCLI(t, "", "sandbox", "list", "--json", "--state", "running,paused", "--metadata", "sandbox Id=x&y=z")
	if res.err != nil {
		t.Fatal(res.err)
	}
	var got []client.SandboxInfo
	if err := json.Unmarshal([]byte(res.stdout), &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].ID != "sb1" || got[1].State != client.StatePaused || got[0].Metadata["owner"] != "sb1" {
		t.Errorf("sandbox list --json = %+v", got)
	}
	if q, want := f.lastQuery(), "metadata=sandbox%252520Id%3Dx%252526y%25253Dz&state=running,paused&nextToken=1"; q != want {
		t.Errorf("list query = %q, want %q", q, want)
	}

	// Flags win over the environment.
	res = runCLI(t, "", "sandbox", "list", "--api-key", "e2b_wrong")
	if res.err == nil || !strings.Contains(res.err.Error(), "401: Invalid API key (check E2B_API_KEY or --api-key)") {
		t.Errorf("wrong key: %v", res.err)
	}
}

func TestSandboxKill(t *testing.T) {
	setup(t)
	res := runCLI(t, "", "sandbox", "kill", "sb2", "nope")
	if res.err == nil || !strings.Contains(res.err.Error(), "1 of 2 sandboxes not killed") {
		t.Errorf("kill: %v", res.err)
	}
	if res.stdout != "sb2\n" || !strings.Contains(res.stderr, "sandbox nope not found") {
		t.Errorf("kill: stdout %q, stderr %q", res.stdout, res.stderr)
	}
	res = runCLI(t, "", "sandbox", "list", "--json")
	if strings.Contains(res.stdout, "sb2") {
		t.Errorf("sb2 listed after kill: %s", res.stdout)
	}
}

func TestSandboxExec(t *testing.T) {
	setup(t)
	me := currentUser(t)
	tests := []struct {
		name       string
		stdin      string
		args       []string
		wantStdout string
		wantStderr string
		wantCode   int
	}{
		{name: "script", args: []string{"sb1", "echo out; echo err >&2"}, wantStdout: "out\n", wantStderr: "err\n"},
		{name: "argv", args: []string{"sb1", "--", "printf", "%s|", "a b", "$HOME"}, wantStdout: "a b|$HOME|"},
		{name: "exit code", args: []string{"sb1", "exit 7"}, wantCode: 7},
		{name: "killed", args: []string{"sb1", "kill -9 $$"}, wantCode: 255},
		{name: "flags", args: []string{"--cwd", "/tmp", "--env", "A=1", "--user", me, "sb1", `echo "$PWD $A $(id -un)"`},
			wantStdout: "/tmp 1 " + me + "\n"},
		{name: "stdin", stdin: "hello\n", args: []string{"--stdin", "sb1", "tr a-z A-Z"}, wantStdout: "HELLO\n"},
		{name: "no stdin without --stdin", stdin: "hello\n", args: []string{"sb1", "cat; echo end"}, wantStdout: "end\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := runCLI(t, tt.stdin, append([]string{"sandbox", "exec"}, tt.args...)...)
			code := 0
			var exit *ExitError
			if errors.As(res.err, &exit) {
				code = exit.Code
			} else if res.err != nil {
				t.Fatal(res.err)
			}
			if code != tt.wantCode {
				t.Errorf("exit code = %d, want %d", code, tt.wantCode)
			}
			if res.stdout != tt.wantStdout {
				t.Errorf("stdout = %q, want %q", res.stdout, tt.wantStdout)
			}
			if !strings.Contains(res.stderr, tt.wantStderr) {
				t.Errorf("stderr = %q, want it to contain %q", res.stderr, tt.wantStderr)
			}
		})
	}

	res := runCLI(t, "", "sandbox", "exec", "nope", "true")
	if res.err == nil || !strings.Contains(res.err.Error(), `sandbox "nope" not found`) {
		t.Errorf("exec in an unknown sandbox: %v", res.err)
	}
}

func TestShell(t *testing.T) {
	setup(t)
	c, err := (&serverFlags{}).client()
	if err != nil {
		t.Fatal(err)
	}
	sb, err := c.Connect(t.Context(), "sb1", client.ConnectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	// The input stays open after the commands, as a terminal does.
	in := &slowReader{ctx: ctx, data: strings.NewReader("stty size; echo $((6*7)); exit 5\n")}
	resized := make(chan struct{}, 1)
	resized <- struct{}{}
	var out bytes.Buffer
	code, err := shell(t.Context(), sb, client.PTYOptions{Cols: 80, Rows: 24}, in, &out, resized,
		func() (int, int, error) { return 120, 40, nil })
	if err != nil {
		t.Fatal(err)
	}
	if code != 5 {
		t.Errorf("exit code = %d, want 5", code)
	}
	// The resize races the first command; the shell must report one of
	// the two sizes, and the output the command's.
	if !strings.Contains(out.String(), "42\r\n") || !(strings.Contains(out.String(), "40 120\r\n") || strings.Contains(out.String(), "24 80\r\n")) {
		t.Errorf("output = %q", out.String())
	}
}

func TestSandboxAudit(t *testing.T) {
	setup(t)
	res := runCLI(t, "", "sandbox", "audit", "sb1")
	if res.err != nil {
		t.Fatal(res.err)
	}
	want := `TIME          KIND          VERDICT  NAME      ADDRESS      PORT  RULE
03:04:05.000  dns/A         allowed  pypi.org  198.18.0.10  -     ceiling:pypi.org
03:04:06.000  firewall/udp  denied   -         198.18.0.20  9999  firewall:default
`
	if res.stdout != want {
		t.Errorf("sandbox audit:\n%s\nwant:\n%s", res.stdout, want)
	}
	res = runCLI(t, "", "sandbox", "audit", "--denied", "--json", "sb1")
	var ev client.EgressEvent
	if res.err != nil || json.Unmarshal([]byte(res.stdout), &ev) != nil || ev.Seq != 2 || ev.Proto != "udp" || ev.Allowed {
		t.Errorf("audit --denied --json: %v, %q", res.err, res.stdout)
	}
	res = runCLI(t, "", "sandbox", "audit", "nope")
	if res.err == nil || !strings.Contains(res.err.Error(), `sandbox "nope" not found`) {
		t.Errorf("unknown sandbox: %v", res.err)
	}
	if res := runCLI(t, "", "sandbox", "audit"); res.err == nil {
		t.Error("audit without an ID succeeded")
	}
}

func TestSandboxNetwork(t *testing.T) {
	f := setup(t)
	res := runCLI(t, "", "sandbox", "network", "--allow-out", "pypi.org,1.2.3.0/24", "--deny-out", "*.evil.test", "--no-internet", "sb1")
	if res.err != nil {
		t.Fatal(res.err)
	}
	res = runCLI(t, "", "sandbox", "network", "sb1")
	if res.err != nil {
		t.Fatal(res.err)
	}
	want := []string{
		`{"allowOut":["pypi.org","1.2.3.0/24"],"denyOut":["*.evil.test"],"allow_internet_access":false}`,
		"{}",
	}
	f.mu.Lock()
	got := f.networkBodies
	f.mu.Unlock()
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("PUT bodies %q, want %q", got, want)
	}
	if res := runCLI(t, "", "sandbox", "network", "nope"); res.err == nil {
		t.Error("updating an unknown sandbox succeeded")
	}
}
