package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// vminit is PID 1 of every VM sandbox and runs as root beside the
// sandbox's code, so its module list is fixed here; adding one is a
// decision, not an accident. Beyond x/sys: x/net for the seccomp filter's
// BPF assembler (package guest), the netlink and nftables libraries (and
// what they pull in: mdlayher's netlink and socket, vishvananda/netns,
// x/sync's errgroup) for the guest's network.
var allowedModules = []string{
	"github.com/agent-sandbox/agent-sandbox",
	"github.com/google/nftables",
	"github.com/mdlayher/netlink",
	"github.com/mdlayher/socket",
	"github.com/vishvananda/netlink",
	"github.com/vishvananda/netns",
	"golang.org/x/net",
	"golang.org/x/sync",
	"golang.org/x/sys",
}

// allowedPackages are the project's own packages vminit may link: the
// guest side only, nothing of the server.
var allowedPackages = []string{
	"github.com/agent-sandbox/agent-sandbox/cmd/vminit",
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/guest",
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/vm/vminit",
}

func TestVminitDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if .Module}}{{.Module.Path}} {{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < len(allowedPackages) {
		t.Fatalf("go list listed %d packages, fewer than vminit's own:\n%s", len(lines), out)
	}
	for _, l := range lines {
		mod, pkg, _ := strings.Cut(l, " ")
		if !slices.Contains(allowedModules, mod) {
			t.Errorf("vminit depends on %s (module %s), which is not in the allowed list", pkg, mod)
		}
		if mod == "github.com/agent-sandbox/agent-sandbox" && !slices.Contains(allowedPackages, pkg) {
			t.Errorf("vminit links %s, which is not guest-side", pkg)
		}
	}
}
