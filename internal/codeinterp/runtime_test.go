package codeinterp

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
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

// requireBinary skips the test when a runtime's interpreter is missing;
// under CI it fails.
func requireBinary(t *testing.T, name string) {
	t.Helper()
	_, err := exec.LookPath(name)
	testenv.Require(t, err == nil, "test needs "+name+" on PATH")
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
