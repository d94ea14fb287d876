package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestSandboxLogs(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := s.CreateSandbox(ctx, testSandbox("ilog", t0)); err != nil {
		t.Fatal(err)
	}
	var lines []SandboxLog
	for i, level := range []string{"info", "debug", "warn", "error", "info"} {
		lines = append(lines, SandboxLog{Time: t0.Add(time.Duration(i) * time.Second), Level: level, Logger: "envd", Message: fmt.Sprintf("line %d", i), Fields: map[string]string{"i": fmt.Sprint(i)}})
	}
	// Kept: the newest four.
	if err := s.AppendSandboxLogs(ctx, "ilog", lines, 4); err != nil {
		t.Fatal(err)
	}
	messages := func(q SandboxLogQuery) []string {
		t.Helper()
		got, err := s.SandboxLogs(ctx, "ilog", q)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, l := range got {
			out = append(out, l.Message)
		}
		return out
	}
	for _, c := range []struct {
		name string
		q    SandboxLogQuery
		want []string
	}{
		{"all, the oldest dropped", SandboxLogQuery{}, []string{"line 1", "line 2", "line 3", "line 4"}},
		{"from", SandboxLogQuery{From: t0.Add(3 * time.Second)}, []string{"line 3", "line 4"}},
		{"backward from", SandboxLogQuery{From: t0.Add(3 * time.Second), Backward: true}, []string{"line 3", "line 2", "line 1"}},
		{"limit", SandboxLogQuery{Limit: 2}, []string{"line 1", "line 2"}},
		{"warn and up", SandboxLogQuery{MinLevel: "warn"}, []string{"line 2", "line 3"}},
		{"search", SandboxLogQuery{Search: "line 4"}, []string{"line 4"}},
	} {
		if diff := cmp.Diff(c.want, messages(c.q)); diff != "" {
			t.Errorf("%s: (-want +got)\n%s", c.name, diff)
		}
	}
	got, err := s.SandboxLogs(ctx, "ilog", SandboxLogQuery{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]SandboxLog{lines[1]}, got); diff != "" {
		t.Errorf("a line read back: (-want +got)\n%s", diff)
	}
	if _, err := s.SandboxLogs(ctx, "ilog", SandboxLogQuery{MinLevel: "loud"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("unknown level: %v, want ErrInvalid", err)
	}
	if err := s.AppendSandboxLogs(ctx, "inone", lines, 4); !errors.Is(err, ErrNotFound) {
		t.Errorf("log of an unknown sandbox: %v, want ErrNotFound", err)
	}
}

func TestPurgeSandboxLogs(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	fakeClock(s, &now)
	line := []SandboxLog{{Time: now, Level: "info", Logger: "lifecycle", Message: "sandbox running"}}
	for _, id := range []string{"iold", "ifailed", "inew", "irunning"} {
		if _, err := s.CreateSandbox(ctx, testSandbox(id, now)); err != nil {
			t.Fatal(err)
		}
		if err := s.AppendSandboxLogs(ctx, id, line, 10); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SetState(ctx, "iold", StateKilled, ReasonKilled); err != nil {
		t.Fatal(err)
	}
	if err := s.SetState(ctx, "ifailed", StateError, "exited: envd died"); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Hour)
	if err := s.SetState(ctx, "inew", StateKilled, ReasonKilled); err != nil {
		t.Fatal(err)
	}
	n, err := s.PurgeSandboxLogs(ctx, now.Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("purged %d lines, want 2 (iold's and ifailed's)", n)
	}
	for id, want := range map[string]int{"iold": 0, "ifailed": 0, "inew": 1, "irunning": 1} {
		got, err := s.SandboxLogs(ctx, id, SandboxLogQuery{})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != want {
			t.Errorf("%s has %d lines after the purge, want %d", id, len(got), want)
		}
	}
}
