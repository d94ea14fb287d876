package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestRun(t *testing.T) {
	h := newHarness(t)
	sb := h.sandbox(t)
	tests := []struct {
		name       string
		cmd        string
		opts       RunOptions
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{name: "stdout", cmd: "echo hello", wantStdout: "hello\n"},
		{name: "stderr and exit code", cmd: "echo oops >&2; exit 3", wantCode: 3, wantStderr: "oops\n"},
		{name: "env", cmd: `echo "$A $B"`, opts: RunOptions{Envs: map[string]string{"A": "1", "B": "two words"}},
			wantStdout: "1 two words\n"},
		{name: "cwd", cmd: "pwd", opts: RunOptions{Cwd: "/tmp"}, wantStdout: "/tmp\n"},
		{name: "user", cmd: "id -un", opts: RunOptions{User: h.user}, wantStdout: h.user + "\n"},
		{name: "stdin", cmd: "tr a-z A-Z", opts: RunOptions{Stdin: strings.NewReader("shout\n")}, wantStdout: "SHOUT\n"},
		{name: "no stdin is /dev/null", cmd: "cat; echo done", wantStdout: "done\n"},
		{name: "killed by a signal", cmd: "kill -9 $$", wantCode: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			tt.opts.Stdout, tt.opts.Stderr = &stdout, &stderr
			code, err := sb.Run(t.Context(), tt.cmd, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			if code != tt.wantCode {
				t.Errorf("exit code = %d, want %d", code, tt.wantCode)
			}
			if stdout.String() != tt.wantStdout {
				t.Errorf("stdout = %q, want %q", stdout.String(), tt.wantStdout)
			}
			// A login shell may print warnings of its own; only check
			// what the command wrote.
			if !strings.Contains(stderr.String(), tt.wantStderr) {
				t.Errorf("stderr = %q, want it to contain %q", stderr.String(), tt.wantStderr)
			}
		})
	}
}

func TestRunHeaders(t *testing.T) {
	h := newHarness(t)
	sb := h.sandbox(t)
	if _, err := sb.Run(t.Context(), "true", RunOptions{User: h.user}); err != nil {
		t.Fatal(err)
	}
	hdrs := h.envd.requestHeaders()
	if len(hdrs) == 0 {
		t.Fatal("envd saw no request")
	}
	got := hdrs[len(hdrs)-1]
	want := map[string]string{
		"X-Access-Token":           testToken,
		"Keepalive-Ping-Interval":  "50",
		"Authorization":            "Basic " + b64(h.user+":"),
		"Content-Type":             "application/connect+json",
		"Connect-Protocol-Version": "1",
	}
	for k, v := range want {
		if got.Get(k) != v {
			t.Errorf("header %s = %q, want %q", k, got.Get(k), v)
		}
	}
	// Without a user, no Authorization header: envd's default user applies.
	if _, err := sb.Run(t.Context(), "true", RunOptions{}); err != nil {
		t.Fatal(err)
	}
	hdrs = h.envd.requestHeaders()
	if a := hdrs[len(hdrs)-1].Get("Authorization"); a != "" {
		t.Errorf("Authorization = %q without a user", a)
	}
}

// notifyWriter signals once the first write arrives.
type notifyWriter struct {
	once sync.Once
	buf  bytes.Buffer
	mu   sync.Mutex
	ch   chan struct{}
}

func (w *notifyWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.buf.Write(p)
	w.mu.Unlock()
	w.once.Do(func() { close(w.ch) })
	return len(p), nil
}

