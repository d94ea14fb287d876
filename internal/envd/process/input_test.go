package process

import (
	"testing"

	"connectrpc.com/connect"

	pb "github.com/agent-sandbox/agent-sandbox/gen/process"
)

func stdinInput(s string) *pb.ProcessInput {
	return &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte(s)}}
}

func ptyInput(s string) *pb.ProcessInput {
	return &pb.ProcessInput{Input: &pb.ProcessInput_Pty{Pty: []byte(s)}}
}

func TestStdin(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	tests := []struct {
		name  string
		stdin *bool
	}{
		{name: "absent keeps a pipe", stdin: nil},
		{name: "true keeps a pipe", stdin: ptr(true)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req := startReq("cat")
			req.Stdin = tt.stdin
			e := h.start(t.Context(), req, nil)
			pid := e.pid(t)
			for _, s := range []string{"hello ", "world"} {
				if _, err := h.client.SendInput(t.Context(), connect.NewRequest(&pb.SendInputRequest{Process: byPid(pid), Input: stdinInput(s)})); err != nil {
					t.Fatalf("SendInput: %v", err)
				}
			}
			e.waitOutput(t, "hello world")
			if _, err := h.client.CloseStdin(t.Context(), connect.NewRequest(&pb.CloseStdinRequest{Process: byPid(pid)})); err != nil {
				t.Fatalf("CloseStdin: %v", err)
			}
			got := e.waitOK(t) // cat saw EOF
			if got.stdout != "hello world" || got.end.GetExitCode() != 0 {
				t.Errorf("stdout %q, end %v; want %q and exit 0", got.stdout, got.end, "hello world")
			}
		})
	}

	t.Run("false is /dev/null", func(t *testing.T) {
		t.Parallel()
		got := h.run(t, startReq("cat")) // stdin false, as the SDKs send
		if got.stdout != "" || got.end.GetExitCode() != 0 {
			t.Errorf("cat with stdin false: stdout %q, end %v; want immediate EOF", got.stdout, got.end)
		}
	})
}

func TestInputErrors(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	noStdin := h.start(t.Context(), startReq("sleep", "30"), nil)
	closed := h.start(t.Context(), &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "sleep", Args: []string{"30"}}}, nil)
	term := h.start(t.Context(), &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "sleep", Args: []string{"30"}}, Pty: &pb.PTY{Size: &pb.PTY_Size{Cols: 80, Rows: 24}}}, nil)
	noStdinPid, closedPid, termPid := noStdin.pid(t), closed.pid(t), term.pid(t)
	for range 2 { // closing an already closed stdin is fine
		if _, err := h.client.CloseStdin(t.Context(), connect.NewRequest(&pb.CloseStdinRequest{Process: byPid(closedPid)})); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.client.CloseStdin(t.Context(), connect.NewRequest(&pb.CloseStdinRequest{Process: byPid(noStdinPid)})); err != nil {
		t.Errorf("CloseStdin of a process without stdin: %v", err)
	}
	exited := h.run(t, sh("true")).pid

	sendInput := func(pid uint32, in *pb.ProcessInput) error {
		_, err := h.client.SendInput(t.Context(), connect.NewRequest(&pb.SendInputRequest{Process: byPid(pid), Input: in}))
		return err
	}
	closeStdin := func(pid uint32) error {
		_, err := h.client.CloseStdin(t.Context(), connect.NewRequest(&pb.CloseStdinRequest{Process: byPid(pid)}))
		return err
	}
	tests := []struct {
		name    string
		call    func() error
		code    connect.Code
		message string
	}{
		{
			name: "stdin false", call: func() error { return sendInput(noStdinPid, stdinInput("x")) },
			code: connect.CodeInternal, message: "error writing to stdin: stdin not enabled or closed",
		},
		{
			name: "stdin closed", call: func() error { return sendInput(closedPid, stdinInput("x")) },
			code: connect.CodeInternal, message: "error writing to stdin: stdin not enabled or closed",
		},
		{
			name: "pty input to a pipe process", call: func() error { return sendInput(closedPid, ptyInput("x")) },
			code: connect.CodeInternal, message: "error writing to tty: tty not assigned to process",
		},
		{
			name: "stdin input to a pty", call: func() error { return sendInput(termPid, stdinInput("x")) },
			code: connect.CodeInternal, message: "error writing to stdin: tty assigned to process, input must be sent as pty, not stdin",
		},
		{
			name: "no input", call: func() error { return sendInput(closedPid, nil) },
			code: connect.CodeUnimplemented, message: "invalid input type <nil>",
		},
		{
			name: "close stdin of a pty", call: func() error { return closeStdin(termPid) },
			code: connect.CodeUnknown, message: "error closing stdin: cannot close stdin of a PTY process, send Ctrl+D (0x04) instead",
		},
		{
			name: "input to an exited process", call: func() error { return sendInput(exited, stdinInput("x")) },
			code: connect.CodeNotFound, message: "process with pid " + itoa(exited) + " not found",
		},
		{
			name: "close stdin of an unknown process", call: func() error { return closeStdin(999999999) },
			code: connect.CodeNotFound, message: "process with pid 999999999 not found",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkErr(t, tt.call(), tt.code, tt.message)
		})
	}
	for _, pid := range []uint32{noStdinPid, closedPid, termPid} {
		h.kill(t, pid)
	}
}

