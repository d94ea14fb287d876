package process

import (
	"strconv"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	pb "github.com/agent-sandbox/agent-sandbox/gen/process"
)

func TestSendSignal(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	tests := []struct {
		name    string
		byTag   bool
		signal  pb.Signal
		wantEnd *pb.ProcessEvent_EndEvent
	}{
		{
			name: "SIGKILL", signal: pb.Signal_SIGNAL_SIGKILL,
			wantEnd: &pb.ProcessEvent_EndEvent{ExitCode: -1, Status: "signal: killed", Error: ptr("signal: killed")},
		},
		{
			name: "SIGTERM", signal: pb.Signal_SIGNAL_SIGTERM,
			wantEnd: &pb.ProcessEvent_EndEvent{ExitCode: -1, Status: "signal: terminated", Error: ptr("signal: terminated")},
		},
		{
			name: "SIGKILL by tag", byTag: true, signal: pb.Signal_SIGNAL_SIGKILL,
			wantEnd: &pb.ProcessEvent_EndEvent{ExitCode: -1, Status: "signal: killed", Error: ptr("signal: killed")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// The shell waits for a child of its own: killing the shell alone
			// would leave the child holding the pipes.
			req := sh("sleep 30 & echo $!; wait")
			req.Tag = ptr(t.Name())
			e := h.start(t.Context(), req, nil)
			pid := e.pid(t)
			e.waitOutput(t, "\n")
			sel := byPid(pid)
			if tt.byTag {
				sel = byTag(t.Name())
			}
			if _, err := h.client.SendSignal(t.Context(), connect.NewRequest(&pb.SendSignalRequest{Process: sel, Signal: tt.signal})); err != nil {
				t.Fatalf("SendSignal: %v", err)
			}
			got := e.waitOK(t)
			if diff := cmp.Diff(tt.wantEnd, got.end, protocmp.Transform()); diff != "" {
				t.Errorf("end (-want +got):\n%s", diff)
			}
			waitGone(t, pid)
			grandchild, _ := strconv.Atoi(strings.TrimSpace(got.stdout))
			waitDead(t, grandchild)
		})
	}
}

func TestSendSignalErrors(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	exited := h.run(t, sh("true")).pid // retained for Connect, but not signalable
	e := h.start(t.Context(), startReq("sleep", "30"), nil)
	running := e.pid(t)
	tests := []struct {
		name    string
		sel     *pb.ProcessSelector
		signal  pb.Signal
		code    connect.Code
		message string
	}{
		{name: "unknown pid", sel: byPid(999999999), signal: pb.Signal_SIGNAL_SIGKILL, code: connect.CodeNotFound, message: "process with pid 999999999 not found"},
		{name: "exited pid", sel: byPid(exited), signal: pb.Signal_SIGNAL_SIGKILL, code: connect.CodeNotFound, message: "process with pid " + itoa(exited) + " not found"},
		{name: "unknown tag", sel: byTag("nope"), signal: pb.Signal_SIGNAL_SIGKILL, code: connect.CodeNotFound, message: "process with tag nope not found"},
		{name: "unsupported signal", sel: byPid(running), signal: pb.Signal_SIGNAL_UNSPECIFIED, code: connect.CodeUnimplemented, message: "invalid signal: SIGNAL_UNSPECIFIED"},
		{name: "unknown signal number", sel: byPid(running), signal: pb.Signal(2), code: connect.CodeUnimplemented, message: "invalid signal: 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := h.client.SendSignal(t.Context(), connect.NewRequest(&pb.SendSignalRequest{Process: tt.sel, Signal: tt.signal}))
			checkErr(t, err, tt.code, tt.message)
		})
	}
	if !alive(running) {
		t.Error("a rejected signal killed the process")
	}
	h.kill(t, running)
	e.waitOK(t)
}