func (w *notifyWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

func TestRunCanceledKillsTheCommand(t *testing.T) {
	h := newHarness(t)
	sb := h.sandbox(t)
	ctx, cancel := context.WithCancel(t.Context())
	out := &notifyWriter{ch: make(chan struct{})}
	go func() {
		<-out.ch
		cancel()
	}()
	_, err := sb.Run(ctx, "echo $$; exec sleep 30", RunOptions{Stdout: out})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v, want context.Canceled", err)
	}
	pid := strings.TrimSpace(out.String())
	// Poll: the killed process may be a zombie for a moment.
	check := fmt.Sprintf("for i in $(seq 100); do kill -0 %s 2>/dev/null || exit 0; sleep 0.05; done; exit 1", pid)
	code, err := sb.Run(t.Context(), check, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if code != 0 {
		t.Errorf("process %s still runs after Run was canceled", pid)
	}
}

func TestRunDeadline(t *testing.T) {
	h := newHarness(t)
	sb := h.sandbox(t)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := sb.Run(ctx, "sleep 30", RunOptions{}); err == nil {
		t.Fatal("Run past its deadline succeeded")
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Run took %v after a 300ms deadline", d)
	}
}

// TestRunKilledJustBeforeTheDeadline: envd counts a command's timeout
// from when the request reached it, in the whole milliseconds Connect
// sends, so its kill at the deadline can reach Run just before ctx
// expires. Run reports the deadline then, not the kill's exit code; here
// envd is told a timeout 20 ms shorter, so that this always happens.
func TestRunKilledJustBeforeTheDeadline(t *testing.T) {
	h := newHarness(t)
	h.envd.mu.Lock()
	inner := h.envd.handler
	h.envd.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ms, err := strconv.Atoi(r.Header.Get("Connect-Timeout-Ms")); err == nil && ms > 20 {
			r.Header.Set("Connect-Timeout-Ms", strconv.Itoa(ms-20))
		}
		inner.ServeHTTP(w, r)
	})
	h.envd.mu.Unlock()
	sb := h.sandbox(t)
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	code, err := sb.Run(ctx, "sleep 30", RunOptions{})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Run killed at its deadline = %d, %v; want context.DeadlineExceeded", code, err)
	}
}

func TestRunBadCwd(t *testing.T) {
	h := newHarness(t)
	sb := h.sandbox(t)
	if _, err := sb.Run(t.Context(), "true", RunOptions{Cwd: "/does/not/exist"}); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("Run with a missing cwd: %v", err)
	}
}

func TestPTY(t *testing.T) {
	h := newHarness(t)
	sb := h.sandbox(t)
	p, err := sb.PTY(t.Context(), PTYOptions{Cols: 80, Rows: 24})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.PID() == 0 {
		t.Error("PID() = 0")
	}
	outc := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(p.Output())
		outc <- string(b)
	}()
	if err := p.Resize(t.Context(), 100, 30); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(p, "echo $((6*7)); stty size; echo $TERM; exit 3\n"); err != nil {
		t.Fatal(err)
	}
	code, err := p.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if code != 3 {
		t.Errorf("exit code = %d, want 3", code)
	}
	out := <-outc
	for _, want := range []string{"42\r\n", "30 100\r\n", "xterm-256color\r\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("output %q lacks %q", out, want)
		}
	}
}

