package process

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/user"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/agent-sandbox/agent-sandbox/gen/process"
	"github.com/agent-sandbox/agent-sandbox/gen/process/processconnect"
	"github.com/agent-sandbox/agent-sandbox/internal/envd/state"
)

// harness is the real service behind a real HTTP server, reached through
// the generated client with the JSON codec the SDKs use.
type harness struct {
	svc    *Service
	state  *state.State
	client processconnect.ProcessClient
	url    string
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	me, err := user.Current()
	if err != nil {
		t.Fatalf("looking up current user: %v", err)
	}
	// The default user is whoever runs the test, so everything except the
	// tests that switch users works unprivileged too.
	st := state.New(state.Defaults{User: me.Username})
	svc := NewService(st, slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})))
	mux := http.NewServeMux()
	mux.Handle(processconnect.NewProcessHandler(svc))
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		if err := svc.Close(); err != nil {
			t.Errorf("closing service: %v", err)
		}
		srv.Close()
	})
	return &harness{
		svc:    svc,
		state:  st,
		client: processconnect.NewProcessClient(srv.Client(), srv.URL, connect.WithProtoJSON()),
		url:    srv.URL,
	}
}

// events collects one Start or Connect stream in the background.
type events struct {
	mu      sync.Mutex
	list    []*pb.ProcessEvent
	err     error
	done    bool
	changed chan struct{} // closed and replaced on every change
}

func newEvents() *events { return &events{changed: make(chan struct{})} }

func (e *events) add(ev *pb.ProcessEvent) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.list = append(e.list, ev)
	close(e.changed)
	e.changed = make(chan struct{})
}

func (e *events) finish(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.err, e.done = err, true
	close(e.changed)
	e.changed = make(chan struct{})
}

// collect reads s until it ends; PT is the pointer type of the response.
func collect[T any, PT interface {
	*T
	GetEvent() *pb.ProcessEvent
}](s *connect.ServerStreamForClient[T]) *events {
	e := newEvents()
	go func() {
		defer s.Close()
		for s.Receive() {
			e.add(PT(s.Msg()).GetEvent())
		}
		e.finish(s.Err())
	}()
	return e
}

// waitUntil blocks until cond holds for the events so far.
func (e *events) waitUntil(t *testing.T, what string, cond func(list []*pb.ProcessEvent, done bool) bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		e.mu.Lock()
		ok := cond(e.list, e.done)
		ch := e.changed
		e.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			e.mu.Lock()
			defer e.mu.Unlock()
			t.Fatalf("timed out waiting for %s; events so far: %v (done=%v err=%v)", what, e.list, e.done, e.err)
		}
	}
}

// pid waits for the start event.
func (e *events) pid(t *testing.T) uint32 {
	t.Helper()
	e.waitUntil(t, "start event", func(l []*pb.ProcessEvent, done bool) bool { return len(l) > 0 || done })
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.list) == 0 || e.list[0].GetStart() == nil {
		t.Fatalf("first event is not start: %v (err %v)", e.list, e.err)
	}
	return e.list[0].GetStart().GetPid()
}

// waitOutput waits until the concatenated output contains s.
func (e *events) waitOutput(t *testing.T, s string) {
	t.Helper()
	e.waitUntil(t, "output "+s, func(l []*pb.ProcessEvent, done bool) bool {
		return strings.Contains(summarizeList(l).output(), s) || done
	})
	e.mu.Lock()
	defer e.mu.Unlock()
	if out := summarizeList(e.list).output(); !strings.Contains(out, s) {
		t.Fatalf("stream ended without output %q; got %q (err %v)", s, out, e.err)
	}
}

// wait waits for the stream to end and returns its summary and error.
func (e *events) wait(t *testing.T) (summary, error) {
	t.Helper()
	e.waitUntil(t, "end of stream", func(_ []*pb.ProcessEvent, done bool) bool { return done })
	e.mu.Lock()
	defer e.mu.Unlock()
	return summarizeList(e.list), e.err
}

