package codeinterp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// testServer is a Server on a loopback listener with fake runtimes for
// python, javascript and bash.
type testServer struct {
	*Server
	url                string
	python, js, bashFF *fakeFactory
}

func newTestServer(t *testing.T, edit func(*Config)) *testServer {
	t.Helper()
	ts := &testServer{python: &fakeFactory{}, js: &fakeFactory{}, bashFF: &fakeFactory{}}
	cfg := Config{
		Runtimes: map[string]Factory{
			"python":     ts.python.factory,
			"javascript": ts.js.factory,
			"bash":       ts.bashFF.factory,
		},
		EnvdURL:   "http://127.0.0.1:1", // nothing listens: envd unreachable
		Keepalive: time.Hour,
	}
	if edit != nil {
		edit(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		hs.Close()
		s.Close()
	})
	ts.Server, ts.url = s, hs.URL
	return ts
}

// do sends a request and returns the status and body.
func do(t *testing.T, method, url string, body any) (int, string) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, url, r)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// execute posts to /execute and returns the status and the stream's lines,
// checking that each is one JSON object.
func execute(t *testing.T, ctx context.Context, url string, body map[string]any, header http.Header) (int, []map[string]any) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/execute", bytes.NewReader(b))
	maps := header.Clone()
	if maps == nil {
		maps = http.Header{}
	}
	req.Header = maps
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, nil
	}
	var lines []map[string]any
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q is not a JSON object: %v", sc.Text(), err)
		}
		lines = append(lines, m)
	}
	return resp.StatusCode, lines
}

// withoutTimestamps drops stdout/stderr timestamps (checked apart) and
// keepalive lines.
func withoutTimestamps(t *testing.T, lines []map[string]any) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range lines {
		if l["type"] == "keepalive" {
			continue
		}
		if ts, ok := l["timestamp"].(string); ok {
			if _, err := time.Parse(time.RFC3339Nano, ts); err != nil || !strings.HasSuffix(ts, "Z") {
				t.Errorf("timestamp %q is not RFC 3339 UTC", ts)
			}
			delete(l, "timestamp")
		}
		out = append(out, l)
	}
	return out
}

func TestHealth(t *testing.T) {
	ts := newTestServer(t, nil)
	status, body := do(t, http.MethodGet, ts.url+"/health", nil)
	if status != http.StatusOK || body != "\"OK\"\n" {
		t.Errorf("GET /health = %d %q, want 200 \"OK\"", status, body)
	}
}

