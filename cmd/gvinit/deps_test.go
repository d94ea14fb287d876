package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// gvinit is PID 1 of every gVisor sandbox, beside the sandbox's code, and
// as the launcher runs as root on the host, so its module list is fixed
// here; adding one is a decision, not an accident. Beyond x/sys: x/net
// for the seccomp filter's BPF assembler (package guest).
var allowedModules = []string{
	"github.com/agent-sandbox/agent-sandbox",
	"golang.org/x/net",
	"golang.org/x/sys",
}

// allowedPackages are the project's own packages gvinit may link: the
// guest side and the disk mounts, nothing of the server.
var allowedPackages = []string{
	"github.com/agent-sandbox/agent-sandbox/cmd/gvinit",
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/disk",
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/guest",
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/gvisor/gvinit",
}

func TestGvinitDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if .Module}}{{.Module.Path}} {{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < len(allowedPackages) {
		t.Fatalf("go list listed %d packages, fewer than gvinit's own:\n%s", len(lines), out)
	}
	for _, l := range lines {
		mod, pkg, _ := strings.Cut(l, " ")
		if !slices.Contains(allowedModules, mod) {
			t.Errorf("gvinit depends on %s (module %s), which is not in the allowed list", pkg, mod)
		}
		if mod == "github.com/agent-sandbox/agent-sandbox" && !slices.Contains(allowedPackages, pkg) {
			t.Errorf("gvinit links %s, which is not guest-side", pkg)
		}
	}
}