// waitOK waits for a stream that must end cleanly and checks the event
// order: start first, then data or keepalives, then exactly one end.
func (e *events) waitOK(t *testing.T) summary {
	t.Helper()
	s, err := e.wait(t)
	if err != nil {
		t.Fatalf("stream error: %v", err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	checkOrder(t, e.list)
	return s
}

func checkOrder(t *testing.T, list []*pb.ProcessEvent) {
	t.Helper()
	if len(list) < 2 {
		t.Fatalf("want at least start and end, got %v", list)
	}
	if list[0].GetStart() == nil {
		t.Errorf("first event = %v, want start", list[0])
	}
	for i, ev := range list[1 : len(list)-1] {
		if ev.GetData() == nil && ev.GetKeepalive() == nil {
			t.Errorf("event %d = %v, want data or keepalive", i+1, ev)
		}
	}
	if list[len(list)-1].GetEnd() == nil {
		t.Errorf("last event = %v, want end", list[len(list)-1])
	}
}

type summary struct {
	pid                 uint32
	stdout, stderr, pty string
	chunks              []int // sizes of data events, in order
	maxPipe, maxPTY     int
	keepalives          int
	end                 *pb.ProcessEvent_EndEvent
}

func (s summary) output() string { return s.stdout + s.stderr + s.pty }

func summarizeList(list []*pb.ProcessEvent) summary {
	var s summary
	for _, ev := range list {
		switch {
		case ev.GetStart() != nil:
			s.pid = ev.GetStart().GetPid()
		case ev.GetData() != nil:
			d := ev.GetData()
			s.stdout += string(d.GetStdout())
			s.stderr += string(d.GetStderr())
			s.pty += string(d.GetPty())
			pipe, tty := len(d.GetStdout())+len(d.GetStderr()), len(d.GetPty())
			s.chunks = append(s.chunks, pipe+tty)
			s.maxPipe, s.maxPTY = max(s.maxPipe, pipe), max(s.maxPTY, tty)
		case ev.GetKeepalive() != nil:
			s.keepalives++
		case ev.GetEnd() != nil:
			s.end = ev.GetEnd()
		}
	}
	return s
}

// startReq is a StartRequest for cmd args..., with stdin off as the SDKs send it.
func startReq(cmd string, args ...string) *pb.StartRequest {
	no := false
	return &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: cmd, Args: args}, Stdin: &no}
}

// sh is a StartRequest running script with /bin/sh -c.
func sh(script string) *pb.StartRequest { return startReq("/bin/sh", "-c", script) }

// start sends req with the given extra headers and collects the stream.
func (h *harness) start(ctx context.Context, req *pb.StartRequest, hdr map[string]string) *events {
	r := connect.NewRequest(req)
	for k, v := range hdr {
		r.Header().Set(k, v)
	}
	s, err := h.client.Start(ctx, r)
	if err != nil { // not expected: the server answers errors in the stream
		e := newEvents()
		e.finish(err)
		return e
	}
	return collect(s)
}

// run starts req and waits for a clean end.
func (h *harness) run(t *testing.T, req *pb.StartRequest) summary {
	t.Helper()
	return h.start(t.Context(), req, nil).waitOK(t)
}

func (h *harness) connect(ctx context.Context, sel *pb.ProcessSelector) *events {
	s, err := h.client.Connect(ctx, connect.NewRequest(&pb.ConnectRequest{Process: sel}))
	if err != nil {
		e := newEvents()
		e.finish(err)
		return e
	}
	return collect(s)
}

func (h *harness) kill(t *testing.T, pid uint32) {
	t.Helper()
	_, err := h.client.SendSignal(t.Context(), connect.NewRequest(&pb.SendSignalRequest{Process: byPid(pid), Signal: pb.Signal_SIGNAL_SIGKILL}))
	if err != nil {
		t.Fatalf("killing %d: %v", pid, err)
	}
}

func byPid(pid uint32) *pb.ProcessSelector {
	return &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}
}

func byTag(tag string) *pb.ProcessSelector {
	return &pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: tag}}
}

func basicAuth(name string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(name+":"))
}

// checkErr checks that err is a Connect error with code and message.
func checkErr(t *testing.T, err error, code connect.Code, msg string) {
	t.Helper()
	var ce *connect.Error
	if !errors.As(err, &ce) {
		t.Fatalf("error = %v, want a connect error %v %q", err, code, msg)
	}
	if ce.Code() != code || ce.Message() != msg {
		t.Errorf("error = %v %q, want %v %q", ce.Code(), ce.Message(), code, msg)
	}
}

// alive reports whether pid exists (a zombie counts: it was not reaped).
func alive(pid uint32) bool {
	return syscall.Kill(int(pid), 0) == nil
}

// waitGone waits until pid no longer exists.
func waitGone(t *testing.T, pid uint32) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still exists", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// livesOn reports whether pid exists and is not a zombie. Use it for
// grandchildren, which whoever adopts them reaps, not us.
func livesOn(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(rest, "Z") && !strings.HasPrefix(rest, "X")
}

// waitDead waits until the grandchild pid is dead.
func waitDead(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for livesOn(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still running", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func syscallKill(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }

func itoa(pid uint32) string { return strconv.Itoa(int(pid)) }

func ptr[T any](v T) *T { return &v }
