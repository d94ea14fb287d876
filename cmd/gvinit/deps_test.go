package main

import (
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/deptest"
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

func TestGvinitDependencies(t *testing.T) { deptest.Check(t, allowedModules, allowedPackages) }
