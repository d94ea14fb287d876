package process

import (
	"context"
	"os"
	"os/user"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	pb "github.com/agent-sandbox/agent-sandbox/gen/process"
	"github.com/agent-sandbox/agent-sandbox/internal/envd/identity"
	"github.com/agent-sandbox/agent-sandbox/internal/envd/state"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
)

func TestStartEvents(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	tests := []struct {
		name       string
		req        *pb.StartRequest
		wantStdout string
		wantStderr string
		wantEnd    *pb.ProcessEvent_EndEvent
	}{
		{
			name:       "success",
			req:        sh("echo hi"),
			wantStdout: "hi\n",
			wantEnd:    &pb.ProcessEvent_EndEvent{ExitCode: 0, Exited: true, Status: "exit status 0"},
		},
		{
			name:       "stderr and failure",
			req:        sh("echo oops >&2; exit 1"),
			wantStderr: "oops\n",
			wantEnd:    &pb.ProcessEvent_EndEvent{ExitCode: 1, Exited: true, Status: "exit status 1", Error: ptr("exit status 1")},
		},
		{
			name:    "killed by a signal",
			req:     sh("kill -KILL $$"),
			wantEnd: &pb.ProcessEvent_EndEvent{ExitCode: -1, Exited: false, Status: "signal: killed", Error: ptr("signal: killed")},
		},
		{
			name:       "command found in PATH, args verbatim",
			req:        startReq("printf", "%s|", "a b", "*", "$HOME"),
			wantStdout: "a b|*|$HOME|",
			wantEnd:    &pb.ProcessEvent_EndEvent{ExitCode: 0, Exited: true, Status: "exit status 0"},
		},
		{
			name:       "output after the last byte of the pipe buffer is kept",
			req:        sh("head -c 300000 /dev/zero | tr '\\0' x; echo; echo end"),
			wantStdout: strings.Repeat("x", 300000) + "\nend\n",
			wantEnd:    &pb.ProcessEvent_EndEvent{ExitCode: 0, Exited: true, Status: "exit status 0"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := h.run(t, tt.req)
			if got.pid == 0 {
				t.Error("start event has pid 0")
			}
			if got.stdout != tt.wantStdout || got.stderr != tt.wantStderr {
				t.Errorf("stdout, stderr = %.80q, %.80q; want %.80q, %.80q", got.stdout, got.stderr, tt.wantStdout, tt.wantStderr)
			}
			if diff := cmp.Diff(tt.wantEnd, got.end, protocmp.Transform()); diff != "" {
				t.Errorf("end event (-want +got):\n%s", diff)
			}
			if got.maxPipe > 32<<10 {
				t.Errorf("largest data event is %d bytes, want at most 32 KiB", got.maxPipe)
			}
			if alive(got.pid) {
				t.Errorf("process %d still exists after its end event (not reaped)", got.pid)
			}
		})
	}
}

func TestStartPidIsTheCommand(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	// No wrapper: $$ of the shell is the pid the start event reports.
	got := h.run(t, sh("echo $$"))
	if want := strconv.Itoa(int(got.pid)) + "\n"; got.stdout != want {
		t.Errorf("command's own pid = %q, start event pid = %q", got.stdout, want)
	}
}

