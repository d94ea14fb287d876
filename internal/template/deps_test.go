package template

import (
	"os/exec"
	"strings"
	"testing"
)

// The template engine runs build steps through a StepRunner and never
// itself in a backend (DESIGN §3): it imports no isolation backend, nor
// the manager that drives them.
func TestNoBackendImports(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		for _, banned := range []string{"/internal/isolation", "/internal/sandbox", "/internal/network"} {
			if strings.Contains(p, banned) {
				t.Errorf("internal/template depends on %s", p)
			}
		}
	}
}
