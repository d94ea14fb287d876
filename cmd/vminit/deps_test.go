package main

import (
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/deptest"
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

func TestVminitDependencies(t *testing.T) { deptest.Check(t, allowedModules, allowedPackages) }