func TestExecuteStream(t *testing.T) {
	ts := newTestServer(t, nil)
	tests := []struct {
		name string
		code string
		want []map[string]any
	}{
		{"stdout", "print:hello\n", []map[string]any{
			{"type": "number_of_executions", "execution_count": 1.0},
			{"type": "stdout", "text": "hello\n"},
			{"type": "end_of_execution"},
		}},
		{"stderr", "stderr:oops", []map[string]any{
			{"type": "number_of_executions", "execution_count": 2.0},
			{"type": "stderr", "text": "oops"},
			{"type": "end_of_execution"},
		}},
		{"results", "result", []map[string]any{
			{"type": "number_of_executions", "execution_count": 3.0},
			{
				"type": "result", "is_main_result": true, "text": "abc", "html": "<b>abc</b>",
				"png": "iVBORw0KGgo=", "json": map[string]any{"a": 1.0}, "chart": map[string]any{"type": "line"},
				"extra": map[string]any{"application/x-custom": "custom"},
			},
			{"type": "result", "is_main_result": false, "markdown": "# hi"},
			{"type": "end_of_execution"},
		}},
		{"error", "fail", []map[string]any{
			{"type": "number_of_executions", "execution_count": 4.0},
			{"type": "error", "name": "ValueError", "value": "bad value", "traceback": "line 1\nline 2"},
			{"type": "end_of_execution"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, lines := execute(t, context.Background(), ts.url, map[string]any{"code": tt.code}, nil)
			if status != http.StatusOK {
				t.Fatalf("status %d", status)
			}
			if diff := cmp.Diff(tt.want, withoutTimestamps(t, lines)); diff != "" {
				t.Errorf("lines (-want +got):\n%s", diff)
			}
		})
	}
	if n := len(ts.python.all()); n != 1 {
		t.Errorf("%d python runtimes, want the one default context", n)
	}
}

func TestResultLine(t *testing.T) {
	tests := []struct {
		name string
		data map[string]any
		want map[string]any
	}{
		{"quotes stripped once", map[string]any{"text/plain": "''x''"}, map[string]any{"text": "'x'"}},
		{"double quotes kept", map[string]any{"text/plain": `"x"`}, map[string]any{"text": `"x"`}},
		{"lone quote kept", map[string]any{"text/plain": "'"}, map[string]any{"text": "'"}},
		{"null omitted", map[string]any{"text/html": nil, "text/latex": "$x$"}, map[string]any{"latex": "$x$"}},
		{"all fields", map[string]any{
			"image/svg+xml": "<svg/>", "image/jpeg": "j", "application/pdf": "p",
			"application/javascript": "js", "e2b/data": map[string]any{"a": []any{1.0}}, "text/markdown": "m",
		}, map[string]any{
			"svg": "<svg/>", "jpeg": "j", "pdf": "p", "javascript": "js",
			"data": map[string]any{"a": []any{1.0}}, "markdown": "m",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := resultLine(tt.data, false)
			tt.want["type"], tt.want["is_main_result"] = "result", false
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("resultLine (-want +got):\n%s", diff)
			}
		})
	}
}

func TestExecuteRequestErrors(t *testing.T) {
	failing := &fakeFactory{fail: errors.New("no kernel")}
	ts := newTestServer(t, func(c *Config) { c.Runtimes["r"] = failing.factory })
	tests := []struct {
		name       string
		body       map[string]any
		wantStatus int
		wantText   string
	}{
		{"context and language", map[string]any{"code": "1", "context_id": "x", "language": "python"}, 400, "Only one of context_id or language can be provided"},
		{"unknown context", map[string]any{"code": "1", "context_id": "nope"}, 404, "Context nope not found"},
		{"unknown language", map[string]any{"code": "1", "language": "cobol"}, 500, `unsupported language "cobol": supported languages are bash, javascript, python, r, typescript`},
		{"runtime fails to start", map[string]any{"code": "1", "language": "R"}, 500, "starting r runtime in /home/user: no kernel"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, _ := json.Marshal(tt.body)
			resp, err := http.Post(ts.url+"/execute", "application/json", bytes.NewReader(b))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			text, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.wantStatus || string(text) != tt.wantText {
				t.Errorf("got %d %q, want %d %q", resp.StatusCode, text, tt.wantStatus, tt.wantText)
			}
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
				t.Errorf("Content-Type %q, want text/plain", ct)
			}
		})
	}
}