func TestStreamInput(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	req := startReq("cat")
	req.Stdin = ptr(true)
	req.Tag = ptr("cat")
	e := h.start(t.Context(), req, nil)
	pid := e.pid(t)

	tests := []struct {
		name    string
		msgs    []*pb.StreamInputRequest
		code    connect.Code
		message string
	}{
		{
			name: "start, data and keepalive",
			msgs: []*pb.StreamInputRequest{
				{Event: &pb.StreamInputRequest_Start{Start: &pb.StreamInputRequest_StartEvent{Process: byTag("cat")}}},
				{Event: &pb.StreamInputRequest_Data{Data: &pb.StreamInputRequest_DataEvent{Input: stdinInput("abc")}}},
				{Event: &pb.StreamInputRequest_Keepalive{Keepalive: &pb.StreamInputRequest_KeepAlive{}}},
				{Event: &pb.StreamInputRequest_Data{Data: &pb.StreamInputRequest_DataEvent{Input: stdinInput("def")}}},
			},
		},
		{
			name: "data before start",
			msgs: []*pb.StreamInputRequest{
				{Event: &pb.StreamInputRequest_Data{Data: &pb.StreamInputRequest_DataEvent{Input: stdinInput("x")}}},
			},
			code: connect.CodeFailedPrecondition, message: "input before the start event that names the process",
		},
		{
			name: "unknown process",
			msgs: []*pb.StreamInputRequest{
				{Event: &pb.StreamInputRequest_Start{Start: &pb.StreamInputRequest_StartEvent{Process: byPid(999999999)}}},
			},
			code: connect.CodeNotFound, message: "process with pid 999999999 not found",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stream := h.client.StreamInput(t.Context())
			for _, m := range tt.msgs {
				if err := stream.Send(m); err != nil {
					break // the server already answered; CloseAndReceive has why
				}
			}
			_, err := stream.CloseAndReceive()
			if tt.code == 0 {
				if err != nil {
					t.Fatalf("StreamInput: %v", err)
				}
				return
			}
			checkErr(t, err, tt.code, tt.message)
		})
	}

	e.waitOutput(t, "abcdef")
	if _, err := h.client.CloseStdin(t.Context(), connect.NewRequest(&pb.CloseStdinRequest{Process: byPid(pid)})); err != nil {
		t.Fatal(err)
	}
	if got := e.waitOK(t); got.stdout != "abcdef" {
		t.Errorf("stdout = %q, want abcdef", got.stdout)
	}
}
