package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"

	"github.com/agent-sandbox/agent-sandbox/gen/process"
	"github.com/agent-sandbox/agent-sandbox/gen/process/processconnect"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
	"github.com/agent-sandbox/agent-sandbox/internal/template"
)

// fakeTemplates is a Templates over a map by name; IDs work too.
type fakeTemplates map[string]*template.Template

func (f fakeTemplates) Lookup(ref string) (*template.Template, error) {
	if t, ok := f[ref]; ok {
		return t, nil
	}
	for _, t := range f {
		if t.ID == ref {
			return t, nil
		}
	}
	return nil, fmt.Errorf("template %q: %w", ref, template.ErrNotFound)
}

var testTemplates = fakeTemplates{"base": {
	Name:    "base",
	ID:      "base-0123456789ab",
	RootFS:  "/templates/base/rootfs",
	User:    "user",
	Workdir: "/home/user",
	Env:     map[string]string{"LANG": "C.UTF-8", "FOO": "template"},
}}

// fakeEnvd is the part of envd the manager talks to: it records POST /init
// bodies and the X-Access-Token they came with, answers GET /health, and
// runs every process it is asked to start at once, exiting 0 (or what
// exitHook says), recording the command line and the user (the
// Authorization header).
type fakeEnvd struct {
	mu         sync.Mutex
	inits      []initBody
	initTokens []string             // X-Access-Token of each of inits
	initHook   func() int           // status for /init; nil: 204
	exitHook   func(run string) int // exit code of a process, by its runs entry; nil: 0
	runs       []string             // "user: cmd args…" of each process started
	processes  http.Handler
	files      map[string][]byte // by path, what /files served and took
	fileOps    []string          // "METHOD path user" of each /files request
}

func (e *fakeEnvd) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/"+processconnect.ProcessName+"/") {
		e.mu.Lock()
		if e.processes == nil {
			_, e.processes = processconnect.NewProcessHandler(fakeProcesses{e: e})
		}
		h := e.processes
		e.mu.Unlock()
		h.ServeHTTP(w, r)
		return
	}
	switch r.URL.Path {
	case "/health":
		w.WriteHeader(http.StatusNoContent)
	case "/files":
		e.serveFile(w, r)
	case "/init":
		var b initBody
		if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		e.mu.Lock()
		e.inits = append(e.inits, b)
		e.initTokens = append(e.initTokens, r.Header.Get("X-Access-Token"))
		hook := e.initHook
		e.mu.Unlock()
		status := http.StatusNoContent
		if hook != nil {
			status = hook()
		}
		w.WriteHeader(status)
	default:
		http.NotFound(w, r)
	}
}

// serveFile is a file system in memory behind envd's /files, for octet-
// stream uploads and downloads.
func (e *fakeEnvd) serveFile(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Query().Get("path")
	e.mu.Lock()
	defer e.mu.Unlock()
	e.fileOps = append(e.fileOps, r.Method+" "+path+" "+r.URL.Query().Get("username"))
	switch r.Method {
	case http.MethodGet:
		b, ok := e.files[path]
		if !ok {
			http.Error(w, `{"code":404,"message":"not found"}`, http.StatusNotFound)
			return
		}
		w.Write(b)
	case http.MethodPost:
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if e.files == nil {
			e.files = map[string][]byte{}
		}
		e.files[path] = b
		w.Write([]byte(`[]`))
	default:
		http.Error(w, "method", http.StatusMethodNotAllowed)
	}
}

// fakeProcesses is fakeEnvd's process service.
type fakeProcesses struct {
	processconnect.UnimplementedProcessHandler
	e *fakeEnvd
}

