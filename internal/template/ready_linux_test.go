package template

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The ready check runs the start command in the background and polls the
// ready command: a template is built once it succeeds, without what the
// commands wrote; a ready command that never succeeds, or a start command
// that fails, fails the build naming it.
func TestReadyCheck(t *testing.T) {
	data := safeTempDir(t)
	tinyBase(t, data)
	for _, tc := range []struct {
		name, start, ready string
		wantErr            string
		check              func(t *testing.T, re *ReadyError)
	}{
		{name: "file after a while", start: "sleep 1; echo up > /tmp/up; sleep 60", ready: "[ -f /tmp/up ]"},
		{name: "sleep as the ready command", ready: "sleep 1"},
		{
			name: "never ready", start: "sleep 60", ready: "echo not yet >&2; false",
			wantErr: `ready command "echo not yet >&2; false" did not succeed within 2s (its last run exited with code 1)`,
			check: func(t *testing.T, re *ReadyError) {
				if re.Timeout != 2*time.Second || !slices.Contains(re.LogTail, "not yet") {
					t.Errorf("timeout %s, tail %q; want 2s and the ready command's last output", re.Timeout, re.LogTail)
				}
			},
		},
		{
			name: "start command fails", start: "echo bad config; exit 3", ready: "false",
			wantErr: `start command "echo bad config; exit 3" exited with code 3 before the ready command "false" succeeded`,
			check: func(t *testing.T, re *ReadyError) {
				if !slices.Contains(re.LogTail, "bad config") {
					t.Errorf("tail %q lacks the start command's output", re.LogTail)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := testBuilder(t, data)
			b.ReadyTimeout = 2 * time.Second
			name := "test-ready-" + strings.ReplaceAll(tc.name, " ", "-")
			start := time.Now()
			tmpl, err := b.Ensure(t.Context(), Spec{Name: name, From: "tiny", StartCmd: tc.start, ReadyCmd: tc.ready})
			t.Logf("took %s", time.Since(start).Round(time.Millisecond))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if tmpl.Spec.ReadyCmd != tc.ready || tmpl.Spec.StartCmd != tc.start {
					t.Errorf("template start %q ready %q; want the spec's", tmpl.Spec.StartCmd, tmpl.Spec.ReadyCmd)
				}
				if _, err := os.Lstat(filepath.Join(tmpl.RootFS, "tmp/up")); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("/tmp/up in the template: %v; the check's writes must be thrown away", err)
				}
			} else {
				var re *ReadyError
				if !errors.As(err, &re) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Ensure = %v\nwant a ReadyError saying %q", err, tc.wantErr)
				}
				tc.check(t, re)
				if _, err := b.Lookup(name); !errors.Is(err, ErrNotFound) {
					t.Errorf("Lookup of the failed template = %v, want ErrNotFound", err)
				}
			}
			assertNoMounts(t, data)
			assertNoBuildDirs(t, data, "")
		})
	}
}

// A template that sets no start or ready command takes its From's, and
// checks them too.
func TestReadyInherited(t *testing.T) {
	data := safeTempDir(t)
	tinyBase(t, data)
	b := testBuilder(t, data)
	if _, err := b.Ensure(t.Context(), Spec{Name: "test-ready-parent", From: "tiny", StartCmd: "sleep 60", ReadyCmd: "true"}); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	b.Log = slog.New(rec)
	child, err := b.Ensure(t.Context(), Spec{Name: "test-ready-child", From: "test-ready-parent",
		Instructions: []Instruction{{Op: OpRun, Args: []string{"true"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if child.Spec.StartCmd != "sleep 60" || child.Spec.ReadyCmd != "true" {
		t.Errorf("child start %q ready %q; want the parent's", child.Spec.StartCmd, child.Spec.ReadyCmd)
	}
	if !slices.ContainsFunc(rec.recs, func(r logRecord) bool { return r.msg == "template is ready" }) {
		t.Error("the child's build did not check the inherited ready command")
	}
}
