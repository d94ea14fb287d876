package sandbox

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
)

// withRecording makes the test templates' base one whose sandboxes record
// their display in format (template.Spec.Recording).
func withRecording(format string) func(*Config) {
	return func(c *Config) {
		base := *testTemplates["base"]
		base.Spec.Recording = format
		c.Templates = fakeTemplates{"base": &base}
	}
}

// recordings returns the runs that started a recording of the display.
func (e *fakeEnvd) recordings() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, r := range e.runs {
		if strings.Contains(r, "x11grab") {
			out = append(out, r)
		}
	}
	return out
}

// A sandbox of a template with a recording starts one before the create
// answers: as the template's user (whom the API's recording routes run
// as, so they find it), of display :0, in the template's format, waiting
// for the display to come up. A template without one runs no recorder.
func TestTemplateRecording(t *testing.T) {
	e := newEnv(t, nil)
	e.create(t, CreateRequest{})
	if got := e.envd.recordings(); len(got) != 0 {
		t.Errorf("a template without a recording ran %q", got)
	}

	e = newEnv(t, withRecording("webm"))
	e.create(t, CreateRequest{})
	got := e.envd.recordings()
	if len(got) != 1 {
		t.Fatalf("recordings started: %q; want one", got)
	}
	for _, want := range []string{"user: sh -c ", "-i :0 ", "libvpx", `/tmp/\.X11-unix/X0$ `, ".webm"} {
		if !strings.Contains(got[0], want) {
			t.Errorf("the recording ran %q; want it to contain %q", got[0], want)
		}
	}
}

// A recording that cannot start fails the create, naming the step, and
// leaves nothing running.
func TestTemplateRecordingFails(t *testing.T) {
	e := newEnv(t, withRecording("mp4"))
	e.envd.exitHook = func(run string) int {
		if strings.Contains(run, "x11grab") {
			return 1
		}
		return 0
	}
	_, err := e.m.Create(context.Background(), CreateRequest{Template: "base", Timeout: time.Minute})
	if want := "starting the template's recording: starting ffmpeg: sh exited 1"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Create = %v; want an error saying %q", err, want)
	}
	recs, _ := e.store.ListSandboxesByState(context.Background())
	if len(recs) != 1 || recs[0].State != store.StateError || !e.fake.Instance(recs[0].ID).Stopped() {
		t.Fatalf("records = %+v; want one in state error, its instance stopped", recs)
	}
}

// A pool member starts its recording when it is handed out, not while it
// waits: it records the sandbox its user gets.
func TestTemplateRecordingWarmPool(t *testing.T) {
	e := newPoolEnv(t, PoolSize{Min: 1, Max: 1}, withRecording("mp4"))
	members := e.fake.Running()
	if got := e.envd.recordings(); len(got) != 0 {
		t.Errorf("a waiting pool member recorded: %q", got)
	}
	sb := e.create(t, CreateRequest{})
	if !slices.Contains(members, sb.ID) {
		t.Fatalf("sandbox %s is not the pool member %v", sb.ID, members)
	}
	if got := e.envd.recordings(); len(got) != 1 {
		t.Errorf("a create from the pool started recordings %q; want one", got)
	}
}

// A sandbox that boots from a snapshot of files (a fork, a resume of a
// files-only pause) starts a recording again, as it runs its template's
// service again; one restored from memory, or resumed from a freeze, goes
// on with the recording it had.
func TestTemplateRecordingSnapshots(t *testing.T) {
	ctx := context.Background()
	e := newSnapEnv(t, isolation.FilesSnapshot, withRecording("mp4"))
	sb := e.create(t, CreateRequest{})
	if res, _, err := e.m.Fork(ctx, sb.ID, time.Minute, 1); err != nil || res[0].Err != nil {
		t.Fatal(err, res)
	}
	if got := len(e.envd.recordings()); got != 2 {
		t.Errorf("after a create and a files fork: %d recordings; want 2", got)
	}
	if err := e.m.Pause(ctx, sb.ID, false); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.m.Connect(ctx, sb.ID, time.Minute, false); err != nil {
		t.Fatal(err)
	}
	if got := len(e.envd.recordings()); got != 3 {
		t.Errorf("after a resume from files: %d recordings; want 3", got)
	}

	e = newSnapEnv(t, isolation.MemorySnapshot, withRecording("mp4"))
	sb = e.create(t, CreateRequest{})
	if res, _, err := e.m.Fork(ctx, sb.ID, time.Minute, 1); err != nil || res[0].Err != nil {
		t.Fatal(err, res)
	}
	if err := e.m.Pause(ctx, sb.ID, true); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.m.Connect(ctx, sb.ID, time.Minute, false); err != nil {
		t.Fatal(err)
	}
	if got := len(e.envd.recordings()); got != 1 {
		t.Errorf("after a memory fork and a pause and resume: %d recordings; want only the create's", got)
	}
}