func TestContexts(t *testing.T) {
	ts := newTestServer(t, nil)

	create := func(body map[string]any) contextJSON {
		t.Helper()
		status, text := do(t, http.MethodPost, ts.url+"/contexts", body)
		if status != http.StatusOK {
			t.Fatalf("POST /contexts %v = %d %s", body, status, text)
		}
		var c contextJSON
		if err := json.Unmarshal([]byte(text), &c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	py := create(map[string]any{})
	js := create(map[string]any{"language": " JS ", "cwd": "/work"})
	tsx := create(map[string]any{"language": "ts"})
	bash := create(map[string]any{"language": "bash"})

	if py.Language != "python" || py.Cwd != "/home/user" || js.Language != "javascript" || js.Cwd != "/work" ||
		tsx.Language != "typescript" || bash.Language != "bash" {
		t.Errorf("contexts = %+v %+v %+v %+v", py, js, tsx, bash)
	}
	if ids := map[string]bool{py.ID: true, js.ID: true, tsx.ID: true, bash.ID: true}; len(ids) != 4 {
		t.Errorf("context ids are not unique: %v", ids)
	}
	if n := len(ts.js.all()); n != 2 {
		t.Errorf("%d javascript runtimes, want 2 (javascript and typescript)", n)
	}
	if cwd := ts.js.all()[0].cwd; cwd != "/work" {
		t.Errorf("the factory got cwd %q, want /work", cwd)
	}

	list := func() []contextJSON {
		t.Helper()
		status, text := do(t, http.MethodGet, ts.url+"/contexts", nil)
		if status != http.StatusOK {
			t.Fatalf("GET /contexts = %d", status)
		}
		var l []contextJSON
		if err := json.Unmarshal([]byte(text), &l); err != nil {
			t.Fatal(err)
		}
		return l
	}
	if diff := cmp.Diff([]contextJSON{py, js, tsx, bash}, list()); diff != "" {
		t.Errorf("GET /contexts (-want +got):\n%s", diff)
	}

	// Restart: same id, language and cwd; a fresh runtime.
	old := ts.js.all()[0]
	status, text := do(t, http.MethodPost, ts.url+"/contexts/"+js.ID+"/restart", nil)
	if status != http.StatusOK || text != "null\n" {
		t.Errorf("restart = %d %q, want 200 null", status, text)
	}
	fresh := ts.js.last()
	if !old.isClosed() || fresh == old || fresh.cwd != "/work" {
		t.Errorf("restart: old closed %v, fresh runtime %p (old %p) in %q", old.isClosed(), fresh, old, fresh.cwd)
	}
	_, lines := execute(t, context.Background(), ts.url, map[string]any{"code": "print:x", "context_id": js.ID}, nil)
	if got := lines[0]["execution_count"]; got != 1.0 {
		t.Errorf("execution count after restart = %v, want 1", got)
	}

	// Delete.
	status, text = do(t, http.MethodDelete, ts.url+"/contexts/"+bash.ID, nil)
	if status != http.StatusOK || text != "null\n" {
		t.Errorf("delete = %d %q, want 200 null", status, text)
	}
	if !ts.bashFF.last().isClosed() {
		t.Error("delete left the runtime running")
	}
	if diff := cmp.Diff([]contextJSON{py, js, tsx}, list()); diff != "" {
		t.Errorf("GET /contexts after delete (-want +got):\n%s", diff)
	}

	for _, tc := range []struct{ method, path string }{
		{http.MethodDelete, "/contexts/" + bash.ID},
		{http.MethodPost, "/contexts/nope/restart"},
	} {
		status, text := do(t, tc.method, ts.url+tc.path, nil)
		id := strings.Split(tc.path, "/")[2]
		if status != http.StatusNotFound || text != "Context "+id+" not found" {
			t.Errorf("%s %s = %d %q, want 404", tc.method, tc.path, status, text)
		}
	}

	status, text = do(t, http.MethodPost, ts.url+"/contexts", map[string]any{"language": "cobol"})
	if status != http.StatusInternalServerError || !strings.Contains(text, "supported languages are") {
		t.Errorf("unknown language = %d %q, want 500 naming the languages", status, text)
	}
}

func TestStartAndDefaultContexts(t *testing.T) {
	ts := newTestServer(t, nil)
	ts.js.fail = errors.New("no node")
	if err := ts.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, text := do(t, http.MethodGet, ts.url+"/contexts", nil)
	var l []contextJSON
	_ = json.Unmarshal([]byte(text), &l)
	if len(l) != 1 || l[0].Language != "python" {
		t.Fatalf("contexts after Start = %+v, want the python one only", l)
	}

	// No language and language python both use the default python context.
	for _, body := range []map[string]any{{"code": "print:a"}, {"code": "print:b", "language": "Python"}} {
		execute(t, context.Background(), ts.url, body, nil)
	}
	if n := len(ts.python.all()); n != 1 {
		t.Errorf("%d python runtimes, want 1", n)
	}

	// javascript failed at Start and is created lazily once it can be.
	ts.js.mu.Lock()
	ts.js.fail = nil
	ts.js.mu.Unlock()
	for range 2 {
		status, _ := execute(t, context.Background(), ts.url, map[string]any{"code": "print:c", "language": "js"}, nil)
		if status != http.StatusOK {
			t.Fatalf("status %d", status)
		}
	}
	if n := len(ts.js.all()); n != 1 {
		t.Errorf("%d javascript runtimes, want 1 default", n)
	}

	// A deleted default context is created again on next use.
	_ = json.Unmarshal([]byte(text), &l)
	do(t, http.MethodDelete, ts.url+"/contexts/"+l[0].ID, nil)
	if status, _ := execute(t, context.Background(), ts.url, map[string]any{"code": "print:d"}, nil); status != http.StatusOK {
		t.Errorf("execute after deleting the default context: %d", status)
	}
	if n := len(ts.python.all()); n != 2 {
		t.Errorf("%d python runtimes, want 2", n)
	}
}

func TestKeepalive(t *testing.T) {
	ts := newTestServer(t, func(c *Config) { c.Keepalive = 50 * time.Millisecond })
	_, lines := execute(t, context.Background(), ts.url, map[string]any{"code": "sleep:300ms"}, nil)
	var types []string
	for _, l := range lines {
		types = append(types, l["type"].(string))
	}
	got := strings.Join(types, " ")
	if !strings.HasPrefix(got, "number_of_executions keepalive keepalive") || !strings.HasSuffix(got, "stdout end_of_execution") {
		t.Errorf("line types %q, want keepalives during the sleep", got)
	}
}

func TestEnvVars(t *testing.T) {
	ts := newTestServer(t, nil)
	run := func(code string, env map[string]string) string {
		t.Helper()
		_, lines := execute(t, context.Background(), ts.url, map[string]any{"code": code, "env_vars": env}, nil)
		for _, l := range lines {
			if l["type"] == "stdout" {
				return l["text"].(string)
			}
		}
		return ""
	}
	if got := run("env:A", map[string]string{"A": "1"}); got != "1" {
		t.Errorf("A during the execution = %q, want 1", got)
	}
	if got := run("env:A", nil); got != "<unset>" {
		t.Errorf("A after the execution = %q, want it restored (unset)", got)
	}
	run("fail", map[string]string{"A": "2"})
	if got := run("env:A", nil); got != "<unset>" {
		t.Errorf("A after a failed execution = %q, want it restored", got)
	}
}

func TestSandboxEnvFromEnvd(t *testing.T) {
	var mu sync.Mutex
	var tokens []string
	envd := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/envs" || r.Method != http.MethodGet {
			http.NotFound(w, r)
			return
		}
		mu.Lock()
		tokens = append(tokens, r.Header.Get("X-Access-Token"))
		mu.Unlock()
		_, _ = io.WriteString(w, `{"SANDBOX_VAR":"from-envd"}`)
	}))
	defer envd.Close()
	ts := newTestServer(t, func(c *Config) { c.EnvdURL = envd.URL + "/" })

	hdr := http.Header{"X-Access-Token": {"secret"}}
	for range 2 {
		_, lines := execute(t, context.Background(), ts.url, map[string]any{"code": "env:SANDBOX_VAR"}, hdr)
		if got := lines[1]["text"]; got != "from-envd" {
			t.Errorf("SANDBOX_VAR = %v, want from-envd", got)
		}
	}
	execute(t, context.Background(), ts.url, map[string]any{"code": "env:SANDBOX_VAR", "language": "bash"}, hdr)
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff([]string{"secret", "secret"}, tokens); diff != "" {
		t.Errorf("envd saw tokens (-want +got), want one fetch per context:\n%s", diff)
	}
}

