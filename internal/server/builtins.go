package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/store"
	"github.com/agent-sandbox/agent-sandbox/internal/template"
)

// Retry-After of the answers to creates of a built-in template being
// built, and how long after a failed build the next create starts another
// (a mirror that is down fails a build in seconds).
const (
	builtInRetryAfter = 10 * time.Second
	builtInRetryDelay = 30 * time.Second
)

// builtIns builds the built-in templates other than base in the
// background, one at a time: on first use (a create of one that is not
// built, through templateRegistry.Lookup) and, once the server is up,
// those serve --templates names. Until one is built its creates are
// answered with a *template.BuildingError (503 with Retry-After), while
// sandboxes of the templates that are built are served as usual. Close
// stops it.
type builtIns struct {
	// ensure builds spec unless it is built, reporting its progress to
	// onProgress: the server's builder (a test's fake).
	ensure func(ctx context.Context, spec template.Spec, onProgress func(string, template.Event)) (*template.Template, error)
	log    *slog.Logger
	now    func() time.Time

	ctx    context.Context // cancelled by close; the builds run under it
	cancel context.CancelFunc
	wg     sync.WaitGroup
	slot   chan struct{} // held by the build that runs

	mu      sync.Mutex               // guards builds and running
	builds  map[string]*builtInBuild // queued, running or failed, by name
	running string                   // the build that holds the slot
}

// builtInBuild is one built-in template's build, from the first ask to
// its end, or its failure until the next build starts.
type builtInBuild struct {
	asked    time.Time
	progress string // template.Describe of its latest event; "" while queued
	failed   error
	failedAt time.Time
}

// newBuiltIns builds with builder, drawing each build's progress on
// progress as a start does.
func newBuiltIns(ctx context.Context, builder *template.Builder, log *slog.Logger, progress io.Writer) *builtIns {
	b := &builtIns{log: log, now: time.Now, slot: make(chan struct{}, 1), builds: map[string]*builtInBuild{}}
	b.ensure = func(ctx context.Context, spec template.Spec, onProgress func(string, template.Event)) (*template.Template, error) {
		c := *builder
		c.Progress, c.OnProgress = progress, onProgress
		return c.Ensure(ctx, spec)
	}
	b.ctx, b.cancel = context.WithCancel(context.WithoutCancel(ctx))
	return b
}

// close cancels the build in progress and those queued, and waits for
// them.
func (b *builtIns) close() {
	b.cancel()
	b.wg.Wait()
}

// start queues the builds of names (built-in templates) that are not
// queued or running already. Each makes sure the template is built from
// its current spec: a version an older server built is served until then.
func (b *builtIns) start(names ...string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, name := range names {
		b.queueLocked(name, "serve --templates")
	}
}

// queueLocked starts the build of name unless one is queued or running.
// The caller holds b.mu.
func (b *builtIns) queueLocked(name, why string) {
	if bb := b.builds[name]; bb != nil && bb.failed == nil {
		return
	}
	b.builds[name] = &builtInBuild{asked: b.now()}
	b.log.Info("building a built-in template in the background", "template", name, "asked_by", why)
	b.wg.Add(1)
	go b.build(name)
}

// missing answers a lookup of built-in template name that is not built:
// the error a create gets. The first one (or the first after a failed
// build's retry delay) starts the build.
func (b *builtIns) missing(name string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	bb := b.builds[name]
	if bb != nil && bb.failed != nil {
		if wait := builtInRetryDelay - b.now().Sub(bb.failedAt); wait > 0 {
			return &template.BuildingError{Name: name, Since: bb.asked, Failed: bb.failed, RetryAfter: wait}
		}
	}
	b.queueLocked(name, "a create")
	bb = b.builds[name]
	e := &template.BuildingError{Name: name, Since: bb.asked, Progress: bb.progress, RetryAfter: builtInRetryAfter}
	if e.Progress == "" {
		e.After = b.running
		if e.After == "" || e.After == name {
			e.Progress = "starting"
		}
	}
	return e
}

// states returns the state of each built-in template being built
// (queued or running: building) or whose last build failed (error), for
// the template list.
func (b *builtIns) states() map[string]store.BuildStatus {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[string]store.BuildStatus{}
	for name, bb := range b.builds {
		out[name] = store.BuildBuilding
		if bb.failed != nil {
			out[name] = store.BuildError
		}
	}
	return out
}

// build runs the build of name once the slot is free, and records its end.
func (b *builtIns) build(name string) {
	defer b.wg.Done()
	select {
	case b.slot <- struct{}{}:
	case <-b.ctx.Done():
		b.end(name, b.ctx.Err())
		return
	}
	b.mu.Lock()
	b.running = name
	b.mu.Unlock()
	t0 := b.now()
	t, err := b.ensure(b.ctx, template.BuiltIn()[name], func(stage string, ev template.Event) {
		b.mu.Lock()
		if bb := b.builds[name]; bb != nil {
			bb.progress = template.Describe(stage, ev)
		}
		b.mu.Unlock()
	})
	b.mu.Lock()
	b.running = ""
	b.mu.Unlock()
	<-b.slot
	if err == nil {
		b.log.Info("built-in template is ready", "template", name, "id", t.ID, "took", b.now().Sub(t0).Round(time.Millisecond))
	}
	b.end(name, err)
}

// end records how the build of name ended: forgotten when it succeeded
// (the template is there now), kept with its error when it failed.
func (b *builtIns) end(name string, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err == nil {
		delete(b.builds, name)
		return
	}
	if errors.Is(err, context.Canceled) && b.ctx.Err() != nil {
		err = errors.New("the server stopped during the build")
	} else {
		b.log.Error("building a built-in template", "template", name, "err", err)
	}
	b.builds[name].failed, b.builds[name].failedAt = err, b.now()
}
