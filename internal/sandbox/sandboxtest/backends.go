package sandboxtest

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/gvisor"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/jail"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/jail/jailtest"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/vm"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/vm/kernel"
	"github.com/agent-sandbox/agent-sandbox/internal/network"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
)

// The backends a stack runs on, by the name each reports.
const (
	Jail   = "jail"
	VM     = "vm"
	Gvisor = "gvisor"
)

// Backends are every backend a suite runs its cases on.
var Backends = []string{Jail, VM, Gvisor}

var (
	_ leftovers = (*jail.Backend)(nil)
	_ leftovers = (*vm.Backend)(nil)
	_ leftovers = (*gvisor.Backend)(nil)
)

// RequireVM skips t, saying why, on a host that lacks what the vm
// backend runs with, also for a test that runs `serve --backend vm`;
// under CI=true it fails t.
func RequireVM(t testing.TB) {
	t.Helper()
	_, err := kernel.Open(kernel.DefaultDir)
	testenv.Require(t, err == nil, fmt.Sprintf("the vm backend's guest kernel: %v (run scripts/install-deps.sh --vm)", err))
	for _, bin := range []string{"qemu-system-x86_64", "qemu-img"} {
		_, err := exec.LookPath(bin)
		testenv.Require(t, err == nil, fmt.Sprintf("the vm backend's %s: %v (run scripts/install-deps.sh --vm)", bin, err))
	}
}

// RequireGvisor skips t, saying why, on a host without runsc; under
// CI=true it fails t.
func RequireGvisor(t testing.TB) {
	t.Helper()
	_, err := exec.LookPath("runsc")
	testenv.Require(t, err == nil, fmt.Sprintf("the gvisor backend's runsc: %v (run scripts/install-deps.sh)", err))
}

// backend makes the backend cfg names over host.
func (s *Stack) backend(t testing.TB, cfg Config, host *network.Host, log *slog.Logger) isolation.Backend {
	t.Helper()
	switch s.Backend {
	case Jail:
		b, err := jail.New(jail.Config{
			StateDir: s.StateDir, RunDir: s.RunDir, CgroupParent: s.CgroupParent, Log: log,
			Network: host, Userns: cfg.Userns,
		})
		if cfg.Userns == jail.UsernsOn {
			testenv.Require(t, err == nil, fmt.Sprintf("this host cannot run sandboxes in user namespaces: %v", err))
		}
		if err != nil {
			t.Fatalf("making the jail backend: %v", err)
		}
		return b
	case VM:
		if cfg.Userns != "" {
			t.Fatalf("user namespace mode %q: a jail option, and the backend is vm", cfg.Userns)
		}
		init, err := jailtest.BuildCommand(s.Dir, "vminit")
		if err != nil {
			t.Fatal(err)
		}
		// Snapshots on, as the server runs: the first sandbox boots cold,
		// the others are restored. KVM where the server would use it.
		b, err := vm.New(vm.Config{
			StateDir: s.StateDir, CacheDir: filepath.Join(s.Dir, "vm-boot"), Snapshots: true, Log: log,
			Network: host, Init: init, CgroupParent: s.CgroupParent,
		})
		if err != nil {
			t.Fatalf("making the vm backend: %v", err)
		}
		return b
	case Gvisor:
		if cfg.Userns != "" {
			t.Fatalf("user namespace mode %q: a jail option, and the backend is gvisor", cfg.Userns)
		}
		init, err := jailtest.BuildCommand(s.Dir, "gvinit")
		if err != nil {
			t.Fatal(err)
		}
		b, err := gvisor.New(gvisor.Config{
			StateDir: s.StateDir, Log: log, Network: host, Init: init, CgroupParent: s.CgroupParent,
		})
		if err != nil {
			t.Fatalf("making the gvisor backend: %v", err)
		}
		return b
	}
	t.Fatalf("backend %q: want one of %v", s.Backend, Backends)
	return nil
}

// Cgroup is the host cgroup of sb's processes, relative to the
// hierarchy's root: the jail's group of the sandbox, or the group of the
// VM's QEMU process.
func (s *Stack) Cgroup(sb store.Sandbox) (string, error) {
	var st struct {
		Cgroup string `json:"cgroup"`
	}
	if err := json.Unmarshal(sb.BackendState, &st); err != nil || st.Cgroup == "" {
		return "", fmt.Errorf("reading the cgroup of sandbox %s from %s: %v", sb.ID, sb.BackendState, err)
	}
	return st.Cgroup, nil
}

// Disk is the host file that holds what sb writes to its disk: the jail's
// or gVisor's sparse ext4 image, or the VM's qcow2 overlay over the
// template's image.
func (s *Stack) Disk(sb store.Sandbox) string {
	name := "disk.ext4"
	if s.Backend == VM {
		name = "disk.qcow2"
	}
	return filepath.Join(s.StateDir, sb.ID, name)
}

// Link is sb's network link, from its backend's state (both record it).
func (s *Stack) Link(sb store.Sandbox) (gateway, address netip.Addr, err error) {
	var st struct{ Gateway, Address netip.Addr }
	if err := json.Unmarshal(sb.BackendState, &st); err != nil || !st.Gateway.IsValid() || !st.Address.IsValid() {
		return netip.Addr{}, netip.Addr{}, fmt.Errorf("reading the link of sandbox %s from %s: %v", sb.ID, sb.BackendState, err)
	}
	return st.Gateway, st.Address, nil
}
