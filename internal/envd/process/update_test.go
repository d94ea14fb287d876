package process

import (
	"strings"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/agent-sandbox/agent-sandbox/gen/process"
)

func TestPTY(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	req := &pb.StartRequest{
		Process: &pb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", `stty size; read x; stty size; tty >/dev/null && echo is-a-tty; head -c 40000 /dev/zero | tr '\0' y; echo; exit 7`}},
		Pty:     &pb.PTY{Size: &pb.PTY_Size{Cols: 80, Rows: 24}},
	}
	e := h.start(t.Context(), req, nil)
	pid := e.pid(t)
	e.waitOutput(t, "24 80")

	resize := &pb.UpdateRequest{Process: byPid(pid), Pty: &pb.PTY{Size: &pb.PTY_Size{Cols: 100, Rows: 30}}}
	if _, err := h.client.Update(t.Context(), connect.NewRequest(resize)); err != nil {
		t.Fatalf("Update: %v", err)
	}
	if _, err := h.client.SendInput(t.Context(), connect.NewRequest(&pb.SendInputRequest{Process: byPid(pid), Input: ptyInput("go\n")})); err != nil {
		t.Fatalf("SendInput: %v", err)
	}
	got := e.waitOK(t)
	if got.stdout != "" || got.stderr != "" {
		t.Errorf("PTY output came as stdout %q / stderr %q, want pty only", got.stdout, got.stderr)
	}
	for _, want := range []string{"24 80\r\n", "go\r\n" /* echo */, "30 100\r\n", "is-a-tty", strings.Repeat("y", 40000)} {
		if !strings.Contains(got.pty, want) {
			t.Errorf("pty output lacks %.40q; got %.200q", want, got.pty)
		}
	}
	if got.maxPTY > 16<<10 {
		t.Errorf("largest pty event is %d bytes, want at most 16 KiB", got.maxPTY)
	}
	if got.end.GetExitCode() != 7 || got.end.GetStatus() != "exit status 7" {
		t.Errorf("end = %v, want exit status 7", got.end)
	}
}

func TestPTYShell(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	// What the SDK's pty.create sends, minus the login and rc files (which
	// belong to the machine, not the test).
	req := &pb.StartRequest{
		Process: &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"--norc", "--noprofile", "-i"}, Envs: map[string]string{"TERM": "xterm-256color", "PS1": "$ "}},
		Pty:     &pb.PTY{Size: &pb.PTY_Size{Cols: 80, Rows: 24}},
	}
	e := h.start(t.Context(), req, nil)
	pid := e.pid(t)
	if _, err := h.client.SendInput(t.Context(), connect.NewRequest(&pb.SendInputRequest{Process: byPid(pid), Input: ptyInput("echo $((6*7))\nexit\n")})); err != nil {
		t.Fatal(err)
	}
	got := e.waitOK(t)
	if !strings.Contains(got.pty, "42") || got.end.GetExitCode() != 0 {
		t.Errorf("pty %q, end %v; want 42 and exit 0", got.pty, got.end)
	}
}

func TestUpdateErrors(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	e := h.start(t.Context(), startReq("sleep", "30"), nil)
	pid := e.pid(t)
	size := &pb.PTY{Size: &pb.PTY_Size{Cols: 100, Rows: 30}}
	tests := []struct {
		name    string
		req     *pb.UpdateRequest
		code    connect.Code
		message string
	}{
		{name: "not a pty", req: &pb.UpdateRequest{Process: byPid(pid), Pty: size}, code: connect.CodeInternal, message: "error resizing tty: tty not assigned to process"},
		{name: "unknown pid", req: &pb.UpdateRequest{Process: byPid(999999999), Pty: size}, code: connect.CodeNotFound, message: "process with pid 999999999 not found"},
		{name: "no pty is a no-op", req: &pb.UpdateRequest{Process: byPid(pid)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := h.client.Update(t.Context(), connect.NewRequest(tt.req))
			if tt.code == 0 {
				if err != nil {
					t.Errorf("Update: %v", err)
				}
				return
			}
			checkErr(t, err, tt.code, tt.message)
		})
	}
	h.kill(t, pid)
	e.waitOK(t)
}
