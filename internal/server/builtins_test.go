package server

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/template"
)

// fakeBuilds stands in for the builder: each build reports one progress
// event and waits for its end to be sent on ends[name].
type fakeBuilds struct {
	mu     sync.Mutex
	ends   map[string]chan error
	builds []string
}

func (f *fakeBuilds) end(name string) chan error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ends[name] == nil {
		f.ends[name] = make(chan error)
	}
	return f.ends[name]
}

func (f *fakeBuilds) ensure(ctx context.Context, spec template.Spec, onProgress func(string, template.Event)) (*template.Template, error) {
	f.mu.Lock()
	f.builds = append(f.builds, spec.Name)
	f.mu.Unlock()
	onProgress("packages", template.Event{Phase: "installing", Done: 3, Total: 10, Percent: 30, Item: "xterm"})
	select {
	case err := <-f.end(spec.Name):
		if err != nil {
			return nil, err
		}
		return &template.Template{Name: spec.Name, ID: spec.Name + "-0123456789ab"}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 5 s for %s", what)
		}
	}
}

func TestBuiltInsOnDemand(t *testing.T) {
	f := &fakeBuilds{ends: map[string]chan error{}}
	// The clock, which the builds read too.
	var clock sync.Mutex
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	b := newBuiltIns(t.Context(), nil, slog.New(slog.DiscardHandler), nil)
	b.ensure = f.ensure
	b.now = func() time.Time { clock.Lock(); defer clock.Unlock(); return now }
	defer b.close()

	// The first ask starts the build; the next ones see its progress.
	var be *template.BuildingError
	if err := b.missing("desktop"); !errors.As(err, &be) || be.RetryAfter != builtInRetryAfter {
		t.Fatalf("first ask = %v, want a BuildingError with Retry-After %s", err, builtInRetryAfter)
	}
	waitFor(t, "the progress", func() bool {
		return errors.As(b.missing("desktop"), &be) && be.Progress == "packages: installing 3/10 (30%) xterm"
	})
	if !strings.Contains(be.Error(), "template 'desktop' is built in and is being built on this server: started") ||
		!strings.Contains(be.Error(), "now packages: installing 3/10 (30%) xterm; retry in 10s") {
		t.Errorf("message %q", be.Error())
	}
	// Another waits for the slot, and says behind which build.
	b.start("browser", "desktop")
	if err := b.missing("browser"); !errors.As(err, &be) || be.After != "desktop" ||
		!strings.Contains(err.Error(), "it waits for the build of desktop to end") {
		t.Errorf("queued ask = %v, want it to wait for desktop", err)
	}

	f.end("desktop") <- nil
	f.end("browser") <- errors.New("mirror unreachable")
	waitFor(t, "the failure", func() bool { return errors.As(b.missing("browser"), &be) && be.Failed != nil })
	if !strings.Contains(be.Error(), "building template 'browser' failed") || !strings.Contains(be.Error(), "mirror unreachable") ||
		be.RetryAfter != builtInRetryDelay {
		t.Errorf("after the failure: %v (retry after %s)", be, be.RetryAfter)
	}
	// Past the delay an ask starts a new build.
	clock.Lock()
	now = now.Add(builtInRetryDelay)
	clock.Unlock()
	if err := b.missing("browser"); !errors.As(err, &be) || be.Failed != nil {
		t.Errorf("ask after the retry delay = %v, want a new build", err)
	}
	f.end("browser") <- nil
	b.close()
	f.mu.Lock()
	defer f.mu.Unlock()
	if want := []string{"desktop", "browser", "browser"}; strings.Join(f.builds, ",") != strings.Join(want, ",") {
		t.Errorf("builds %v, want %v (one per ask while none runs, desktop once)", f.builds, want)
	}
}

// close stops a running build and the queued ones.
func TestBuiltInsClose(t *testing.T) {
	f := &fakeBuilds{ends: map[string]chan error{}}
	b := newBuiltIns(t.Context(), nil, slog.New(slog.DiscardHandler), nil)
	b.ensure = f.ensure
	b.start("desktop", "browser")
	waitFor(t, "the first build", func() bool { f.mu.Lock(); defer f.mu.Unlock(); return len(f.builds) == 1 })
	done := make(chan struct{})
	go func() { b.close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("close did not return")
	}
}