func TestPTYKill(t *testing.T) {
	h := newHarness(t)
	sb := h.sandbox(t)
	p, err := sb.PTY(t.Context(), PTYOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	go io.Copy(io.Discard, p.Output())
	if err := p.Kill(t.Context()); err != nil {
		t.Fatal(err)
	}
	if code, err := p.Wait(); err != nil || code != -1 {
		t.Errorf("Wait() = %d, %v; want -1, nil", code, err)
	}
	if err := p.Kill(t.Context()); !errors.Is(err, ErrNotFound) {
		t.Errorf("second Kill: %v, want ErrNotFound", err)
	}
}

func TestPTYClose(t *testing.T) {
	h := newHarness(t)
	sb := h.sandbox(t)
	p, err := sb.PTY(t.Context(), PTYOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Nobody reads Output; Close must still return.
	if _, err := io.WriteString(p, "yes | head -c 1000000\n"); err != nil {
		t.Fatal(err)
	}
	p.Close()
	p.Close()
	if _, err := p.Wait(); err == nil {
		t.Error("Wait after Close reported a clean exit")
	}
	if err := p.Kill(t.Context()); err != nil {
		t.Errorf("Kill after Close: %v", err)
	}
}

func TestFiles(t *testing.T) {
	h := newHarness(t)
	sb := h.sandbox(t)
	path := t.TempDir() + "/sub/f.txt"
	if err := sb.WriteFile(t.Context(), path, []byte("content"), FileOptions{User: h.user}); err != nil {
		t.Fatal(err)
	}
	got, err := sb.ReadFile(t.Context(), path, FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "content" {
		t.Errorf("ReadFile = %q", got)
	}
	if err := sb.WriteFile(t.Context(), path, nil, FileOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, err := sb.ReadFile(t.Context(), path, FileOptions{}); err != nil || len(got) != 0 {
		t.Errorf("ReadFile after empty write = %q, %v", got, err)
	}
	_, err = sb.ReadFile(t.Context(), path+".missing", FileOptions{})
	var apiErr *APIError
	if !errors.Is(err, ErrNotFound) || !errors.As(err, &apiErr) {
		t.Errorf("ReadFile of a missing file: %v, want ErrNotFound and *APIError", err)
	}
}

func TestStartLeavesTheCommandRunning(t *testing.T) {
	h := newHarness(t)
	sb := h.sandbox(t)
	pid, err := sb.Start(t.Context(), "sleep 30", RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.killProcess(context.WithoutCancel(t.Context()), pid) })
	// The output stream is closed; the process must still run.
	code, err := sb.Run(t.Context(), fmt.Sprintf("kill -0 %d", pid), RunOptions{})
	if err != nil || code != 0 {
		t.Errorf("kill -0 %d after Start: code %d, %v; want the process running", pid, code, err)
	}
	if _, err := sb.Start(t.Context(), "cat", RunOptions{Stdin: strings.NewReader("x")}); err == nil {
		t.Error("Start with stdin: no error")
	}
}

func TestListDir(t *testing.T) {
	h := newHarness(t)
	sb := h.sandbox(t)
	dir := t.TempDir()
	for _, p := range []string{dir + "/a.txt", dir + "/sub/b.txt"} {
		if err := sb.WriteFile(t.Context(), p, []byte("12345"), FileOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	entries, err := sb.ListDir(t.Context(), dir, 0, FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name+" "+e.Type)
		if e.Name == "a.txt" && e.Size != 5 {
			t.Errorf("a.txt: size %d, want 5", e.Size)
		}
		if e.Path != dir+"/"+e.Name || e.Modified.IsZero() || e.Permissions == "" {
			t.Errorf("entry %+v: path, time or permissions missing", e)
		}
	}
	slices.Sort(got)
	if want := []string{"a.txt file", "sub dir"}; !slices.Equal(got, want) {
		t.Errorf("ListDir = %q, want %q", got, want)
	}
	deep, err := sb.ListDir(t.Context(), dir, 2, FileOptions{})
	if err != nil || len(deep) != 3 {
		t.Errorf("ListDir depth 2 = %d entries, %v; want 3", len(deep), err)
	}
	if _, err := sb.ListDir(t.Context(), dir+"/missing", 1, FileOptions{}); !errors.Is(err, ErrNotFound) {
		t.Errorf("ListDir of a missing directory: %v, want ErrNotFound", err)
	}
}

// TestReadFileLength reads bodies with and without a Content-Length, and
// one cut short of it, which must fail rather than come back short.
func TestReadFileLength(t *testing.T) {
	const body = "0123456789"
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
		want    string
		wantErr bool
	}{
		{"length", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Length", "10")
			io.WriteString(w, body)
		}, body, false},
		{"chunked", func(w http.ResponseWriter, _ *http.Request) {
			io.WriteString(w, body[:5])
			w.(http.Flusher).Flush()
			io.WriteString(w, body[5:])
		}, body, false},
		{"short", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Length", "20")
			io.WriteString(w, body)
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(tc.handler)
			defer srv.Close()
			res, err := http.Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			got, err := readBody(res)
			if (err != nil) != tc.wantErr || string(got) != tc.want {
				t.Errorf("readBody = %q, %v; want %q, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}