func TestEnvdUnreachable(t *testing.T) {
	ts := newTestServer(t, nil) // EnvdURL points at a closed port
	status, lines := execute(t, context.Background(), ts.url, map[string]any{"code": "print:ok"}, nil)
	if status != http.StatusOK || len(lines) != 3 || lines[1]["text"] != "ok" {
		t.Errorf("execute with envd down = %d %v", status, lines)
	}
}

func TestDisconnectInterrupts(t *testing.T) {
	ts := newTestServer(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	b, _ := json.Marshal(map[string]any{"code": "block"})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.url+"/execute", bytes.NewReader(b))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	// Wait for the first line, so the execution has started.
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	rt := ts.python.last()
	cancel()
	resp.Body.Close()
	select {
	case <-rt.cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the runtime's execution was not cancelled after the client left")
	}
	// The context is free again and the runtime was not replaced.
	_, lines := execute(t, context.Background(), ts.url, map[string]any{"code": "print:next"}, nil)
	if len(lines) != 3 || lines[1]["text"] != "next" || len(ts.python.all()) != 1 {
		t.Errorf("after the interrupt: %v (%d runtimes)", lines, len(ts.python.all()))
	}
}

func TestExecutionsSerialized(t *testing.T) {
	ts := newTestServer(t, nil)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			execute(t, context.Background(), ts.url, map[string]any{"code": "sleep:50ms"}, nil)
		})
	}
	wg.Wait()
	rt := ts.python.last()
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.overlap || rt.count != 4 {
		t.Errorf("overlap %v, count %d: want 4 executions one at a time", rt.overlap, rt.count)
	}
}

