package sandbox

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
)

// envdLines is what envd's logger (slog's text handler, as envd.Run
// makes it) prints for a process's start and end.
func envdLines(t *testing.T, prefix string) string {
	t.Helper()
	var b bytes.Buffer
	log := slog.New(slog.NewTextHandler(&b, nil)).With("pid", 12)
	log.Info("process started", "cmd", "/bin/bash -l -c 'echo hi'", "user", "user", "pty", false)
	log.Debug("a debug line, left out")
	log.Info("process ended", "status", "exit status 3", "exit_code", 3)
	var out bytes.Buffer
	for _, l := range bytes.SplitAfter(b.Bytes(), []byte("\n")) {
		if len(l) > 0 {
			out.WriteString(prefix)
			out.Write(l)
		}
	}
	return out.String()
}

// summary is "logger: message" of each line, with the fields asked for.
func summary(lines []store.SandboxLog, fields ...string) []string {
	var out []string
	for _, l := range lines {
		s := l.Logger + ": " + l.Message
		for _, f := range fields {
			if v, ok := l.Fields[f]; ok {
				s += " " + f + "=" + v
			}
		}
		out = append(out, s)
	}
	return out
}

func TestSandboxLog(t *testing.T) {
	dir := t.TempDir()
	e := newEnv(t, nil)
	e.fake.KeepGuestLogs(dir)
	ctx := context.Background()
	sb := e.create(t, CreateRequest{Timeout: time.Minute})
	// The jail's init copies envd's lines as they are, gVisor's and the
	// vm's after "envd: "; init's own lines are no log lines of envd's.
	guest := "init: mounting\n" + envdLines(t, "") + envdLines(t, "envd: ") + `time=2025 partial line`
	if err := os.WriteFile(filepath.Join(dir, sb.ID+".log"), []byte(guest), 0o600); err != nil {
		t.Fatal(err)
	}
	lines, err := e.m.Logs(ctx, sb.ID, store.SandboxLogQuery{})
	if err != nil {
		t.Fatal(err)
	}
	got := summary(lines, "pid", "exit_code")
	want := []string{
		"lifecycle: creating sandbox",
		"lifecycle: sandbox running",
		"envd: process started pid=12",
		"envd: process ended pid=12 exit_code=3",
		"envd: process started pid=12",
		"envd: process ended pid=12 exit_code=3",
	}
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("the log lacks %q: %q", w, got)
		}
	}
	if n := len(got); n != len(want) {
		t.Errorf("the log has %d lines, want %d: %q", n, len(want), got)
	}

	if err := e.m.Kill(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	// Kept after the end, across a restart of the server, each line once.
	e.m.Close()
	m := e.start(t)
	lines, err = m.Logs(ctx, sb.ID, store.SandboxLogQuery{})
	if err != nil {
		t.Fatal(err)
	}
	got = summary(lines, "reason")
	if last := got[len(got)-1]; last != "lifecycle: sandbox ended reason=killed" {
		t.Errorf("the last line after the kill is %q, want the kill and its reason: %q", last, got)
	}
	if n := len(got); n != len(want)+1 {
		t.Errorf("after the kill the log has %d lines, want %d: %q", n, len(want)+1, got)
	}
	if _, err := m.Logs(ctx, "nosuchsandbox", store.SandboxLogQuery{}); err == nil {
		t.Error("the log of an unknown sandbox: no error")
	}
}

func TestSandboxLogOfDeath(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	sb := e.create(t, CreateRequest{Timeout: time.Minute})
	e.fake.Instance(sb.ID).Crash(isolation.Exit{OOM: true, Reason: "init exited (1 processes killed by the memory limit)"})
	waitFor(t, 5*time.Second, "the death recorded", func() bool { return e.record(t, sb.ID).State != store.StateRunning })
	lines, err := e.m.Logs(ctx, sb.ID, store.SandboxLogQuery{MinLevel: "warn"})
	if err != nil {
		t.Fatal(err)
	}
	if got := summary(lines, "oom"); !slices.Contains(got, "lifecycle: sandbox died oom=true") {
		t.Errorf("the log's warnings lack the death by OOM: %q", got)
	}
}

func TestParseEnvdLine(t *testing.T) {
	for _, l := range []string{"", "init: mounting", "time=x level=INFO msg=hi", `time=2025-01-01T00:00:00Z level=INFO msg="unterminated`} {
		if _, ok := parseEnvdLine(l); ok {
			t.Errorf("%q read as a log line", l)
		}
	}
	line, ok := parseEnvdLine(`envd: time=2025-01-01T00:00:00.5Z level=WARN msg="killing process" pid=7 cmd="a \"quoted\" arg" err=""`)
	if !ok {
		t.Fatal("a line of envd's not read")
	}
	want := store.SandboxLog{Time: time.Date(2025, 1, 1, 0, 0, 0, 5e8, time.UTC), Level: "warn", Logger: loggerEnvd, Message: "killing process",
		Fields: map[string]string{"pid": "7", "cmd": `a "quoted" arg`, "err": ""}}
	if !line.Time.Equal(want.Time) || line.Level != want.Level || line.Message != want.Message || len(line.Fields) != 3 ||
		line.Fields["cmd"] != want.Fields["cmd"] || line.Fields["pid"] != "7" {
		t.Errorf("read %+v, want %+v", line, want)
	}
}

func TestSandboxLogRetention(t *testing.T) {
	clk := newClock()
	e := newEnv(t, func(c *Config) { c.LogRetention, c.Now = time.Hour, clk.now })
	ctx := context.Background()
	ended := e.create(t, CreateRequest{Timeout: 10 * time.Minute})
	if err := e.m.Kill(ctx, ended.ID); err != nil {
		t.Fatal(err)
	}
	lines := func() int {
		t.Helper()
		l, err := e.m.Logs(ctx, ended.ID, store.SandboxLogQuery{})
		if err != nil {
			t.Fatal(err)
		}
		return len(l)
	}
	if lines() == 0 {
		t.Fatal("no log after the kill")
	}
	// Within the retention (and within logPurgeEvery of the last purge)
	// it is kept; past both it goes.
	clk.advance(time.Minute)
	e.m.purgeLogs()
	if lines() == 0 {
		t.Fatal("the log went within the retention")
	}
	clk.advance(2 * time.Hour)
	e.m.purgeLogs()
	if n := lines(); n != 0 {
		t.Errorf("%d lines kept past the retention", n)
	}
}