func (p fakeProcesses) Start(_ context.Context, req *connect.Request[process.StartRequest], stream *connect.ServerStream[process.StartResponse]) error {
	user := "?"
	if u, _, ok := (&http.Request{Header: req.Header()}).BasicAuth(); ok {
		user = u
	}
	cfg := req.Msg.GetProcess()
	run := user + ": " + strings.Join(append([]string{cfg.GetCmd()}, cfg.GetArgs()...), " ")
	p.e.mu.Lock()
	p.e.runs = append(p.e.runs, run)
	hook := p.e.exitHook
	p.e.mu.Unlock()
	code := 0
	if hook != nil {
		code = hook(run)
	}
	for _, ev := range []*process.ProcessEvent{
		{Event: &process.ProcessEvent_Start{Start: &process.ProcessEvent_StartEvent{Pid: 1}}},
		{Event: &process.ProcessEvent_End{End: &process.ProcessEvent_EndEvent{Exited: true, ExitCode: int32(code), Status: fmt.Sprintf("exit status %d", code)}}},
	} {
		if err := stream.Send(&process.StartResponse{Event: ev}); err != nil {
			return err
		}
	}
	return nil
}

// lastInitWithToken returns the last /init body and the token it presented.
func (e *fakeEnvd) lastInitWithToken(t *testing.T) (initBody, string) {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.inits) == 0 {
		t.Fatal("envd got no /init")
	}
	return e.inits[len(e.inits)-1], e.initTokens[len(e.initTokens)-1]
}

type env struct {
	m     *Manager
	fake  *isolation.Fake
	envd  *fakeEnvd
	store *store.Store
	cfg   Config
}

// newEnv returns a started manager over a fake backend and a fresh store.
func newEnv(t *testing.T, mod func(*Config)) *env {
	t.Helper()
	return newEnvOn(t, isolation.NewFake(), mod)
}

