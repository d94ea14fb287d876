package codeinterp

import (
	"context"
	"log/slog"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
)

// startPython starts a Python runtime on Debian's ipykernel (the pyenv
// python3 first on PATH has none); without it the test skips, or fails
// under CI.
func startPython(t *testing.T) Runtime {
	t.Helper()
	const python = "/usr/bin/python3"
	out, err := exec.Command(python, "-c", "import ipykernel").CombinedOutput()
	testenv.Require(t, err == nil, "test needs "+python+" with ipykernel (apt-get install python3-ipykernel): "+strings.TrimSpace(string(out)))
	factory, err := PythonFactory(python, t.TempDir(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cwd := t.TempDir()
	rt, err := factory(ctx, cwd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	return rt
}

func TestPythonRuntime(t *testing.T) {
	rt := startPython(t)
	ctx := context.Background()

	o := run(t, rt, "x = 20\nprint('out'); import sys; print('err', file=sys.stderr)\nx + 1")
	if c := o.of(Count); len(c) != 1 || c[0].Count != 1 {
		t.Errorf("count outputs %+v, want one with 1", c)
	}
	if o.text(Stdout) != "out\n" || o.text(Stderr) != "err\n" {
		t.Errorf("stdout %q, stderr %q", o.text(Stdout), o.text(Stderr))
	}
	if r := o.of(Result); len(r) != 1 || !r[0].IsMain || r[0].Data["text/plain"] != "21" {
		t.Errorf("results %+v, want main 21", r)
	}

	o = run(t, rt, "1/0")
	if e := o.of(Error); len(e) != 1 || e[0].Name != "ZeroDivisionError" || !strings.Contains(e[0].Traceback, "1/0") {
		t.Errorf("error outputs %+v", e)
	}

	// A display comes with the chart and image formatters of the startup
	// script loaded.
	o = run(t, rt, "import matplotlib.pyplot as plt\nplt.plot([1, 2], [3, 4])\nplt.show()")
	if r := o.of(Result); len(r) != 1 || r[0].IsMain || r[0].Data["image/png"] == nil || r[0].Data["e2b/chart"] == nil {
		t.Errorf("plot results: %d, want one display with image/png and e2b/chart; outputs %+v", len(r), o)
	}

	restore, err := rt.SetEnv(ctx, map[string]string{"E2B_TEST": "it's \"quoted\"", "HOME": "/elsewhere"})
	if err != nil {
		t.Fatal(err)
	}
	o = run(t, rt, "import os; (os.environ['E2B_TEST'], os.environ['HOME'])")
	if r := o.of(Result); len(r) != 1 || r[0].Data["text/plain"] != `('it\'s "quoted"', '/elsewhere')` {
		t.Errorf("env while set: %+v", r)
	}
	if err := restore(ctx); err != nil {
		t.Fatal(err)
	}
	o = run(t, rt, "import os; ('E2B_TEST' in os.environ, os.environ['HOME'] == '/elsewhere')")
	if r := o.of(Result); len(r) != 1 || r[0].Data["text/plain"] != "(False, False)" {
		t.Errorf("env after restore: %+v", r)
	}
	if c := run(t, rt, "0").of(Count); len(c) != 1 || c[0].Count != 6 {
		t.Errorf("count after silent env executions %+v, want 6", c)
	}

	io := interruptAfter(t, rt, "import time; time.sleep(30)", 500*time.Millisecond)
	o = run(t, rt, "x")
	if r := o.of(Result); len(r) != 1 || r[0].Data["text/plain"] != "20" {
		t.Errorf("state after an interrupt: %+v (interrupted %+v)", o, io)
	}
}
