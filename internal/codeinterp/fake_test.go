package codeinterp

import (
	"context"
	"errors"
	"maps"
	"strings"
	"sync"
	"time"
)

// fakeRuntime is a Runtime whose code is a small command language:
//
//	print:TEXT   stdout TEXT
//	stderr:TEXT  stderr TEXT
//	env:NAME     stdout the value of NAME (or "<unset>")
//	sleep:DUR    sleep, then stdout "slept" (or fail if closed meanwhile)
//	block        wait until ctx ends
//	die          fail as a dead runtime
//	fail         an Error output
//	result       a main result with several MIME types
//
// Every execution first emits its Count.
type fakeRuntime struct {
	cwd string
	// cancelled is closed when a "block" execution sees its ctx end.
	cancelled chan struct{}

	mu      sync.Mutex // guards the fields below
	env     map[string]string
	count   int
	running int // executions in progress, to catch overlap
	overlap bool
	closed  bool
}

var _ Runtime = (*fakeRuntime)(nil)

func (f *fakeRuntime) Execute(ctx context.Context, code string, emit func(Output)) error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return errors.New("fake runtime is closed")
	}
	f.count++
	f.running++
	if f.running > 1 {
		f.overlap = true
	}
	n := f.count
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.running--
		f.mu.Unlock()
	}()

	emit(Output{Kind: Count, Count: n})
	cmd, arg, _ := strings.Cut(code, ":")
	switch cmd {
	case "print":
		emit(Output{Kind: Stdout, Text: arg})
	case "stderr":
		emit(Output{Kind: Stderr, Text: arg})
	case "env":
		f.mu.Lock()
		v, ok := f.env[arg]
		f.mu.Unlock()
		if !ok {
			v = "<unset>"
		}
		emit(Output{Kind: Stdout, Text: v})
	case "sleep":
		d, _ := time.ParseDuration(arg)
		time.Sleep(d)
		if f.isClosed() {
			return errors.New("fake runtime closed while sleeping")
		}
		emit(Output{Kind: Stdout, Text: "slept"})
	case "block":
		<-ctx.Done()
		close(f.cancelled)
		return ctx.Err()
	case "die":
		return errors.New("kernel died")
	case "fail":
		emit(Output{Kind: Error, Name: "ValueError", Value: "bad value", Traceback: "line 1\nline 2"})
	case "result":
		emit(Output{Kind: Result, Data: map[string]any{
			"text/plain":           "'abc'",
			"text/html":            "<b>abc</b>",
			"image/png":            "iVBORw0KGgo=",
			"application/json":     map[string]any{"a": 1.0},
			"e2b/chart":            map[string]any{"type": "line"},
			"application/x-custom": "custom",
		}, IsMain: true})
		emit(Output{Kind: Result, Data: map[string]any{"text/markdown": "# hi"}})
	}
	return nil
}

func (f *fakeRuntime) SetEnv(_ context.Context, vars map[string]string) (func(context.Context) error, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	prev := maps.Clone(f.env)
	maps.Copy(f.env, vars)
	return func(context.Context) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.env = prev
		return nil
	}, nil
}

func (f *fakeRuntime) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	return nil
}

func (f *fakeRuntime) isClosed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.closed
}

// fakeFactory makes fakeRuntimes and remembers them.
type fakeFactory struct {
	mu       sync.Mutex // guards the fields below
	runtimes []*fakeRuntime
	fail     error
}

func (ff *fakeFactory) factory(_ context.Context, cwd string) (Runtime, error) {
	ff.mu.Lock()
	defer ff.mu.Unlock()
	if ff.fail != nil {
		return nil, ff.fail
	}
	rt := &fakeRuntime{cwd: cwd, env: map[string]string{}, cancelled: make(chan struct{})}
	ff.runtimes = append(ff.runtimes, rt)
	return rt, nil
}

func (ff *fakeFactory) all() []*fakeRuntime {
	ff.mu.Lock()
	defer ff.mu.Unlock()
	return append([]*fakeRuntime(nil), ff.runtimes...)
}

func (ff *fakeFactory) last() *fakeRuntime {
	all := ff.all()
	if len(all) == 0 {
		return nil
	}
	return all[len(all)-1]
}
