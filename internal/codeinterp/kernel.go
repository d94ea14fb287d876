package codeinterp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/agent-sandbox/agent-sandbox/internal/codeinterp/jupyter"
	"github.com/agent-sandbox/agent-sandbox/internal/codeinterp/pystartup"
)

// KernelRuntime is a Jupyter kernel (Python's ipykernel, R's IRkernel)
// as a Runtime, spoken to over ZeroMQ by package jupyter.
type KernelRuntime struct {
	k    *jupyter.Kernel
	lang kernelLanguage

	mu   sync.Mutex // guards seq
	seq  int        // numbers SetEnv calls, to pair them with their restores
	once sync.Once
}

var _ Runtime = (*KernelRuntime)(nil)

// kernelLanguage writes the silent code that sets and restores environment
// variables in one kernel language. set saves the previous values under
// key and applies vars; restore puts back what set saved under key.
type kernelLanguage struct {
	set     func(key string, vars map[string]string) string
	restore func(key string) string
}

// pythonKernel keeps the saved values on the os module, out of the user's
// namespace.
var pythonKernel = kernelLanguage{
	set: func(key string, vars map[string]string) string {
		return fmt.Sprintf("(lambda o, v: (o.__dict__.setdefault('_e2b_saved_env', {}).__setitem__(%s, {k: o.environ.get(k) for k in v}), o.environ.update(v)))(__import__('os'), %s)",
			pyString(key), pyDict(vars))
	},
	restore: func(key string) string {
		return fmt.Sprintf("(lambda o: [o.environ.pop(k, None) if v is None else o.environ.__setitem__(k, v) for k, v in o.__dict__['_e2b_saved_env'].pop(%s).items()])(__import__('os'))",
			pyString(key))
	},
}

// rKernel keeps the saved values in a hidden global (ls() does not list names
// starting with a dot), named even when there is one: Sys.getenv leaves a
// single value unnamed by default.
var rKernel = kernelLanguage{
	set: func(key string, vars map[string]string) string {
		var names, values []string
		for k, v := range vars {
			names = append(names, pyString(k))
			values = append(values, pyString(k)+"="+pyString(v))
		}
		return fmt.Sprintf(".e2b_saved_env_%s <- Sys.getenv(c(%s), unset = NA, names = TRUE); Sys.setenv(%s)",
			key, strings.Join(names, ", "), strings.Join(values, ", "))
	},
	restore: func(key string) string {
		v := ".e2b_saved_env_" + key
		return fmt.Sprintf("for (k in names(%[1]s)) if (is.na(%[1]s[[k]])) Sys.unsetenv(k) else do.call(Sys.setenv, setNames(list(%[1]s[[k]]), k)); rm(%[1]s)", v)
	},
}

// pyString quotes s as a Python (and R) string literal: a JSON string is
// one, escapes included.
func pyString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// pyDict writes vars as a Python dict literal.
func pyDict(vars map[string]string) string {
	b, _ := json.Marshal(vars)
	return string(b)
}

// PythonFactory returns a Factory of Python runtimes: ipykernel run by
// python, with the startup script (rich results: e2b/data and e2b/chart)
// written to dir.
func PythonFactory(python, dir string, log *slog.Logger) (Factory, error) {
	script := filepath.Join(dir, "startup.py")
	if err := os.WriteFile(script, pystartup.Script, 0o644); err != nil {
		return nil, fmt.Errorf("writing the Python startup script: %w", err)
	}
	argv := []string{python, "-Xfrozen_modules=off", "-m", "ipykernel_launcher", "-f", "{connection_file}", pystartup.ExecFilesFlag(script)}
	return kernelFactory(argv, pythonKernel, log), nil
}

// RFactory returns a Factory of R runtimes: IRkernel run by the R binary.
func RFactory(rBinary string, log *slog.Logger) Factory {
	argv := []string{rBinary, "--slave", "-e", "IRkernel::main()", "--args", "{connection_file}"}
	return kernelFactory(argv, rKernel, log)
}

func kernelFactory(argv []string, lang kernelLanguage, log *slog.Logger) Factory {
	return func(ctx context.Context, cwd string) (Runtime, error) {
		k, err := jupyter.Start(ctx, jupyter.KernelSpec{Argv: argv, Dir: cwd, Output: os.Stderr, Log: log})
		if err != nil {
			return nil, fmt.Errorf("starting the %s kernel in %s: %w", filepath.Base(argv[0]), cwd, err)
		}
		return &KernelRuntime{k: k, lang: lang}, nil
	}
}

// Execute implements Runtime.
func (kr *KernelRuntime) Execute(ctx context.Context, code string, emit func(Output)) error {
	_, err := kr.k.Execute(ctx, code, func(m jupyter.Message) {
		if o, ok := output(m); ok {
			emit(o)
		}
	})
	if err != nil && ctx.Err() != nil && !errors.Is(err, jupyter.ErrDied) {
		return ctx.Err()
	}
	return err
}

// output maps an iopub message to an Output (spec §4.3).
func output(m jupyter.Message) (Output, bool) {
	var c struct {
		ExecutionCount int            `json:"execution_count"`
		Name           string         `json:"name"`
		Text           string         `json:"text"`
		Data           map[string]any `json:"data"`
		EName          string         `json:"ename"`
		EValue         string         `json:"evalue"`
		Traceback      []string       `json:"traceback"`
	}
	if err := json.Unmarshal(m.Content, &c); err != nil {
		return Output{}, false
	}
	switch m.Header.MsgType {
	case "execute_input":
		return Output{Kind: Count, Count: c.ExecutionCount}, true
	case "stream":
		if c.Name == "stderr" {
			return Output{Kind: Stderr, Text: c.Text}, true
		}
		return Output{Kind: Stdout, Text: c.Text}, true
	case "display_data", "update_display_data":
		return Output{Kind: Result, Data: c.Data}, true
	case "execute_result":
		return Output{Kind: Result, Data: c.Data, IsMain: true}, true
	case "error":
		return Output{Kind: Error, Name: c.EName, Value: c.EValue, Traceback: strings.Join(c.Traceback, "\n")}, true
	}
	return Output{}, false
}

// SetEnv implements Runtime with silent executions in the kernel.
func (kr *KernelRuntime) SetEnv(ctx context.Context, vars map[string]string) (func(context.Context) error, error) {
	kr.mu.Lock()
	kr.seq++
	key := fmt.Sprint(kr.seq)
	kr.mu.Unlock()
	if err := kr.silent(ctx, kr.lang.set(key, vars)); err != nil {
		return nil, fmt.Errorf("setting environment variables: %w", err)
	}
	return func(ctx context.Context) error {
		if err := kr.silent(ctx, kr.lang.restore(key)); err != nil {
			return fmt.Errorf("restoring environment variables: %w", err)
		}
		return nil
	}, nil
}

func (kr *KernelRuntime) silent(ctx context.Context, code string) error {
	reply, err := kr.k.Silent(ctx, code)
	if err != nil {
		return err
	}
	if reply.Status != "ok" {
		return fmt.Errorf("%s: %s", reply.EName, reply.EValue)
	}
	return nil
}

// Close implements Runtime.
func (kr *KernelRuntime) Close() error {
	var err error
	kr.once.Do(func() { err = kr.k.Close() })
	return err
}