func TestRuntimeDeath(t *testing.T) {
	ts := newTestServer(t, nil)
	_, lines := execute(t, context.Background(), ts.url, map[string]any{"code": "die", "language": "bash"}, nil)
	want := []map[string]any{
		{"type": "number_of_executions", "execution_count": 1.0},
		{"type": "error", "name": "UnexpectedEndOfExecution", "value": "Connection to the execution was closed before the execution was finished", "traceback": ""},
		{"type": "end_of_execution"},
	}
	if diff := cmp.Diff(want, lines); diff != "" {
		t.Errorf("lines (-want +got):\n%s", diff)
	}
	dead := ts.bashFF.all()[0]
	_, lines = execute(t, context.Background(), ts.url, map[string]any{"code": "print:alive", "language": "bash"}, nil)
	if len(lines) != 3 || lines[1]["text"] != "alive" || lines[0]["execution_count"] != 1.0 {
		t.Errorf("after the death: %v", lines)
	}
	all := ts.bashFF.all()
	if len(all) != 2 || !dead.isClosed() || all[1].cwd != dead.cwd {
		t.Errorf("want the dead runtime closed and replaced in the same cwd; runtimes %d", len(all))
	}
}

func TestRestartDuringExecution(t *testing.T) {
	ts := newTestServer(t, nil)
	status, text := do(t, http.MethodPost, ts.url+"/contexts", map[string]any{})
	if status != http.StatusOK {
		t.Fatal(text)
	}
	var c contextJSON
	_ = json.Unmarshal([]byte(text), &c)
	done := make(chan []map[string]any)
	go func() {
		_, lines := execute(t, context.Background(), ts.url, map[string]any{"code": "sleep:300ms", "context_id": c.ID}, nil)
		done <- lines
	}()
	time.Sleep(100 * time.Millisecond)
	do(t, http.MethodPost, ts.url+"/contexts/"+c.ID+"/restart", nil)
	lines := <-done
	want := []map[string]any{
		{"type": "number_of_executions", "execution_count": 1.0},
		{"type": "error", "name": "ContextRestarting", "value": "Context was restarted", "traceback": ""},
		{"type": "end_of_execution"},
	}
	if diff := cmp.Diff(want, lines); diff != "" {
		t.Errorf("lines of the execution cut by the restart (-want +got):\n%s", diff)
	}
	_, lines = execute(t, context.Background(), ts.url, map[string]any{"code": "print:x", "context_id": c.ID}, nil)
	if lines[1]["text"] != "x" {
		t.Errorf("after restart: %v", lines)
	}
}
