package codeinterp

import (
	"context"
	"os"
	"testing"
	"time"
)

func startBash(t *testing.T, cwd string) Runtime {
	t.Helper()
	return startRuntime(t, "bash", BashFactory(""), cwd)
}

func TestBashState(t *testing.T) {
	dir := t.TempDir()
	rt := startBash(t, dir)
	tests := []struct {
		name, code, wantOut, wantErr string
	}{
		{"starts in cwd", "pwd", dir + "\n", ""},
		{"variables and functions", "x=41; inc() { echo $(($1 + 1)); }", "", ""},
		{"they persist", "inc $x", "42\n", ""},
		{"cd", "mkdir sub && cd sub", "", ""},
		{"cd persists", "pwd", dir + "/sub\n", ""},
		{"stderr", "echo out; echo err >&2", "out\n", "err\n"},
		{"no trailing newline", "printf abc", "abc", ""},
		{"heredoc", "cat <<EOF\nline\nEOF", "line\n", ""},
		{"stdin is empty", "cat; echo done", "done\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := run(t, rt, tt.code)
			if got := o.text(Stdout); got != tt.wantOut {
				t.Errorf("stdout %q, want %q", got, tt.wantOut)
			}
			if got := o.text(Stderr); got != tt.wantErr {
				t.Errorf("stderr %q, want %q", got, tt.wantErr)
			}
			if errs := o.of(Error); len(errs) > 0 {
				t.Errorf("unexpected error %+v", errs[0])
			}
		})
	}
}

func TestBashExitStatus(t *testing.T) {
	rt := startBash(t, t.TempDir())
	o := run(t, rt, "echo before; (exit 3)")
	errs := o.of(Error)
	if len(errs) != 1 || errs[0].Name != "Error" || errs[0].Value != "exit status 3" {
		t.Errorf("errors %+v, want exit status 3", errs)
	}
	if c := o.of(Count); len(c) != 1 || c[0].Count != 1 {
		t.Errorf("count %+v", c)
	}
	if errs := run(t, rt, "syntax error (").of(Error); len(errs) != 1 {
		t.Errorf("a syntax error gave %+v", errs)
	}
	if got := run(t, rt, "echo ok").text(Stdout); got != "ok\n" {
		t.Errorf("after errors: %q", got)
	}
	// exit ends the shell: the runtime is dead.
	var out outputs
	if err := rt.Execute(context.Background(), "exit 0", out.emit); err == nil {
		t.Error("Execute of exit = nil, want the runtime dead")
	}
}

func TestBashInterrupt(t *testing.T) {
	rt := startBash(t, t.TempDir())
	run(t, rt, "kept=yes; sleep 60 &")
	o := interruptAfter(t, rt, "sleep 30", 300*time.Millisecond)
	if errs := o.of(Error); len(errs) != 1 || errs[0].Value != "exit status 130" {
		t.Errorf("errors %+v, want exit status 130", errs)
	}
	o = interruptAfter(t, rt, "bash -c 'sleep 30'; echo after", 300*time.Millisecond)
	if got := o.text(Stdout); got != "after\n" {
		t.Errorf("stdout %q: want the rest of the cell to run", got)
	}
	o = run(t, rt, "echo $kept; jobs | grep -c Running")
	if got := o.text(Stdout); got != "yes\n1\n" {
		t.Errorf("after the interrupts: %q, want the state and the background job kept", got)
	}
}

func TestBashInterruptShellLoop(t *testing.T) {
	if testing.Short() {
		// Not a CI requirement: -short is the developer's opt-out; CI
		// runs without it.
		t.Skip("skipping: waits for the interrupt timeout")
	}
	rt := startBash(t, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	var o outputs
	err := rt.Execute(ctx, "while :; do :; done", o.emit)
	if err == nil || err == ctx.Err() {
		t.Errorf("Execute = %v, want the runtime reported dead", err)
	}
}

func TestBashSetEnv(t *testing.T) {
	rt := startBash(t, t.TempDir())
	restore, err := rt.SetEnv(context.Background(), map[string]string{"NEW_VAR": "it's $x", "HOME": "/elsewhere", "bad-name": "x"})
	if err != nil {
		t.Fatal(err)
	}
	if got := run(t, rt, `echo "$NEW_VAR|$HOME"; env | grep -c '^NEW_VAR='`).text(Stdout); got != "it's $x|/elsewhere\n1\n" {
		t.Errorf("after SetEnv: %q", got)
	}
	if err := restore(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := "unset|" + os.Getenv("HOME") + "\n"
	if got := run(t, rt, `echo "${NEW_VAR-unset}|$HOME"`).text(Stdout); got != want {
		t.Errorf("after restore: %q, want %q", got, want)
	}
	if got := run(t, rt, "compgen -v | grep -c '^__e2b_[ho]' || true").text(Stdout); got != "0\n" {
		t.Error("restore left its saved variables behind")
	}
}