func TestStartErrors(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	me, err := identity.Lookup(h.state.DefaultUser())
	if err != nil {
		t.Fatal(err)
	}
	file, err := os.CreateTemp(t.TempDir(), "file")
	if err != nil {
		t.Fatal(err)
	}
	file.Close()
	withCwd := func(cwd string) *pb.StartRequest {
		r := sh("true")
		r.Process.Cwd = &cwd
		return r
	}
	tests := []struct {
		name    string
		req     *pb.StartRequest
		header  map[string]string
		code    connect.Code
		message string
	}{
		{
			name:    "unknown user",
			req:     sh("true"),
			header:  map[string]string{"Authorization": basicAuth("no-such-user-xyz")},
			code:    connect.CodeUnauthenticated,
			message: "invalid username: 'no-such-user-xyz'",
		},
		{
			name:    "missing absolute cwd",
			req:     withCwd("/no/such/dir"),
			code:    connect.CodeInvalidArgument,
			message: "cwd '/no/such/dir' does not exist",
		},
		{
			name:    "missing relative cwd is under home",
			req:     withCwd("no-such-dir-xyz/sub"),
			code:    connect.CodeInvalidArgument,
			message: "cwd '" + me.Home + "/no-such-dir-xyz/sub' does not exist",
		},
		{
			name:    "cwd is a file",
			req:     withCwd(file.Name()),
			code:    connect.CodeInvalidArgument,
			message: "cwd '" + file.Name() + "' is not a directory",
		},
		{
			name:    "other user's home",
			req:     withCwd("~root/x"),
			code:    connect.CodeInvalidArgument,
			message: `resolving cwd: invalid path: "~root/x": paths relative to another user's home are not supported`,
		},
		{
			name:    "command not found",
			req:     startReq("no-such-command-xyz"),
			code:    connect.CodeInvalidArgument,
			message: `starting process 'no-such-command-xyz': executable file not found in $PATH: "no-such-command-xyz" not found in PATH`,
		},
		{
			name:    "no command",
			req:     &pb.StartRequest{},
			code:    connect.CodeInvalidArgument,
			message: "process.cmd is required",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, err := h.start(t.Context(), tt.req, tt.header).wait(t)
			if s.pid != 0 {
				t.Errorf("got a start event (pid %d) for a failed start", s.pid)
			}
			checkErr(t, err, tt.code, tt.message)
		})
	}
}

