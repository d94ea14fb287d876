package codeinterp

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
	"github.com/google/go-cmp/cmp"
)

// outputs collects what executions emit.
type outputs []Output

func (o *outputs) emit(out Output) { *o = append(*o, out) }

// of returns the outputs of a kind.
func (o outputs) of(k OutputKind) outputs {
	var r outputs
	for _, out := range o {
		if out.Kind == k {
			r = append(r, out)
		}
	}
	return r
}

// text joins the text of the stdout (or stderr) outputs.
func (o outputs) text(k OutputKind) string {
	var b strings.Builder
	for _, out := range o.of(k) {
		b.WriteString(out.Text)
	}
	return b.String()
}

// run executes code and fails the test if the runtime fails.
func run(t *testing.T, rt Runtime, code string) outputs {
	t.Helper()
	var o outputs
	if err := rt.Execute(context.Background(), code, o.emit); err != nil {
		t.Fatalf("Execute(%q): %v", code, err)
	}
	return o
}

// mainText returns the text/plain of the main result, or "" without one.
func mainText(o outputs) string {
	for _, r := range o.of(Result) {
		if r.IsMain {
			s, _ := r.Data["text/plain"].(string)
			return s
		}
	}
	return ""
}

// summary shows outputs in order as "count", "stdout:TEXT", "stderr:TEXT"
// (trimmed), "result:TEXT" and "error:NAME: VALUE".
func summary(o outputs) []string {
	var got []string
	for _, out := range o {
		switch out.Kind {
		case Count:
			got = append(got, "count")
		case Stdout, Stderr:
			got = append(got, out.Kind.String()+":"+strings.TrimSpace(out.Text))
		case Result:
			got = append(got, "result:"+out.Data["text/plain"].(string))
		case Error:
			got = append(got, "error:"+out.Name+": "+out.Value)
		}
	}
	return got
}

// checkOutputOrder runs code, a first cell that writes "one" to stdout,
// "two" to stderr, "three" to stdout another way, has a child process
// print "child" to the real stdout, writes "four" and ends in the value 5,
// and checks that the outputs keep that order and that the next cell is
// execution 2.
func checkOutputOrder(t *testing.T, rt Runtime, code string) {
	t.Helper()
	want := []string{"count", "stdout:one", "stderr:two", "stdout:three", "stdout:child", "stdout:four", "result:5"}
	if diff := cmp.Diff(want, summary(run(t, rt, code))); diff != "" {
		t.Errorf("outputs (-want +got):\n%s", diff)
	}
	if c := run(t, rt, "1").of(Count); len(c) != 1 || c[0].Count != 2 {
		t.Errorf("second execution count %+v, want 2", c)
	}
}

// resultCase is a cell and the text/plain of its main result ("": none).
type resultCase struct{ name, code, want string }

// checkResults runs the cells in turn, as subtests, and checks that each
// has no error and the result it wants.
func checkResults(t *testing.T, rt Runtime, cases []resultCase) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			o := run(t, rt, tt.code)
			if errs := o.of(Error); len(errs) > 0 {
				t.Fatalf("error: %+v", errs[0])
			}
			if got := mainText(o); got != tt.want {
				t.Errorf("result %q, want %q", got, tt.want)
			}
		})
	}
}

// errorCase is a cell that fails, with the error's name and value and a
// piece of its traceback.
type errorCase struct{ name, code, wantName, wantValue, wantInTrace string }

// checkErrors runs the cells in turn, as subtests, and checks that each
// ends in the one error it wants; more, if set, checks that error further.
func checkErrors(t *testing.T, rt Runtime, cases []errorCase, more func(*testing.T, Output)) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			errs := run(t, rt, tt.code).of(Error)
			if len(errs) != 1 {
				t.Fatalf("errors %+v, want one", errs)
			}
			e := errs[0]
			if e.Name != tt.wantName || e.Value != tt.wantValue || !strings.Contains(e.Traceback, tt.wantInTrace) {
				t.Errorf("error %q %q %q, want %q %q and a traceback with %q", e.Name, e.Value, e.Traceback, tt.wantName, tt.wantValue, tt.wantInTrace)
			}
			if more != nil {
				more(t, e)
			}
		})
	}
}

// requireBinary skips the test when a runtime's interpreter is missing;
// under CI it fails.
func requireBinary(t *testing.T, name string) {
	t.Helper()
	_, err := exec.LookPath(name)
	testenv.Require(t, err == nil, "test needs "+name+" on PATH")
}

// startRuntime starts a runtime of factory in cwd, closed when the test
// ends; binary is the interpreter it runs, which the test requires.
func startRuntime(t *testing.T, binary string, factory Factory, cwd string) Runtime {
	t.Helper()
	requireBinary(t, binary)
	rt, err := factory(context.Background(), cwd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	return rt
}

// interruptAfter runs code with a ctx that ends after d and checks that the
// execution stops soon after without the runtime dying.
func interruptAfter(t *testing.T, rt Runtime, code string, d time.Duration) outputs {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	start := time.Now()
	var o outputs
	err := rt.Execute(ctx, code, o.emit)
	if err != nil && err != ctx.Err() {
		t.Fatalf("interrupted Execute(%q) = %v, want the runtime alive", code, err)
	}
	if took := time.Since(start); took > d+2*time.Second {
		t.Errorf("the interrupt took %v", took)
	}
	return o
}
