package codeinterp

import (
	"context"
	_ "embed"
	"fmt"
	"os/exec"
	"strings"

	"github.com/evanw/esbuild/pkg/api"
)

// kernelJS is the program the JavaScript runtime runs in Node.js.
//
//go:embed node/kernel.js
var kernelJS string

// JavaScriptFactory returns a Factory of JavaScript runtimes, which
// TypeScript contexts use too. node is the Node.js binary; "" means node
// on PATH.
func JavaScriptFactory(node string) Factory {
	return func(ctx context.Context, cwd string) (Runtime, error) {
		return StartJavaScript(ctx, node, cwd)
	}
}

// StartJavaScript starts a JavaScript runtime in cwd: a persistent Node.js
// process running node/kernel.js. Globals, top-level declarations and
// imported modules carry over between executions (top-level let, const and
// class behave like var, so a later cell may declare them again); import
// declarations and top-level await work in every cell.
//
// Every cell goes through stripTypes first, as the official server runs
// every cell of its JavaScript kernel through Babel's TypeScript preset:
// "typescript" and "javascript" contexts differ only in name.
func StartJavaScript(ctx context.Context, node, cwd string) (*ProcessRuntime, error) {
	if node == "" {
		node = "node"
	}
	cmd := exec.Command(node, "--expose-internals", "-e", kernelJS)
	cmd.Dir = cwd
	return startProcess(ctx, "node", cmd, stripTypes)
}

// tsconfig keeps every import that is not marked as a type: a cell that
// only imports a module imports it for later cells.
const tsconfig = `{"compilerOptions": {"verbatimModuleSyntax": true}}`

// stripTypes removes TypeScript's type syntax from a cell (esbuild's
// transform, which type-checks nothing, like Babel's preset), leaving
// plain JavaScript alone. A cell that does not parse is refused with a
// SyntaxError naming the place.
func stripTypes(code string, count int) (string, *Output) {
	file := fmt.Sprintf("<cell %d>", count)
	res := api.Transform(code, api.TransformOptions{
		Loader:      api.LoaderTS,
		Sourcefile:  file,
		TsconfigRaw: tsconfig,
		Charset:     api.CharsetUTF8,
	})
	if len(res.Errors) == 0 {
		return string(res.Code), nil
	}
	e := res.Errors[0]
	var tb strings.Builder
	for _, m := range res.Errors {
		if l := m.Location; l != nil {
			fmt.Fprintf(&tb, "%s:%d:%d: %s\n  %s\n  %s^\n", file, l.Line, l.Column+1, m.Text, l.LineText, strings.Repeat(" ", l.Column))
		} else {
			fmt.Fprintf(&tb, "%s: %s\n", file, m.Text)
		}
	}
	return "", &Output{Kind: Error, Name: "SyntaxError", Value: e.Text, Traceback: strings.TrimSuffix(tb.String(), "\n")}
}