func TestStartCwd(t *testing.T) {
	t.Parallel()
	workdir := t.TempDir()
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		workdir string // default workdir from /init
		cwd     *string
		want    string
	}{
		{name: "absolute", cwd: ptr("/tmp"), want: "/tmp"},
		{name: "empty with default workdir", workdir: workdir, want: workdir},
		{name: "empty without default workdir is home", want: me.HomeDir},
		{name: "explicit empty is the default workdir", workdir: workdir, cwd: ptr(""), want: workdir},
		{name: "tilde is home, not the workdir", workdir: workdir, cwd: ptr("~"), want: me.HomeDir},
		{name: "dot-dot is cleaned", cwd: ptr("/tmp/../tmp/"), want: "/tmp"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			h.state.Apply(state.Update{Workdir: &tt.workdir})
			req := sh("pwd -P")
			req.Process.Cwd = tt.cwd
			if got := h.run(t, req).stdout; got != tt.want+"\n" {
				t.Errorf("pwd = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestStartEnv(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	me, err := identity.Lookup(h.state.DefaultUser())
	if err != nil {
		t.Fatal(err)
	}
	h.state.Apply(state.Update{EnvVars: map[string]string{"FROM_INIT": "init", "SHARED": "init", "LOGNAME": "init-logname"}})
	req := startReq("/usr/bin/env")
	req.Process.Envs = map[string]string{"SHARED": "request", "FROM_REQUEST": "request", "HOME": "/request-home", "EMPTY": ""}
	got := map[string]string{}
	for line := range strings.Lines(h.run(t, req).stdout) {
		k, v, _ := strings.Cut(strings.TrimSuffix(line, "\n"), "=")
		got[k] = v
	}
	path := os.Getenv("PATH")
	if path == "" {
		path = defaultPath
	}
	// Exactly these: nothing else of envd's (the test's) environment leaks.
	want := map[string]string{
		"PATH":         path,
		"HOME":         "/request-home",
		"USER":         me.Name,
		"LOGNAME":      "init-logname",
		"FROM_INIT":    "init",
		"SHARED":       "request",
		"FROM_REQUEST": "request",
		"EMPTY":        "",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("environment (-want +got):\n%s", diff)
	}
}

func TestBuildEnv(t *testing.T) {
	u := &identity.User{Name: "user", Home: "/home/user"}
	tests := []struct {
		name             string
		path             string
		sandbox, request map[string]string
		want             []string
	}{
		{
			name: "empty PATH gets a sane default",
			want: []string{"PATH=" + defaultPath, "HOME=/home/user", "USER=user", "LOGNAME=user"},
		},
		{
			name:    "later wins, keeping the first position",
			path:    "/bin",
			sandbox: map[string]string{"B": "sandbox", "A": "sandbox", "PATH": "/sandbox/bin"},
			request: map[string]string{"A": "request", "C": "request"},
			want:    []string{"PATH=/sandbox/bin", "HOME=/home/user", "USER=user", "LOGNAME=user", "A=request", "B=sandbox", "C=request"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, buildEnv(tt.path, u, tt.sandbox, tt.request)); diff != "" {
				t.Errorf("buildEnv (-want +got):\n%s", diff)
			}
		})
	}
}

func TestStartAsUser(t *testing.T) {
	testenv.RequireRoot(t)
	t.Parallel()
	tests := []struct {
		name        string
		defaultUser string
		header      map[string]string
	}{
		{name: "basic auth header", defaultUser: "root", header: map[string]string{"Authorization": basicAuth("nobody")}},
		{name: "default user", defaultUser: "nobody"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			h.state.Apply(state.Update{User: &tt.defaultUser})
			nobody, err := identity.Lookup("nobody")
			if err != nil {
				t.Fatal(err)
			}
			req := sh(`id -u; id -g; id -G; echo "$HOME $USER $LOGNAME"`)
			req.Process.Cwd = ptr("/tmp") // nobody's home does not exist
			got, err := h.start(t.Context(), req, tt.header).wait(t)
			if err != nil {
				t.Fatal(err)
			}
			id := strconv.Itoa(int(nobody.UID))
			gid := strconv.Itoa(int(nobody.GID))
			want := id + "\n" + gid + "\n" + gid + "\n" + nobody.Home + " nobody nobody\n"
			if got.stdout != want {
				t.Errorf("output = %q, want %q (stderr %q)", got.stdout, want, got.stderr)
			}
		})
	}
}

func TestKeepalive(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	tests := []struct {
		name   string
		script string
		min    int
		max    int
	}{
		{name: "idle process gets keepalives", script: "sleep 2.5", min: 2, max: 3},
		{name: "output resets the timer", script: "for i in 1 2 3 4 5 6; do echo $i; sleep 0.4; done", min: 0, max: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := h.start(t.Context(), sh(tt.script), map[string]string{"Keepalive-Ping-Interval": "1"}).waitOK(t)
			if got.keepalives < tt.min || got.keepalives > tt.max {
				t.Errorf("got %d keepalives, want %d to %d", got.keepalives, tt.min, tt.max)
			}
		})
	}
}

func TestTimeoutKills(t *testing.T) {
	t.Parallel()
	h := newHarness(t)

	t.Run("client waits for the end", func(t *testing.T) {
		t.Parallel()
		// The header alone, as an SDK sends it; the client enforces nothing.
		e := h.start(t.Context(), sh("sleep 30 & echo $!; wait"), map[string]string{"Connect-Timeout-Ms": "700"})
		e.waitOutput(t, "\n")
		begin := time.Now()
		got := e.waitOK(t)
		if took := time.Since(begin); took > 3*time.Second {
			t.Errorf("stream ended %v after start, want about 0.7 s", took)
		}
		want := &pb.ProcessEvent_EndEvent{ExitCode: -1, Status: "signal: killed", Error: ptr("signal: killed")}
		if diff := cmp.Diff(want, got.end, protocmp.Transform()); diff != "" {
			t.Errorf("end event (-want +got):\n%s", diff)
		}
		waitGone(t, got.pid)
		grandchild, _ := strconv.Atoi(strings.TrimSpace(got.stdout))
		waitDead(t, grandchild) // the whole process group was killed
	})

	t.Run("client gone", func(t *testing.T) {
		t.Parallel()
		// The client's deadline becomes the header; the client gives up at
		// the same moment, and the process must still die.
		ctx, cancel := context.WithTimeout(t.Context(), 700*time.Millisecond)
		defer cancel()
		e := h.start(ctx, sh("sleep 30"), nil)
		pid := e.pid(t)
		_, err := e.wait(t)
		if connect.CodeOf(err) != connect.CodeDeadlineExceeded {
			t.Errorf("stream error = %v, want deadline_exceeded", err)
		}
		waitGone(t, pid)
	})

	t.Run("zero is no limit", func(t *testing.T) {
		t.Parallel()
		// connect-go reads "0" as a deadline that has already passed, so the
		// stream itself ends at once; the process must live on regardless.
		e := h.start(t.Context(), sh("sleep 30"), map[string]string{"Connect-Timeout-Ms": "0"})
		pid := e.pid(t)
		if _, err := e.wait(t); connect.CodeOf(err) != connect.CodeDeadlineExceeded {
			t.Errorf("stream error = %v, want deadline_exceeded", err)
		}
		time.Sleep(time.Second)
		if !alive(pid) {
			t.Fatalf("process %d died without a timeout", pid)
		}
		h.kill(t, pid)
		waitGone(t, pid)
	})
}

