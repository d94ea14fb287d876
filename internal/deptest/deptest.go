// Package deptest checks what a binary links, for the tests that fix the
// dependency list of the binaries that run inside sandboxes (envd, the
// inits): adding one is then a decision, not an accident. It is imported
// only by tests, so it never ships in a binary.
package deptest

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// module is this project's module path.
const module = "github.com/agent-sandbox/agent-sandbox"

// Check fails t for every package the package in the test's directory
// links whose module is not in modules, and, unless packages is nil, for
// every package of this project's not in packages.
func Check(t testing.TB, modules, packages []string) {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if .Module}}{{.Module.Path}} {{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < max(1, len(packages)) {
		t.Fatalf("go list listed %d packages, fewer than the binary's own:\n%s", len(lines), out)
	}
	for _, l := range lines {
		mod, pkg, _ := strings.Cut(l, " ")
		if !slices.Contains(modules, mod) {
			t.Errorf("%s (module %s) is linked, and is not in the allowed list", pkg, mod)
		}
		if packages != nil && mod == module && !slices.Contains(packages, pkg) {
			t.Errorf("%s is linked, and is not among the allowed packages of this project", pkg)
		}
	}
}
