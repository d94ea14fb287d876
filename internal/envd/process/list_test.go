package process

import (
	"testing"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	pb "github.com/agent-sandbox/agent-sandbox/gen/process"
)

func TestList(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	list := func() []*pb.ProcessInfo {
		t.Helper()
		res, err := h.client.List(t.Context(), connect.NewRequest(&pb.ListRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		return res.Msg.GetProcesses()
	}
	if got := list(); len(got) != 0 {
		t.Fatalf("List of a fresh service = %v, want none", got)
	}

	tagged := startReq("sleep", "30")
	tagged.Tag = ptr("server")
	tagged.Process.Envs = map[string]string{"A": "b"}
	tagged.Process.Cwd = ptr("/tmp")
	term := &pb.StartRequest{
		Process: &pb.ProcessConfig{Cmd: "/bin/sh", Envs: map[string]string{"TERM": "xterm-256color"}},
		Pty:     &pb.PTY{Size: &pb.PTY_Size{Cols: 80, Rows: 24}},
	}
	e1 := h.start(t.Context(), tagged, nil)
	e2 := h.start(t.Context(), term, nil)
	pid1, pid2 := e1.pid(t), e2.pid(t)
	h.run(t, sh("true")) // exited processes are not listed

	want := []*pb.ProcessInfo{
		{Config: tagged.Process, Pid: pid1, Tag: ptr("server")},
		{Config: term.Process, Pid: pid2},
	}
	if pid2 < pid1 {
		want[0], want[1] = want[1], want[0] // List is ordered by pid
	}
	if diff := cmp.Diff(want, list(), protocmp.Transform()); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}

	h.kill(t, pid1)
	h.kill(t, pid2)
	e1.waitOK(t)
	e2.waitOK(t)
	if got := list(); len(got) != 0 {
		t.Errorf("List after kill = %v, want none", got)
	}
}