func TestDisconnectKeepsProcess(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx, cancel := context.WithCancel(t.Context())
	e := h.start(ctx, sh("sleep 30"), nil)
	pid := e.pid(t)
	cancel()
	if _, err := e.wait(t); connect.CodeOf(err) != connect.CodeCanceled {
		t.Errorf("stream error = %v, want canceled", err)
	}
	time.Sleep(200 * time.Millisecond) // give the server time to notice
	if !alive(pid) {
		t.Fatalf("process %d died with its stream", pid)
	}
	res, err := h.client.List(t.Context(), connect.NewRequest(&pb.ListRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(res.Msg.GetProcesses()); n != 1 || res.Msg.GetProcesses()[0].GetPid() != pid {
		t.Errorf("List = %v, want just pid %d", res.Msg.GetProcesses(), pid)
	}

	// A new subscriber sees the rest.
	c := h.connect(t.Context(), byPid(pid))
	if got := c.pid(t); got != pid {
		t.Errorf("Connect start pid = %d, want %d", got, pid)
	}
	h.kill(t, pid)
	if got := c.waitOK(t); got.end.GetStatus() != "signal: killed" {
		t.Errorf("end = %v, want signal: killed", got.end)
	}
}

// TestGrandchildWritesOnAfterStream: a background process that keeps
// writing to the inherited stdout after the stream ended is not killed by
// SIGPIPE (a server started with `srv &` that logs, or a fork bomb, whose
// dying members would be replaced by new forks).
func TestGrandchildWritesOnAfterStream(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	got := h.run(t, sh("(sleep 1; while :; do echo tick; sleep 0.05; done) & echo $!"))
	grandchild, err := strconv.Atoi(strings.TrimSpace(got.stdout))
	if err != nil {
		t.Fatalf("output %q: %v", got.stdout, err)
	}
	t.Cleanup(func() { syscallKill(grandchild) })
	time.Sleep(drainMax + 2*time.Second) // past the drain: it has written for a while
	if !livesOn(grandchild) {
		t.Errorf("background writer %d died after the stream ended", grandchild)
	}
}

func TestGrandchildDoesNotHoldStream(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	begin := time.Now()
	// The backgrounded sleep inherits stdout and stderr and keeps them open.
	got := h.run(t, sh("sleep 30 & echo $!"))
	if took := time.Since(begin); took > 3*time.Second {
		t.Errorf("stream took %v, want it to end soon after the shell exited", took)
	}
	if got.end.GetExitCode() != 0 {
		t.Errorf("end = %v, want exit 0", got.end)
	}
	grandchild, err := strconv.Atoi(strings.TrimSpace(got.stdout))
	if err != nil {
		t.Fatalf("output %q: %v", got.stdout, err)
	}
	// A normal exit leaves background work alone, as the reference does.
	if !livesOn(grandchild) {
		t.Errorf("background process %d died with its parent", grandchild)
	}
	if err := syscallKill(grandchild); err != nil {
		t.Errorf("cleaning up %d: %v", grandchild, err)
	}
}
