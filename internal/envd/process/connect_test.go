package process

import (
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	pb "github.com/agent-sandbox/agent-sandbox/gen/process"
)

func TestConnectLive(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	req := sh("read x; echo got $x; read y; echo got $y")
	req.Stdin = nil // absent: keep a pipe
	req.Tag = ptr("reader")
	started := h.start(t.Context(), req, nil)
	pid := started.pid(t)
	send := func(s string) {
		t.Helper()
		_, err := h.client.SendInput(t.Context(), connect.NewRequest(&pb.SendInputRequest{
			Process: byPid(pid), Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte(s)}},
		}))
		if err != nil {
			t.Fatal(err)
		}
	}
	send("one\n")
	started.waitOutput(t, "got one\n")

	// Output from before a subscriber connects is not replayed to it.
	connected := []*events{h.connect(t.Context(), byPid(pid)), h.connect(t.Context(), byTag("reader"))}
	for _, c := range connected {
		if got := c.pid(t); got != pid {
			t.Errorf("Connect start pid = %d, want %d", got, pid)
		}
	}
	send("two\n")
	want := &pb.ProcessEvent_EndEvent{ExitCode: 0, Exited: true, Status: "exit status 0"}
	for i, e := range append(connected, started) {
		got := e.waitOK(t)
		wantOut := "got two\n"
		if i == len(connected) {
			wantOut = "got one\ngot two\n"
		}
		if got.stdout != wantOut {
			t.Errorf("stream %d: stdout = %q, want %q", i, got.stdout, wantOut)
		}
		if diff := cmp.Diff(want, got.end, protocmp.Transform()); diff != "" {
			t.Errorf("stream %d: end (-want +got):\n%s", i, diff)
		}
	}
}

func TestConnectAfterExit(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.svc.retain = 1500 * time.Millisecond
	req := sh("exit 3")
	req.Tag = ptr("quitter")
	pid := h.run(t, req).pid
	want := &pb.ProcessEvent_EndEvent{ExitCode: 3, Exited: true, Status: "exit status 3", Error: ptr("exit status 3")}
	for _, sel := range []*pb.ProcessSelector{byPid(pid), byTag("quitter")} {
		got := h.connect(t.Context(), sel).waitOK(t)
		if got.pid != pid || got.output() != "" || len(got.chunks) != 0 {
			t.Errorf("Connect(%v) = pid %d, output %q; want pid %d and no data", sel, got.pid, got.output(), pid)
		}
		if diff := cmp.Diff(want, got.end, protocmp.Transform()); diff != "" {
			t.Errorf("Connect(%v) end (-want +got):\n%s", sel, diff)
		}
	}

	// Retention ends.
	time.Sleep(2 * time.Second)
	_, err := h.connect(t.Context(), byPid(pid)).wait(t)
	checkErr(t, err, connect.CodeNotFound, "process with pid "+itoa(pid)+" not found")
}

func TestConnectNotFound(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	tests := []struct {
		name    string
		sel     *pb.ProcessSelector
		code    connect.Code
		message string
	}{
		{name: "pid", sel: byPid(999999999), code: connect.CodeNotFound, message: "process with pid 999999999 not found"},
		{name: "tag", sel: byTag("nope"), code: connect.CodeNotFound, message: "process with tag nope not found"},
		{name: "no selector", sel: nil, code: connect.CodeInvalidArgument, message: "process selector needs a pid or a tag"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, err := h.connect(t.Context(), tt.sel).wait(t)
			if s.pid != 0 {
				t.Errorf("got a start event for pid %d", s.pid)
			}
			checkErr(t, err, tt.code, tt.message)
		})
	}
}
