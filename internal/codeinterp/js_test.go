package codeinterp

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func startJS(t *testing.T, cwd string) Runtime {
	t.Helper()
	return startRuntime(t, "node", JavaScriptFactory(""), cwd)
}

func TestJavaScriptState(t *testing.T) {
	checkResults(t, startJS(t, t.TempDir()), []resultCase{
		{"let and const", "let a = 1; const b = 2; var c = 3; function f() { return a + b + c }", ""},
		{"state persists", "f()", "6"},
		{"redeclare const", "const b = 10; a + b", "11"},
		{"class", "class P { hi() { return 'hi' } }; new P().hi()", "'hi'"},
		{"redeclare class", "class P {}; typeof P", "'function'"},
		{"top-level await", "const v = await new Promise(r => setTimeout(() => r(41), 10)); v + 1", "42"},
		{"await declarations persist", "v", "41"},
		{"await destructuring", "const {x, y: [z]} = await Promise.resolve({x: 1, y: [2]}); x + z", "3"},
		{"require builtin", "const path = require('path'); path.join('a', 'b')", "'a/b'"},
		{"import builtin", "import os from 'os'; import {join} from 'path'; typeof os.platform + join('c', 'd')", "'functionc/d'"},
		{"import alone", "import { readFileSync } from 'fs'", ""},
		{"imported binding persists", "typeof readFileSync", "'function'"},
		{"namespace import", "import * as fsns from 'node:fs'; typeof fsns.statSync", "'function'"},
		{"import expression", "const m = await import('path'); m.basename('/a/b')", "'b'"},
		{"import expression in a function", "async function load() { return (await import('os')).EOL }; await load()", `'\n'`},
		{"top-level await result", "await Promise.resolve('Hello World!')", "'Hello World!'"},
		{"types stripped", "const message: string = 'typed'; function sub(x: number, y: number): number { return x - y }; message + sub(1, 2)", "'typed-1'"},
		{"interface and enum", "interface P { x: number }\nenum Dir { Up = 1 }\nconst p: P = { x: Dir.Up }; p.x", "1"},
		{"undefined has no result", "undefined", ""},
		{"object", "({a: [1, 2]})", "{ a: [ 1, 2 ] }"},
	})
}

func TestJavaScriptOutputOrder(t *testing.T) {
	checkOutputOrder(t, startJS(t, t.TempDir()), `console.log('one'); console.error('two'); process.stdout.write('three\n');
require('child_process').execSync('echo child', {stdio: 'inherit'}); console.log('four'); 5`)
}

func TestJavaScriptErrors(t *testing.T) {
	rt := startJS(t, t.TempDir())
	checkErrors(t, rt, []errorCase{
		{"thrown", "function boom() { throw new TypeError('bad thing') }\nboom()", "TypeError", "bad thing", "at boom"},
		{"syntax", "let = ;", "SyntaxError", `Unexpected ";"`, "<cell 2>:1:7: Unexpected \";\"\n  let = ;\n        ^"},
		{"type syntax", "const x: = 1", "SyntaxError", `Unexpected "="`, "<cell 3>:1:10"},
		{"reference", "notDefined + 1", "ReferenceError", "notDefined is not defined", "ReferenceError"},
		{"rejected await", "await Promise.reject(new RangeError('no'))", "RangeError", "no", "RangeError: no"},
		{"non-error", "throw 42", "Error", "42", "42"},
	}, func(t *testing.T, e Output) {
		if strings.Contains(e.Traceback, "node:vm") {
			t.Errorf("traceback shows the kernel's frames: %q", e.Traceback)
		}
	})
	// An unhandled rejection does not kill the kernel.
	run(t, rt, "Promise.reject(new Error('later')); 1")
	time.Sleep(50 * time.Millisecond)
	if got := mainText(run(t, rt, "2")); got != "2" {
		t.Errorf("after an unhandled rejection: %q", got)
	}
}

func TestJavaScriptInterrupt(t *testing.T) {
	rt := startJS(t, t.TempDir())
	run(t, rt, "const kept = 'yes'")
	for _, code := range []string{"while (true) {}", "await new Promise(() => {})"} {
		o := interruptAfter(t, rt, code, 300*time.Millisecond)
		if errs := o.of(Error); len(errs) != 1 || !strings.Contains(errs[0].Value, "interrupted") {
			t.Errorf("%q: errors %+v, want one saying it was interrupted", code, errs)
		}
		if got := mainText(run(t, rt, "kept")); got != "'yes'" {
			t.Errorf("after interrupting %q: kept = %q, want the state kept", code, got)
		}
	}
}

func TestJavaScriptEnvAndCwd(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "local.js"), []byte("module.exports = 'local module'"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "esm.mjs"), []byte("export const v = 'esm module'"), 0o644); err != nil {
		t.Fatal(err)
	}
	rt := startJS(t, dir)
	if got := mainText(run(t, rt, "process.cwd()")); got != "'"+dir+"'" {
		t.Errorf("cwd %s, want %s", got, dir)
	}
	if got := mainText(run(t, rt, "require('./local.js')")); got != "'local module'" {
		t.Errorf("require of a file in cwd = %s", got)
	}
	if got := mainText(run(t, rt, "import { v } from './esm.mjs'; import local from './local.js'; v + ', ' + local")); got != "'esm module, local module'" {
		t.Errorf("import of files in cwd = %s", got)
	}
	t.Setenv("E2B_TEST_KEEP", "") // not inherited: the kernel started before
	restore, err := rt.SetEnv(context.Background(), map[string]string{"A_VAR": "1", "HOME": "/elsewhere"})
	if err != nil {
		t.Fatal(err)
	}
	if got := mainText(run(t, rt, "process.env.A_VAR + process.env.HOME")); got != "'1/elsewhere'" {
		t.Errorf("env after SetEnv = %s", got)
	}
	if err := restore(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := mainText(run(t, rt, "[process.env.A_VAR, process.env.HOME]")); got != "[ undefined, '"+os.Getenv("HOME")+"' ]" {
		t.Errorf("env after restore = %s", got)
	}
}

func TestJavaScriptThroughServer(t *testing.T) {
	requireBinary(t, "node")
	ts := newTestServer(t, func(c *Config) {
		c.Runtimes = map[string]Factory{"javascript": JavaScriptFactory(""), "bash": BashFactory("")}
		c.DefaultCwd = t.TempDir()
	})
	if err := ts.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	status, lines := execute(t, context.Background(), ts.url, map[string]any{
		"code": "console.log(process.env.GREETING); 'abc'", "language": "ts", "env_vars": map[string]string{"GREETING": "hello"},
	}, nil)
	want := []map[string]any{
		{"type": "number_of_executions", "execution_count": 1.0},
		{"type": "stdout", "text": "hello\n"},
		{"type": "result", "is_main_result": true, "text": "abc"},
		{"type": "end_of_execution"},
	}
	if diff := cmp.Diff(want, withoutTimestamps(t, lines)); status != http.StatusOK || diff != "" {
		t.Errorf("status %d, lines (-want +got):\n%s", status, diff)
	}
	_, lines = execute(t, context.Background(), ts.url, map[string]any{"code": "echo $((6*7))", "language": "bash"}, nil)
	if got := withoutTimestamps(t, lines)[1]["text"]; got != "42\n" {
		t.Errorf("bash through the server printed %q", got)
	}
}