// newEnvOn is newEnv over fake.
func newEnvOn(t *testing.T, fake *isolation.Fake, mod func(*Config)) *env {
	t.Helper()
	st, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "db.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e := &env{fake: fake, envd: &fakeEnvd{}, store: st}
	e.fake.Handle(EnvdPort, e.envd)
	e.cfg = Config{
		Store:     st,
		Backend:   e.fake,
		Templates: testTemplates,
		EnvdPath:  "/opt/envd",
		Log:       slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if mod != nil {
		mod(&e.cfg)
	}
	e.m = e.start(t)
	return e
}

// start starts another manager with e's config.
func (e *env) start(t *testing.T) *Manager {
	t.Helper()
	m, err := New(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func (e *env) create(t *testing.T, req CreateRequest) store.Sandbox {
	t.Helper()
	if req.Template == "" {
		req.Template = "base"
	}
	if req.Timeout == 0 {
		req.Timeout = 5 * time.Minute
	}
	sb, err := e.m.Create(context.Background(), req)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	return sb
}

// record reads the stored record, whatever its state.
func (e *env) record(t *testing.T, id string) store.Sandbox {
	t.Helper()
	sb, err := e.store.GetSandbox(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return sb
}

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	t0 := time.Now()
	for !cond() {
		if time.Since(t0) > d {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(t0)
}

var idRE = regexp.MustCompile(`^i[a-z0-9]{20}$`)

func TestCreate(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	t0 := time.Now()
	sb := e.create(t, CreateRequest{
		Timeout:  time.Minute,
		Metadata: map[string]string{"k": "v"},
		EnvVars:  map[string]string{"FOO": "request", "BAR": "1"},
		Secure:   true,
	})
	if !idRE.MatchString(sb.ID) {
		t.Errorf("ID %q does not look like an E2B ID", sb.ID)
	}
	if sb.State != store.StateRunning || sb.TemplateID != "base-0123456789ab" || sb.Alias != "base" ||
		sb.Backend != "fake" || sb.CPUCount != 2 || sb.MemoryMB != 512 || sb.DiskSizeMB != 1024 ||
		len(sb.EnvdAccessToken) != 64 || !sb.Secure || len(sb.BackendState) == 0 || sb.Metadata["k"] != "v" {
		t.Errorf("record = %+v", sb)
	}
	if d := sb.EndAt.Sub(t0); d < time.Minute || d > time.Minute+5*time.Second {
		t.Errorf("endAt is start + %v, want 1m", d)
	}

	// envd started with the record's token, and /init presents and keeps it.
	got, presented := e.envd.lastInitWithToken(t)
	if got.AccessToken != sb.EnvdAccessToken || presented != sb.EnvdAccessToken {
		t.Errorf("init accessToken %q presenting %q, want the record's token %q", got.AccessToken, presented, sb.EnvdAccessToken)
	}
	want := map[string]string{"LANG": "C.UTF-8", "FOO": "request", "BAR": "1"}
	if diff := cmp.Diff(want, got.EnvVars); diff != "" {
		t.Errorf("init envVars (-want +got):\n%s", diff)
	}
	if got.DefaultUser != "user" || got.DefaultWorkdir != "/home/user" || time.Since(got.Timestamp).Abs() > 5*time.Second {
		t.Errorf("init body = %+v", got)
	}

	spec := e.fake.Instance(sb.ID).Spec()
	wantSpec := isolation.Spec{ID: sb.ID, RootFS: "/templates/base/rootfs", EnvdPath: "/opt/envd", Hostname: sb.ID,
		Resources: isolation.Resources{CPUCount: 2, MemoryMB: 512, DiskSizeMB: 1024}, EnvdAccessToken: sb.EnvdAccessToken}
	if diff := cmp.Diff(wantSpec, spec); diff != "" {
		t.Errorf("spec (-want +got):\n%s", diff)
	}

	if g, err := e.m.Get(ctx, sb.ID); err != nil || g.State != store.StateRunning {
		t.Errorf("Get = %+v, %v", g, err)
	}
	list, _, err := e.m.List(ctx, store.ListQuery{})
	if err != nil || len(list) != 1 || list[0].ID != sb.ID {
		t.Errorf("List = %v, %v", list, err)
	}

	// Not secure: a token all the same, its own, which envd requires; our
	// other ports do not.
	sb2 := e.create(t, CreateRequest{})
	if len(sb2.EnvdAccessToken) != 64 || sb2.EnvdAccessToken == sb.EnvdAccessToken || sb2.Secure {
		t.Errorf("not secure: token %q (secure's %q), secure %v; want a token of its own", sb2.EnvdAccessToken, sb.EnvdAccessToken, sb2.Secure)
	}
	if got, presented := e.envd.lastInitWithToken(t); got.AccessToken != sb2.EnvdAccessToken || presented != sb2.EnvdAccessToken {
		t.Errorf("not secure: init accessToken %q presenting %q, want %q", got.AccessToken, presented, sb2.EnvdAccessToken)
	}
	if spec := e.fake.Instance(sb2.ID).Spec(); spec.EnvdAccessToken != sb2.EnvdAccessToken {
		t.Errorf("not secure: envd started with token %q, want %q", spec.EnvdAccessToken, sb2.EnvdAccessToken)
	}
	for _, c := range []struct {
		sb   store.Sandbox
		want string
	}{{sb, sb.EnvdAccessToken}, {sb2, ""}} {
		if in, err := e.m.Ingress(c.sb.ID); err != nil || in.AccessToken != c.want {
			t.Errorf("Ingress(%s, secure %v).AccessToken = %q, %v; want %q", c.sb.ID, c.sb.Secure, in.AccessToken, err, c.want)
		}
	}
}

func TestCreateInvalid(t *testing.T) {
	e := newEnv(t, nil)
	for _, tc := range []struct {
		name string
		req  CreateRequest
		msg  string
	}{
		{"unknown template", CreateRequest{Template: "nope", Timeout: time.Minute}, "template 'nope' not found"},
		{"zero timeout", CreateRequest{Template: "base"}, "Timeout must be greater than 0 seconds"},
		{"negative timeout", CreateRequest{Template: "base", Timeout: -time.Second}, "Timeout must be greater than 0 seconds"},
		{"timeout too long", CreateRequest{Template: "base", Timeout: 25 * time.Hour}, "Timeout cannot be greater than 24 hours"},
		{"bad network", CreateRequest{Template: "base", Timeout: time.Minute, Network: []byte("{")}, "network config is not valid JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.m.Create(context.Background(), tc.req)
			if !errors.Is(err, ErrInvalid) || err.Error() != tc.msg {
				t.Errorf("Create = %v, want ErrInvalid %q", err, tc.msg)
			}
		})
	}
	if ids := e.fake.Running(); len(ids) != 0 {
		t.Errorf("sandboxes started: %v", ids)
	}
	if recs, _ := e.store.ListSandboxesByState(context.Background()); len(recs) != 0 {
		t.Errorf("records left: %v", recs)
	}
}

func TestCreateFailures(t *testing.T) {
	ctx := context.Background()
	t.Run("backend start", func(t *testing.T) {
		e := newEnv(t, nil)
		e.fake.FailStarts(errors.New("no space"))
		_, err := e.m.Create(ctx, CreateRequest{Template: "base", Timeout: time.Minute})
		if err == nil || !strings.Contains(err.Error(), "starting: no space") {
			t.Fatalf("Create = %v, want the start error", err)
		}
		recs, _ := e.store.ListSandboxesByState(ctx)
		if len(recs) != 1 || recs[0].State != store.StateError || !strings.Contains(recs[0].Reason, "no space") {
			t.Errorf("records = %+v, want one in state error", recs)
		}
	})
	t.Run("envd init", func(t *testing.T) {
		e := newEnv(t, nil)
		e.envd.initHook = func() int { return http.StatusInternalServerError }
		_, err := e.m.Create(ctx, CreateRequest{Template: "base", Timeout: time.Minute})
		if err == nil || !strings.Contains(err.Error(), "initialising envd") {
			t.Fatalf("Create = %v, want an init error", err)
		}
		recs, _ := e.store.ListSandboxesByState(ctx)
		if len(recs) != 1 || recs[0].State != store.StateError {
			t.Fatalf("records = %+v, want one in state error", recs)
		}
		if !e.fake.Instance(recs[0].ID).Stopped() {
			t.Error("instance not stopped after a failed init")
		}
		if _, err := e.m.Get(ctx, recs[0].ID); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get of failed sandbox = %v", err)
		}
	})
}

func TestTimeoutKills(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	sb := e.create(t, CreateRequest{Timeout: time.Hour})
	if err := e.m.SetTimeout(ctx, sb.ID, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	endAt := e.record(t, sb.ID).EndAt
	waitFor(t, 3*time.Second, "killed on timeout", func() bool { return e.record(t, sb.ID).State == store.StateKilled })
	if late := time.Since(endAt); late > 1500*time.Millisecond {
		t.Errorf("killed %v after endAt", late)
	}
	if r := e.record(t, sb.ID); r.Reason != store.ReasonTimeout {
		t.Errorf("reason %q", r.Reason)
	}
	// The record goes first, then the instance is stopped.
	waitFor(t, 3*time.Second, "the instance stopped", func() bool { return e.fake.Instance(sb.ID).Stopped() })
	if _, err := e.m.Get(ctx, sb.ID); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "(timeout)") {
		t.Errorf("Get = %v, want ErrNotFound naming the reason", err)
	}
	if err := e.m.SetTimeout(ctx, sb.ID, time.Minute); !errors.Is(err, ErrNotFound) {
		t.Errorf("SetTimeout of killed = %v", err)
	}
	if err := e.m.SetTimeout(ctx, "inope", 25*time.Hour); !errors.Is(err, ErrInvalid) {
		t.Errorf("SetTimeout 25h = %v", err)
	}
}

func TestAutoPause(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	sb := e.create(t, CreateRequest{Timeout: time.Hour, AutoPause: true})
	if err := e.m.SetTimeout(ctx, sb.ID, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Second, "paused on timeout", func() bool { return e.record(t, sb.ID).State == store.StatePaused })
	if !e.fake.Instance(sb.ID).Paused() {
		t.Error("instance not paused")
	}
	// It stays paused (the loop does not touch paused sandboxes).
	time.Sleep(3 * timeoutTick)
	if r := e.record(t, sb.ID); r.State != store.StatePaused {
		t.Errorf("state %s", r.State)
	}
	if g, err := e.m.Get(ctx, sb.ID); err != nil || g.State != store.StatePaused {
		t.Errorf("Get = %+v, %v", g, err)
	}
}

func TestConnectExtendsOnly(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	sb := e.create(t, CreateRequest{Timeout: 10 * time.Minute})
	got, resumed, err := e.m.Connect(ctx, sb.ID, time.Minute, false)
	if err != nil || resumed {
		t.Fatalf("Connect = %v, %v", resumed, err)
	}
	if !got.EndAt.Equal(sb.EndAt) {
		t.Errorf("Connect(1m) moved endAt from %v to %v", sb.EndAt, got.EndAt)
	}
	got, _, err = e.m.Connect(ctx, sb.ID, 20*time.Minute, false)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Until(got.EndAt); d < 19*time.Minute || d > 20*time.Minute {
		t.Errorf("Connect(20m): endAt in %v", d)
	}
	if r := e.record(t, sb.ID); !r.EndAt.Equal(got.EndAt) {
		t.Errorf("stored endAt %v, returned %v", r.EndAt, got.EndAt)
	}
	if _, _, err := e.m.Connect(ctx, "inope", time.Minute, false); !errors.Is(err, ErrNotFound) {
		t.Errorf("Connect unknown = %v", err)
	}
	if _, _, err := e.m.Connect(ctx, sb.ID, 0, false); !errors.Is(err, ErrInvalid) {
		t.Errorf("Connect(0) = %v", err)
	}
}

func TestPauseAndConnectResumes(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	sb := e.create(t, CreateRequest{Timeout: time.Minute})
	conn, err := e.m.Dial(ctx, sb.ID, EnvdPort)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	readErr := reading(conn)

	if err := e.m.Pause(ctx, sb.ID, true); err != nil {
		t.Fatal(err)
	}
	expectClosed(t, readErr, "pause")
	if err := e.m.Pause(ctx, sb.ID, true); !errors.Is(err, ErrConflict) {
		t.Errorf("second Pause = %v, want ErrConflict", err)
	}
	if !e.fake.Instance(sb.ID).Paused() || e.record(t, sb.ID).State != store.StatePaused {
		t.Fatal("not paused")
	}
	if _, err := e.m.Dial(ctx, sb.ID, EnvdPort); !errors.Is(err, ErrPaused) {
		t.Errorf("Dial while paused = %v, want ErrPaused", err)
	}

	got, resumed, err := e.m.Connect(ctx, sb.ID, 2*time.Minute, false)
	if err != nil || !resumed {
		t.Fatalf("Connect = %v, %v; want resumed", resumed, err)
	}
	if got.State != store.StateRunning || e.fake.Instance(sb.ID).Paused() {
		t.Errorf("after resume: state %s, paused %v", got.State, e.fake.Instance(sb.ID).Paused())
	}
	if d := time.Until(got.EndAt); d < time.Minute+50*time.Second || d > 2*time.Minute {
		t.Errorf("endAt in %v after Connect(2m)", d)
	}
	if got.EnvdAccessToken != sb.EnvdAccessToken {
		t.Error("token changed across pause/resume")
	}
	c, err := e.m.Dial(ctx, sb.ID, EnvdPort)
	if err != nil {
		t.Fatalf("Dial after resume: %v", err)
	}
	c.Close()
	if _, err := e.m.Dial(ctx, sb.ID, 8000); !errors.Is(err, isolation.ErrPortClosed) {
		t.Errorf("Dial to a closed port = %v", err)
	}
}

// reading reads from c until it fails and reports the error.
func reading(c interface{ Read([]byte) (int, error) }) <-chan error {
	ch := make(chan error, 1)
	go func() {
		buf := make([]byte, 1)
		for {
			if _, err := c.Read(buf); err != nil {
				ch <- err
				return
			}
		}
	}()
	return ch
}

func expectClosed(t *testing.T, readErr <-chan error, after string) {
	t.Helper()
	select {
	case err := <-readErr:
		t.Logf("read after %s: %v", after, err)
	case <-time.After(2 * time.Second):
		t.Errorf("tracked connection still open after %s", after)
	}
}

func TestKill(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	sb := e.create(t, CreateRequest{Timeout: time.Minute})
	other := e.create(t, CreateRequest{Timeout: time.Minute})
	conn, err := e.m.Dial(ctx, sb.ID, EnvdPort)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	readErr := reading(conn)
	otherConn, err := e.m.Dial(ctx, other.ID, EnvdPort)
	if err != nil {
		t.Fatal(err)
	}
	defer otherConn.Close()

	if err := e.m.Kill(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	expectClosed(t, readErr, "kill")
	if r := e.record(t, sb.ID); r.State != store.StateKilled || r.Reason != store.ReasonKilled {
		t.Errorf("record %s %q", r.State, r.Reason)
	}
	// Kill returns once the sandbox has ended; the rest of its stop
	// follows in the background.
	select {
	case <-e.fake.Instance(sb.ID).Done():
	default:
		t.Error("instance runs after Kill returned")
	}
	waitFor(t, 3*time.Second, "the instance stopped", e.fake.Instance(sb.ID).Stopped)
	for name, err := range map[string]error{
		"Kill":    e.m.Kill(ctx, sb.ID),
		"Pause":   e.m.Pause(ctx, sb.ID, true),
		"Kill ?":  e.m.Kill(ctx, "nonexistingsandbox"),
		"Get":     second(e.m.Get(ctx, sb.ID)),
		"Dial":    second(e.m.Dial(ctx, sb.ID, EnvdPort)),
		"Metrics": second(e.m.Metrics(ctx, sb.ID, time.Time{}, time.Time{})),
	} {
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("%s after kill = %v, want ErrNotFound", name, err)
		}
	}
	if _, _, err := e.m.Connect(ctx, sb.ID, time.Minute, false); !errors.Is(err, ErrNotFound) {
		t.Errorf("Connect after kill = %v", err)
	}
	list, _, _ := e.m.List(ctx, store.ListQuery{})
	if len(list) != 1 || list[0].ID != other.ID {
		t.Errorf("List = %v, want only %s", list, other.ID)
	}
	if list, _, _ := e.m.List(ctx, store.ListQuery{States: []store.State{store.StateKilled}}); len(list) != 0 {
		t.Errorf("List(killed) = %v", list)
	}
	// The other sandbox's connection is untouched.
	if err := otherConn.SetReadDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if _, err := otherConn.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("other sandbox's connection: %v", err)
	}
}

func second[T any](_ T, err error) error { return err }

func TestInstanceDies(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	oom := e.create(t, CreateRequest{Timeout: time.Minute})
	crash := e.create(t, CreateRequest{Timeout: time.Minute})
	e.fake.Instance(oom.ID).Crash(isolation.Exit{OOM: true, Reason: "init exited (1 processes killed by the memory limit)"})
	e.fake.Instance(crash.ID).Crash(isolation.Exit{Reason: "init exited: signal: killed"})
	waitFor(t, 2*time.Second, "deaths recorded", func() bool {
		return e.record(t, oom.ID).State == store.StateKilled && e.record(t, crash.ID).State == store.StateError
	})
	if r := e.record(t, oom.ID); r.Reason != store.ReasonOOM {
		t.Errorf("oom reason %q", r.Reason)
	}
	if r := e.record(t, crash.ID); r.Reason != "exited: init exited: signal: killed" {
		t.Errorf("crash reason %q", r.Reason)
	}
	for _, id := range []string{oom.ID, crash.ID} {
		if _, err := e.m.Get(ctx, id); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get(%s) = %v", id, err)
		}
		if _, err := e.m.Dial(ctx, id, EnvdPort); !errors.Is(err, ErrNotFound) {
			t.Errorf("Dial(%s) = %v", id, err)
		}
	}
}

func TestMetrics(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.MetricsEvery = 20 * time.Millisecond })
	ctx := context.Background()
	before := time.Now()
	sb := e.create(t, CreateRequest{Timeout: time.Minute})
	e.fake.Instance(sb.ID).SetStats(isolation.Stats{CPUCount: 2, CPUUsedPct: 12.5, MemUsed: 1 << 20, MemTotal: 512 << 20, DiskUsed: 3, DiskTotal: 4})
	var got []Metric
	waitFor(t, 3*time.Second, "two samples", func() bool {
		var err error
		got, err = e.m.Metrics(ctx, sb.ID, before, time.Now().Add(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		return len(got) >= 2 && got[len(got)-1].CPUUsedPct == 12.5
	})
	last := got[len(got)-1]
	if last.CPUCount != 2 || last.MemUsed != 1<<20 || last.MemTotal != 512<<20 || last.DiskTotal != 4 {
		t.Errorf("sample %+v", last)
	}
	for i := 1; i < len(got); i++ {
		if got[i].Timestamp.Before(got[i-1].Timestamp) {
			t.Errorf("samples out of order at %d", i)
		}
	}
	early, err := e.m.Metrics(ctx, sb.ID, before.Add(-time.Hour), before.Add(-time.Minute))
	if err != nil || early == nil || len(early) != 0 {
		t.Errorf("Metrics before the sandbox existed = %#v, %v; want empty non-nil", early, err)
	}
	// Paused sandboxes are not sampled.
	if err := e.m.Pause(ctx, sb.ID, true); err != nil {
		t.Fatal(err)
	}
	n := len(second2(e.m.Metrics(ctx, sb.ID, time.Time{}, time.Time{})))
	time.Sleep(100 * time.Millisecond)
	if m := len(second2(e.m.Metrics(ctx, sb.ID, time.Time{}, time.Time{}))); m != n {
		t.Errorf("paused sandbox sampled: %d → %d", n, m)
	}
}

func second2[T any](v T, _ error) T { return v }

func TestRing(t *testing.T) {
	r := newRing(3)
	var got []int
	collect := func() []int {
		got = got[:0]
		r.each(func(m Metric) { got = append(got, m.CPUCount) })
		return got
	}
	if len(collect()) != 0 {
		t.Fatal("new ring not empty")
	}
	for i := 1; i <= 5; i++ {
		r.add(Metric{CPUCount: i})
	}
	if diff := cmp.Diff([]int{3, 4, 5}, collect()); diff != "" {
		t.Errorf("ring (-want +got):\n%s", diff)
	}
}

// leftoverFake is a Fake that also lists leftovers, as jail.Backend does.
type leftoverFake struct{ *isolation.Fake }

func (f leftoverFake) Leftovers(known map[string]bool) ([]string, error) {
	var out []string
	for _, id := range f.Running() {
		if !known[id] {
			out = append(out, id)
		}
	}
	return out, nil
}

func TestReconcile(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Backend = leftoverFake{c.Backend.(*isolation.Fake)} })
	fake := e.fake
	ctx := context.Background()

	live := e.create(t, CreateRequest{Timeout: time.Minute, Secure: true})
	paused := e.create(t, CreateRequest{Timeout: time.Minute})
	halfPaused := e.create(t, CreateRequest{Timeout: time.Minute})
	dead := e.create(t, CreateRequest{Timeout: time.Minute})
	if err := e.m.Pause(ctx, paused.ID, true); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Pause(ctx, halfPaused.ID, true); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Close(); err != nil {
		t.Fatal(err)
	}
	// While no server runs: one sandbox dies, one is thawed as if the server
	// crashed between recording the pause and freezing, one is left
	// starting, and one runs that no record mentions.
	fake.Instance(dead.ID).Crash(isolation.Exit{Reason: "gone"})
	if err := fake.Instance(halfPaused.ID).Resume(ctx); err != nil {
		t.Fatal(err)
	}
	starting, err := e.store.CreateSandbox(ctx, store.Sandbox{ID: "istarting", TemplateID: "base", State: store.StateStarting, Backend: "fake"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fake.Start(ctx, isolation.Spec{ID: "istarting"}); err != nil {
		t.Fatal(err)
	}
	if _, err := fake.Start(ctx, isolation.Spec{ID: "iorphan"}); err != nil {
		t.Fatal(err)
	}
	other, err := e.store.CreateSandbox(ctx, store.Sandbox{ID: "iother", TemplateID: "base", State: store.StateRunning, Backend: "vm"})
	if err != nil {
		t.Fatal(err)
	}

	m2 := e.start(t)
	e.m = m2

	wantState := map[string]store.State{
		live.ID:       store.StateRunning,
		paused.ID:     store.StatePaused,
		halfPaused.ID: store.StatePaused,
		dead.ID:       store.StateKilled,
		starting.ID:   store.StateError,
		other.ID:      store.StateKilled,
	}
	for id, want := range wantState {
		if r := e.record(t, id); r.State != want {
			t.Errorf("%s: state %s (%q), want %s", id, r.State, r.Reason, want)
		}
	}
	if r := e.record(t, dead.ID); r.Reason != reasonLost {
		t.Errorf("dead reason %q", r.Reason)
	}
	if !fake.Instance(halfPaused.ID).Paused() {
		t.Error("sandbox recorded paused was not re-paused")
	}
	if diff := cmp.Diff(sorted([]string{halfPaused.ID, live.ID, paused.ID}), sorted(fake.Running())); diff != "" {
		t.Errorf("running after reconcile (-want +got):\n%s", diff)
	}

	// The adopted sandboxes work through the new manager.
	c, err := m2.Dial(ctx, live.ID, EnvdPort)
	if err != nil {
		t.Fatalf("Dial adopted: %v", err)
	}
	c.Close()
	if _, resumed, err := m2.Connect(ctx, paused.ID, time.Minute, false); err != nil || !resumed {
		t.Errorf("Connect adopted paused = %v, %v", resumed, err)
	}
	if err := m2.Kill(ctx, live.ID); err != nil {
		t.Errorf("Kill adopted: %v", err)
	}
	list, _, _ := m2.List(ctx, store.ListQuery{})
	if len(list) != 2 {
		t.Errorf("List after reconcile = %d sandboxes, want 2", len(list))
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func TestConcurrentCreates(t *testing.T) {
	const n = 20
	e := newEnv(t, nil)
	// /init waits until every create is inside it: creates must not be
	// serialized by a lock held across Start.
	var (
		mu       sync.Mutex
		inflight int
		peak     int
		all      = make(chan struct{})
	)
	e.envd.initHook = func() int {
		mu.Lock()
		inflight++
		peak = max(peak, inflight)
		if inflight == n {
			close(all)
		}
		mu.Unlock()
		select {
		case <-all:
		case <-time.After(5 * time.Second):
		}
		mu.Lock()
		inflight--
		mu.Unlock()
		return http.StatusNoContent
	}
	var wg sync.WaitGroup
	ids := make([]string, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			sb, err := e.m.Create(context.Background(), CreateRequest{Template: "base", Timeout: time.Minute, Secure: true})
			ids[i], errs[i] = sb.ID, err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if peak != n {
		t.Errorf("at most %d creates were in /init at once, want %d", peak, n)
	}
	if got := len(e.fake.Running()); got != n {
		t.Errorf("%d running, want %d", got, n)
	}
	slices.Sort(ids)
	if len(slices.Compact(ids)) != n {
		t.Error("duplicate IDs")
	}
	list, _, _ := e.m.List(context.Background(), store.ListQuery{})
	if len(list) != n {
		t.Errorf("List = %d", len(list))
	}
}

func TestNewID(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := NewID()
		if !idRE.MatchString(id) || seen[id] {
			t.Fatalf("bad or repeated ID %q", id)
		}
		seen[id] = true
	}
}

func TestListBadToken(t *testing.T) {
	e := newEnv(t, nil)
	_, _, err := e.m.List(context.Background(), store.ListQuery{NextToken: "garbage!"})
	if !errors.Is(err, ErrInvalid) || !errors.Is(err, store.ErrInvalidToken) {
		t.Errorf("List with a bad token = %v", err)
	}
}

func TestIngress(t *testing.T) {
	e := newEnv(t, nil)
	private := e.create(t, CreateRequest{Template: "base", Timeout: time.Minute,
		Network: []byte(`{"allowPublicTraffic":false,"maskRequestHost":"app:${PORT}"}`)})
	public := e.create(t, CreateRequest{Template: "base", Timeout: time.Minute})
	if in, err := e.m.Ingress(private.ID); err != nil || in.TrafficToken == "" || in.TrafficToken != private.TrafficAccessToken || in.MaskRequestHost != "app:${PORT}" {
		t.Errorf("private sandbox: Ingress = %+v, %v; want the recorded token %q and the mask", in, err, private.TrafficAccessToken)
	}
	if in, err := e.m.Ingress(public.ID); err != nil || in != (Ingress{}) {
		t.Errorf("public sandbox: Ingress = %+v, %v; want none", in, err)
	}
	if _, err := e.m.Ingress("inope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown sandbox: %v, want ErrNotFound", err)
	}
}
